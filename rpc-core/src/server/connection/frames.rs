//! The reader's handling of one frame: a request, a stream message, a window update,
//! a cancel, a ping, a GOAWAY; refusals and replies queued for the responder.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::spawn::panicked;
use super::streams::{drive, StreamEnds};
use super::State;
use crate::payload::{self, Inbound};
use crate::server::respond::Reply;
use crate::service::{ServiceFuture, StreamRequest};
use crate::stream::{self, Inbox, Outbox};
use crate::transport::Connection;
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Code, Request, Status, Streaming};

impl<C: Connection> State<C> {
    /// Queues a reply; waits (stops reading) while the reply queue is full.
    pub(super) async fn reply(&mut self, reply: Reply) {
        // The responder only ends when the queue closes, or when the transport is closed.
        let _ = self.replies.send(reply).await;
    }

    /// Answers a call that was not started with `status`, flagged as refused.
    pub(super) async fn refuse(&mut self, call_id: u64, status: Status) {
        self.reply(Reply::Status(call_id, status, Flags::REFUSED))
            .await;
    }

    /// Handles one received frame.
    ///
    /// # Errors
    /// Why the connection must close (a malformed frame, a protocol violation).
    pub(super) async fn handle(
        &mut self,
        buf: C::RecvBuf,
        draining: bool,
    ) -> Result<Acknowledged, String> {
        let frame = Frame::parse(&buf).map_err(|e| format!("malformed frame: {e}"))?;
        let header = frame.header;
        match header.kind {
            FrameKind::Request => {
                self.touched();
                // A request with a payload is offered to the application: kept, its
                // `bytes` fields are slices of the frame (the transport decides).
                let inbound = if header.payload_len > 0 && !frame.is_discarded() {
                    payload::keep(&*self.conn, buf)
                } else {
                    Inbound::Held(buf)
                };
                self.request(inbound, draining).await?
            }
            FrameKind::Message => self.message(buf)?,
            FrameKind::WindowUpdate => {
                let outbox = self
                    .streams
                    .lock()
                    .get(&header.call_id)
                    .and_then(|ends| ends.outbox.clone());
                if let Some(outbox) = outbox {
                    outbox.grant(header.credits)?;
                }
            }
            FrameKind::Cancel => {
                self.touched();
                let call_id = header.call_id;
                if let Some(ends) = self.streams.lock().remove(&call_id) {
                    ends.end(Status::cancelled("the client cancelled the call"));
                }
                if let Some((_, handle)) = self.running.lock().remove(&call_id) {
                    tracing::debug!(call_id, "call cancelled by the client");
                    handle.abort();
                } else if self.waiting.cancel(call_id) {
                    tracing::debug!(call_id, "waiting call cancelled by the client");
                }
            }
            FrameKind::Ping => {
                self.reply(Reply::Control(FrameKind::Pong, header.call_id))
                    .await
            }
            FrameKind::GoAway => return Ok(Acknowledged(true)),
            FrameKind::Response => return Err("client sent a response frame".into()),
            _ => {}
        }
        Ok(Acknowledged(false))
    }

    /// A message of a client's request stream: queued for the handler, within the window.
    ///
    /// # Errors
    /// The client broke the stream's rules.
    pub(super) fn message(&mut self, buf: C::RecvBuf) -> Result<(), String> {
        let header = Frame::parse(&buf)
            .map_err(|e| format!("malformed frame: {e}"))?
            .header;
        let call_id = header.call_id;
        let inbox = self
            .streams
            .lock()
            .get(&call_id)
            .and_then(|ends| ends.inbox.clone());
        let Some(inbox) = inbox else {
            // The call ended (or never streamed requests): messages in flight are dropped.
            tracing::trace!(call_id, "message for a stream no longer open");
            return Ok(());
        };
        // Over the limit: skipped by the transport (DISCARDED) or declared so.
        let max = self.inner.config.max_message_size;
        if header.flags.contains(Flags::DISCARDED) || header.payload_len as usize > max {
            inbox.fail(
                Status::resource_exhausted(format!(
                    "request message of {} bytes exceeds the maximum of {max}",
                    header.payload_len
                )),
                true,
            );
            return Ok(());
        }
        if header.flags.contains(Flags::END_STREAM) {
            if header.payload_len != 0 {
                return Err(format!("stream {call_id:#x}: half-close with a payload"));
            }
            return inbox.close(None);
        }
        let payload = stream::take_payload(&*self.conn, buf, &header);
        inbox.push(header.frame_len(), payload)
    }

    /// Opens the streams of a streaming call and starts its handler: the future that
    /// sends its response stream and ends with its final response.
    ///
    /// # Errors
    /// A status to answer the call with at once.
    pub(super) fn open_stream(
        &mut self,
        header: &Header,
        route: &crate::server::router::Route,
        request: Request<crate::Payload<'_>>,
    ) -> Result<(ServiceFuture, Option<Arc<Inbox>>, u64), Status> {
        let call_id = header.call_id;
        let kind = route.method.kind;
        let ended = header.flags.contains(Flags::END_STREAM);
        let (metadata, payload, timeout) = request.into_parts();
        let mut ends = StreamEnds::default();
        let body = if kind.client_streams() {
            if header.payload_len != 0 {
                return Err(Status::invalid_argument(
                    "the request that opens a client stream carries no message",
                ));
            }
            let inbox = Inbox::with_budget(
                call_id,
                self.control.clone(),
                self.inner.config.stream_window,
                self.budget.clone(),
                self.account.clone(),
            );
            if ended {
                // An empty request stream: the client half-closed with its request.
                let _ = inbox.close(None);
            }
            ends.inbox = Some(inbox.clone());
            StreamRequest::Stream(Streaming::raw(inbox, Code::InvalidArgument))
        } else {
            if !ended {
                return Err(Status::invalid_argument(
                    "a server-streaming call's request must carry its message and END_STREAM",
                ));
            }
            StreamRequest::Message(payload)
        };
        if kind.server_streams() {
            ends.outbox = Some(Arc::new(Outbox::new(header.credits)));
        }
        let mut request = Request::from_parts(metadata, body, timeout);
        request.set_peer(self.peer.clone());
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| {
            route.service.call_streaming(route.index, request)
        }))
        .map_err(|_| panicked())?;
        let inbox = ends.inbox.clone();
        let outbox = ends.outbox.clone();
        self.opened += 1;
        ends.serial = self.opened;
        self.streams.lock().insert(call_id, ends);
        let max = self.inner.config.max_message_size;
        let call = drive(self.conn.clone(), call_id, kind, outbox, call, max);
        Ok((call, inbox, self.opened))
    }

    /// Forgets the streams of call `call_id`, which ended.
    pub(super) fn end_stream(&self, call_id: u64, why: &str) {
        if let Some(ends) = self.streams.lock().remove(&call_id) {
            ends.end(Status::cancelled(why));
        }
    }
}

/// Whether a frame was the client's GOAWAY (it will send no more requests).
pub(super) struct Acknowledged(pub(super) bool);
