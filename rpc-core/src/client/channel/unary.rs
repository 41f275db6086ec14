//! A unary call: admitted to a connection's call table, sent, its response awaited; its
//! guard cancels it on the server when the caller gives up.

use std::sync::Arc;

use tracing::Instrument;

use super::Channel;
use crate::client::calls::NotAdmitted;
use crate::client::connection::Shared;
use crate::layer::ClientCall;
use crate::outbound::{send_frame, send_split};
use crate::payload::{self, Inbound};
use crate::service::MethodDescriptor;
use crate::transport::{Connection, TransportError};
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Code, Metadata, Payload, Request, Response, Status};

/// Times a request the transport did not take is sent again on another connection.
pub(super) const MAX_UNSENT: u32 = 2;

/// Where a call's response comes from.
pub(super) type CallResponse<C> =
    tokio::sync::oneshot::Receiver<crate::client::calls::Outcome<<C as Connection>::RecvBuf>>;

/// How sending a request on a connection ended.
pub(super) enum Sent<C: Connection> {
    /// The transport took it; the call's outcome.
    Answered(Result<Inbound<C::RecvBuf>, Status>),
    /// The transport did not take it (its connection is gone): it never left.
    NotTaken(TransportError),
}

/// [`SplitLarge::split_large`] of a request type.
pub(super) type SplitFn<Req> = fn(&Req, usize) -> Option<(Req, Vec<(u32, bytes::Bytes)>)>;

/// A unary request as each attempt sends it (the timeout aside: a retry sends what is
/// left of it).
pub(super) struct Outgoing<'a, Req> {
    pub(super) metadata: &'a Metadata,
    pub(super) message: &'a Req,
    /// How its large `bytes` fields are split off for a gathered write, if they can be.
    pub(super) split: Option<SplitFn<Req>>,
    pub(super) method: &'a MethodDescriptor,
    /// Its encoded length.
    pub(super) payload_len: usize,
    pub(super) span: &'a tracing::Span,
}

/// The status code of a response frame (`INTERNAL` for one that does not parse).
pub(super) fn response_code(frame: &[u8]) -> Code {
    Frame::parse(frame).map_or(Code::Internal, |f| Code::from_u8(f.header.status))
}

/// Whether `frame` is a response the server flagged as not started and `UNAVAILABLE`.
pub(super) fn is_refused(frame: &[u8]) -> bool {
    Frame::parse(frame).is_ok_and(|f| {
        f.header.flags.contains(Flags::REFUSED)
            && Code::from_u8(f.header.status) == Code::Unavailable
    })
}

/// Removes an abandoned call from the table and tells the server to drop its handler.
///
/// Runs on every exit of a call, including when the caller drops the call's future: that
/// is how dropping a future cancels the call.
pub(super) struct CallGuard<'a, C: Connection> {
    shared: &'a Shared<C>,
    call_id: u64,
    /// Whether the request was handed to the transport (or failed to be).
    sent: bool,
}

impl<C: Connection> CallGuard<'_, C> {
    /// The request left the caller's hands: no longer counted as unsent.
    pub(super) fn mark_sent(&mut self) {
        if !std::mem::replace(&mut self.sent, true) && self.shared.calls.lock().sent() {
            self.shared.control.goaway();
        }
    }
}

impl<C: Connection> Drop for CallGuard<'_, C> {
    fn drop(&mut self) {
        self.mark_sent();
        let was_waiting = self.shared.calls.lock().remove(self.call_id);
        if was_waiting {
            tracing::debug!(
                call_id = self.call_id,
                "call abandoned; cancelling on the server"
            );
            self.shared.control.cancel(self.call_id);
        }
    }
}

pub(super) fn decode_response<B: std::ops::Deref<Target = [u8]>, Resp>(
    inbound: &Inbound<B>,
    max: usize,
    decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
) -> Result<Response<Resp>, Status> {
    let frame = Frame::parse(inbound.bytes())
        .map_err(|e| Status::internal(format!("bad response frame: {e}")))?;
    if frame.is_discarded() {
        return Err(crate::status::discarded(
            "response message",
            &frame.header,
            Some(max),
        ));
    }
    let code = Code::from_u8(frame.header.status);
    if code != Code::Ok {
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        let message = String::from_utf8_lossy(frame.payload);
        return Err(Status::from_metadata(code, message, metadata));
    }
    let metadata = Metadata::decode(frame.metadata).map_err(|e| Status::internal(e.to_string()))?;
    let (metadata, trailers) = metadata.split_trailers();
    let message = decode(inbound.payload(frame.payload))
        .map_err(|e| Status::internal(format!("failed to decode response: {e}")))?;
    let mut response = Response::from_parts(metadata, message);
    *response.trailers_mut() = trailers;
    Ok(response)
}

impl<C: Connection> Channel<C> {
    pub(super) async fn call<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        split: Option<SplitFn<Req>>,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
    {
        let request = self.intercepted(request)?;
        if let Some(stack) = &self.stack {
            let request = request.map(|message| ClientCall::encode(*method, &message));
            let response = self.through_layers(stack, request).await?;
            let (metadata, message, trailers) = response.into_all_parts();
            let message = decode(Payload::Shared(message))
                .map_err(|e| Status::internal(format!("failed to decode response: {e}")))?;
            let mut response = Response::from_parts(metadata, message);
            *response.trailers_mut() = trailers;
            return Ok(response);
        }
        let span = tracing::debug_span!(
            "rpc-call",
            method = method.path,
            call_id = tracing::field::Empty
        );
        let frame = self
            .exchange(request, method, split, &span)
            .instrument(span.clone())
            .await?;
        decode_response(&frame, self.inner.config.max_message_size, decode)
    }

    /// Sends the request once, on the current connection (on a balanced channel, one
    /// other than `last`'s if it can, then kept in `last`), and waits for its response.
    pub(super) async fn attempt<Req: prost::Message>(
        &self,
        request: &Outgoing<'_, Req>,
        timeout: Option<std::time::Duration>,
        last: &mut Option<Arc<Shared<C>>>,
    ) -> Result<Inbound<C::RecvBuf>, Status> {
        let mut unsent = 0;
        loop {
            let (shared, call_id, response) = self.admitted(last).await?;
            let sent = self
                .send_and_wait(&shared, (call_id, response), request, timeout)
                .await;
            match sent {
                Sent::Answered(result) => return result,
                // The transport did not take the request: it never left, so a channel
                // that has other connections (or makes new ones) sends it on another.
                Sent::NotTaken(e) if self.reconnects() && unsent < MAX_UNSENT => {
                    tracing::debug!("request not taken by the transport ({e}); picking again");
                    unsent += 1;
                    // Not picked again: it takes no more calls, though its reader may
                    // not have seen the end yet (calls in flight on it still end there).
                    let first = {
                        let mut calls = shared.calls.lock();
                        let first = !calls.is_draining();
                        let _ = calls.drain(); // (no acknowledgement: it is gone)
                        first
                    };
                    if first {
                        shared.changed();
                    }
                }
                Sent::NotTaken(e) => return Err(e.into()),
            }
        }
    }

    /// A connection (on a balanced channel, one other than `last`'s if it can, then kept
    /// in `last`) and the call's place in its table.
    pub(super) async fn admitted(
        &self,
        last: &mut Option<Arc<Shared<C>>>,
    ) -> Result<(Arc<Shared<C>>, u64, CallResponse<C>), Status> {
        let mut draining_seen = 0;
        loop {
            let shared = self.ready(last.as_deref()).await?;
            *last = Some(shared.clone());
            let inserted = shared.calls.lock().insert();
            match inserted {
                Ok((call_id, response)) => return Ok((shared, call_id, response)),
                // The connection closed between the pick and now: nothing was sent, so a
                // channel that has others (or makes new ones) picks again.
                Err(NotAdmitted::Closed(status)) if !self.reconnects() || draining_seen > 2 => {
                    return Err(status)
                }
                Err(NotAdmitted::Closed(_)) => draining_seen += 1,
                // Without reconnecting there is no other connection; with it, `ready`
                // replaces the draining one (a race with another caller: try again).
                Err(NotAdmitted::Draining) if !self.reconnects() || draining_seen > 2 => {
                    return Err(Status::unavailable("server is shutting down (GOAWAY)"))
                }
                Err(NotAdmitted::Draining) => draining_seen += 1,
            }
        }
    }

    /// Sends `request` as call `call_id` on `shared` and waits for its `response`.
    pub(super) async fn send_and_wait<Req: prost::Message>(
        &self,
        shared: &Shared<C>,
        (call_id, response): (u64, CallResponse<C>),
        request: &Outgoing<'_, Req>,
        timeout: Option<std::time::Duration>,
    ) -> Sent<C> {
        let Outgoing {
            metadata,
            message,
            split,
            method,
            payload_len,
            span,
        } = *request;
        span.record("call_id", call_id);
        let mut guard = CallGuard {
            shared,
            call_id,
            sent: false,
        };
        let mut header = Header::new(FrameKind::Request, call_id);
        header.flags = Flags::END_STREAM;
        header.method_id = method.id;
        header.timeout_us = timeout.map_or(0, |t| t.as_micros().clamp(1, u64::MAX as u128) as u64);
        header.payload_len = payload_len as u32;
        shared.conn.calling(method);
        // Large `bytes` fields go by gathered write where the transport has one.
        let split = split
            .zip(shared.conn.gather_min())
            .and_then(|(split, min)| split(message, min));
        let sent = match split {
            Some((rest, fields)) => {
                let rest_len = rest.encoded_len();
                let encode = |buf: &mut C::SendBuf| rest.encode_raw(buf);
                send_split(&*shared.conn, header, metadata, rest_len, encode, fields).await
            }
            None => {
                send_frame(&*shared.conn, header, metadata, |buf| {
                    message.encode_raw(buf)
                })
                .await
            }
        };
        guard.mark_sent();
        match sent {
            Ok(()) => {}
            Err(e @ (TransportError::Closed | TransportError::Io(_))) => return Sent::NotTaken(e),
            Err(e) => return Sent::Answered(Err(e.into())),
        }
        let frame = await_response(shared, response)
            .await
            .unwrap_or_else(|()| Err(Status::unavailable("connection closed")));
        if let Some(endpoint) = &shared.endpoint {
            // A refusal by a draining server says nothing of the endpoint's health.
            match &frame {
                Ok(frame) if is_refused(&frame[..]) => {}
                Ok(frame) => endpoint.record(response_code(&frame[..])),
                Err(status) => endpoint.record(status.code()),
            }
        }
        // Answered calls left the table when their response arrived; a call that is still
        // there (deadline, failed send) is cancelled on the server by the guard.
        drop(guard);
        Sent::Answered(frame.map(|frame| {
            // A successful response with a payload is offered to the caller: kept, its
            // `bytes` fields are slices of the frame (the transport decides).
            let keep = Frame::parse(&frame[..]).is_ok_and(|f| {
                f.header.status == Code::Ok as u8 && f.header.payload_len > 0 && !f.is_discarded()
            });
            if keep {
                payload::keep(&*shared.conn, frame)
            } else {
                Inbound::Held(frame)
            }
        }))
    }
}

/// Waits for a sent call's response. The transport may first poll for it from this task
/// ([`Connection::spin_until`]; only for a call alone on its connection): the response is
/// then found without a wake-up. `Err(())`: the connection closed without one.
async fn await_response<C: Connection>(
    shared: &Shared<C>,
    mut response: CallResponse<C>,
) -> Result<crate::client::calls::Outcome<C::RecvBuf>, ()> {
    use tokio::sync::oneshot::error::TryRecvError;
    let mut found = None;
    // Whether this call still waits (it is in the table until its response came).
    let waiting = std::cell::Cell::new(true);
    shared.conn.spin_until(
        // Asked again after it said true, it says true again (the channel is spent).
        &mut || {
            if found.is_some() {
                return true;
            }
            match response.try_recv() {
                Ok(outcome) => found = Some(Ok(outcome)),
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Closed) => found = Some(Err(())),
            }
            waiting.set(false);
            true
        },
        &|| shared.calls.lock().len() > usize::from(waiting.get()),
    );
    match found {
        Some(found) => found,
        None => response.await.map_err(|_| ()),
    }
}
