//! The reader's handling of one frame (the demultiplexer's actions: a request, a cancel,
//! a ping, a GOAWAY), the opening of a streaming call, refusals and replies queued for
//! the responder.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::demux::{Action, Demux};
use super::spawn::panicked;
use super::streams::{drive, StreamEnds};
use super::State;
use crate::payload::{self, Inbound};
use crate::server::respond::Reply;
use crate::service::{ServiceFuture, StreamRequest};
use crate::stream::{Inbox, Outbox};
use crate::transport::Connection;
use crate::violation::Violation;
use crate::wire::{Flags, FrameKind, Header};
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

    /// Handles one received frame: the demultiplexer's part, then what it asks of the
    /// shell.
    ///
    /// # Errors
    /// Why the connection must close (a malformed frame, a protocol violation).
    pub(super) async fn handle(
        &mut self,
        buf: C::RecvBuf,
        draining: bool,
    ) -> Result<Acknowledged, Violation> {
        let demux = Demux {
            streams: &self.streams,
            keep: &*self.conn,
            max_message_size: self.inner.config.max_message_size,
        };
        match demux.frame(buf)? {
            Action::Done => {}
            Action::Request { buf, header } => {
                self.touched();
                // A request with a payload is offered to the application: kept, its
                // `bytes` fields are slices of the frame (the transport decides).
                let discarded = header.flags.contains(Flags::DISCARDED);
                let inbound = if header.payload_len > 0 && !discarded {
                    payload::keep(&*self.conn, buf)
                } else {
                    Inbound::Held(buf)
                };
                self.request(inbound, draining).await?
            }
            Action::Cancelled(call_id) => {
                self.touched();
                if let Some((_, handle)) = self.running.lock().remove(&call_id) {
                    tracing::debug!(call_id, "call cancelled by the client");
                    handle.abort();
                } else if self.waiting.cancel(call_id) {
                    tracing::debug!(call_id, "waiting call cancelled by the client");
                }
            }
            Action::Pong(id) => self.reply(Reply::Control(FrameKind::Pong, id)).await,
            Action::GoAway => return Ok(Acknowledged(true)),
        }
        Ok(Acknowledged(false))
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
