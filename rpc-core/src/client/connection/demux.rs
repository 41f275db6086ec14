//! Received frames to their calls: the connection's call table fed with responses,
//! stream messages, window updates and control frames.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Shared;
use crate::client::calls::Waiter;
use crate::stream::Inbox;
use crate::transport::{Connection, FrameSink, TransportError};
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Code, Metadata, Status};

/// Most frames the receive loop handles as one run.
pub(super) const MAX_RUN: usize = 256;

/// The header of a frame that is a stream message with a payload to queue.
pub(super) fn stream_message(buf: &[u8]) -> Option<Header> {
    let header = Frame::parse(buf).ok()?.header;
    (header.kind == FrameKind::Message
        && !header.flags.contains(Flags::DISCARDED)
        && !header.flags.contains(Flags::END_STREAM))
    .then_some(header)
}

/// Hands a run of received frames to their callers: consecutive messages of one stream
/// go to its inbox together (one lookup, one lock, one wake-up, one allocation for
/// their copies), anything else frame by frame as [`dispatch`] does.
pub(super) fn dispatch_run<C: Connection>(
    shared: &Shared<C>,
    run: &mut Vec<C::RecvBuf>,
) -> Result<(), Status> {
    if run.len() == 1 {
        return dispatch(shared, run.pop().expect("one"));
    }
    let mut frames = run.drain(..).peekable();
    let mut group = Vec::new();
    while let Some(buf) = frames.next() {
        let Some(header) = stream_message(&buf) else {
            dispatch(shared, buf)?;
            continue;
        };
        let call_id = header.call_id;
        group.push((buf, header));
        while let Some(header) = frames
            .peek()
            .and_then(|next| stream_message(next))
            .filter(|h| h.call_id == call_id)
        {
            group.push((frames.next().expect("peeked"), header));
        }
        if group.len() == 1 {
            let (buf, _) = group.pop().expect("one");
            dispatch(shared, buf)?;
            continue;
        }
        shared.heard.store(true, Ordering::Relaxed);
        let inbox = match shared.calls.lock().get(call_id) {
            Some(Waiter::Stream(inbox, _)) => inbox.clone(),
            _ => {
                tracing::trace!(call_id, "messages for a stream no longer open");
                group.clear();
                continue;
            }
        };
        let payloads = crate::stream::take_payloads(&*shared.conn, group.drain(..));
        inbox
            .push_run(payloads)
            .map_err(|e| Status::unavailable(format!("protocol violation by the server: {e}")))?;
    }
    Ok(())
}

/// Hands one received frame to its caller, or to the control queue. An error ends the
/// connection (a malformed frame).
pub(super) fn dispatch<C: Connection>(shared: &Shared<C>, buf: C::RecvBuf) -> Result<(), Status> {
    shared.heard.store(true, Ordering::Relaxed);
    let header = match Frame::parse(&buf) {
        Ok(frame) => frame.header,
        Err(e) => {
            tracing::warn!(peer = %shared.conn.peer(), "closing connection: malformed frame: {e}");
            return Err(Status::unavailable(format!(
                "malformed frame from server: {e}"
            )));
        }
    };
    match header.kind {
        FrameKind::Response => response(shared, buf, &header),
        FrameKind::Message => message(shared, buf, &header),
        FrameKind::WindowUpdate => window_update(shared, &header),
        FrameKind::Ping => {
            shared.control.pong(header.call_id);
            Ok(())
        }
        FrameKind::GoAway => {
            go_away(shared);
            Ok(())
        }
        kind => {
            tracing::trace!(?kind, "ignoring frame");
            Ok(())
        }
    }
}

/// A response frame: a unary call's answer, or a stream's headers or end.
fn response<C: Connection>(
    shared: &Shared<C>,
    buf: C::RecvBuf,
    header: &Header,
) -> Result<(), Status> {
    let call_id = header.call_id;
    let mut calls = shared.calls.lock();
    if let Some(Waiter::Stream(inbox, _)) = calls.get(call_id) {
        let inbox = inbox.clone();
        let end = header.flags.contains(Flags::END_STREAM);
        if end {
            if let Some(Waiter::Stream(_, Some(outbox))) = calls.take(call_id) {
                outbox.close(Status::cancelled("the call ended"));
            }
        }
        drop(calls);
        return stream_response(&inbox, &buf, end);
    }
    if !header.flags.contains(Flags::END_STREAM) {
        // Response headers for a call that expects one response: the server
        // streams this method (client and server disagree on its kind).
        if let Some(waiter) = calls.take(call_id) {
            drop(calls);
            let status = Status::internal(
                "the server answered with a stream: the client and the server \
                 disagree on the method's kind",
            );
            waiter.fail(status);
            shared.control.cancel_stream(call_id);
        }
        return Ok(());
    }
    if !calls.complete(call_id, Ok(buf)) {
        tracing::trace!(call_id, "response to a call no longer waiting");
    }
    Ok(())
}

/// A message of a response stream, queued in its inbox.
fn message<C: Connection>(
    shared: &Shared<C>,
    buf: C::RecvBuf,
    header: &Header,
) -> Result<(), Status> {
    let call_id = header.call_id;
    let calls = shared.calls.lock();
    let Some(Waiter::Stream(inbox, _)) = calls.get(call_id) else {
        tracing::trace!(call_id, "message for a stream no longer open");
        return Ok(());
    };
    let inbox = inbox.clone();
    drop(calls);
    if header.flags.contains(Flags::DISCARDED) {
        inbox.fail(too_large(header.payload_len as usize), true);
        if shared.calls.lock().take(call_id).is_some() {
            shared.control.cancel_stream(call_id);
        }
        return Ok(());
    }
    if header.flags.contains(Flags::END_STREAM) {
        return Err(Status::unavailable(format!(
            "protocol violation by the server: stream {call_id:#x} ended by a message frame"
        )));
    }
    let payload = crate::stream::take_payload(&*shared.conn, buf, header);
    inbox
        .push(header.frame_len(), payload)
        .map_err(|e| Status::unavailable(format!("protocol violation by the server: {e}")))
}

/// More window for a request stream.
fn window_update<C: Connection>(shared: &Shared<C>, header: &Header) -> Result<(), Status> {
    let calls = shared.calls.lock();
    let outbox = match calls.get(header.call_id) {
        Some(Waiter::Upload(_, outbox) | Waiter::Stream(_, Some(outbox))) => outbox.clone(),
        _ => return Ok(()),
    };
    drop(calls);
    outbox
        .grant(header.credits)
        .map_err(|e| Status::unavailable(format!("protocol violation by the server: {e}")))
}

/// The server is going away: no new calls here, the GOAWAY acknowledged once the calls
/// sent before it are accounted for.
fn go_away<C: Connection>(shared: &Shared<C>) {
    tracing::debug!(peer = %shared.conn.peer(), "server is going away (GOAWAY)");
    let mut calls = shared.calls.lock();
    let first = !calls.is_draining();
    let acknowledge = calls.drain();
    drop(calls);
    if acknowledge {
        shared.control.goaway();
    }
    // Once: a server repeating GOAWAY does not wake every waiting pick again.
    if first {
        shared.changed();
    }
}

/// A response frame of a server-streaming or bidirectional call: its headers, or (`end`)
/// its status and trailers.
pub(super) fn stream_response(inbox: &Inbox, buf: &[u8], end: bool) -> Result<(), Status> {
    let frame = Frame::parse(buf).map_err(|e| Status::unavailable(e.to_string()))?;
    let metadata = Metadata::decode(frame.metadata)
        .map_err(|e| Status::unavailable(format!("malformed metadata from server: {e}")));
    if !end {
        inbox.set_headers(metadata?);
        return Ok(());
    }
    let code = Code::from_u8(frame.header.status);
    if code != Code::Ok {
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        let message = String::from_utf8_lossy(frame.payload);
        inbox.fail(Status::from_metadata(code, message, metadata), false);
        return Ok(());
    }
    match metadata {
        Ok(trailers) => inbox
            .close(Some(trailers))
            .map_err(|e| Status::unavailable(format!("protocol violation by the server: {e}"))),
        Err(status) => {
            inbox.fail(Status::internal(status.message()), false);
            Ok(())
        }
    }
}

pub(super) fn too_large(len: usize) -> Status {
    Status::resource_exhausted(format!("stream message of {len} bytes exceeds the maximum"))
}

/// The connection is gone: every call on it fails with `reason`.
pub(super) fn ended<C: Connection>(shared: &Shared<C>, reason: Status) {
    tracing::debug!(peer = %shared.conn.peer(), "channel closed: {}", reason.message());
    shared.calls.lock().close(reason);
    shared.conn.close();
    shared.changed();
}

/// The receive path for a transport that runs to completion ([`Connection::push_to`]):
/// the transport's completion path hands each response straight to its caller, with no
/// receive task in between.
pub(super) struct Dispatch<C: Connection> {
    shared: std::sync::Weak<Shared<C>>,
    /// Set once the connection ended (frames after that are dropped).
    ended: AtomicBool,
}

impl<C: Connection> Dispatch<C> {
    /// Hands frames to the calls of `shared` while it lives.
    pub(super) fn new(shared: std::sync::Weak<Shared<C>>) -> Dispatch<C> {
        Dispatch {
            shared,
            ended: AtomicBool::new(false),
        }
    }
}

impl<C: Connection> FrameSink<C::RecvBuf> for Dispatch<C> {
    fn frame(&self, buf: C::RecvBuf) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Err(reason) = dispatch(&shared, buf) {
            self.ended.store(true, Ordering::Release);
            ended(&shared, reason);
        }
    }

    fn frames(&self, frames: &mut Vec<C::RecvBuf>) {
        if self.ended.load(Ordering::Acquire) {
            frames.clear();
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            frames.clear();
            return;
        };
        if let Err(reason) = dispatch_run(&shared, frames) {
            frames.clear();
            self.ended.store(true, Ordering::Release);
            ended(&shared, reason);
        }
    }

    fn closed(&self, result: Result<(), TransportError>) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            let reason = match result {
                Ok(()) => Status::unavailable("connection closed by peer"),
                Err(e) => Status::unavailable(e.to_string()),
            };
            ended(&shared, reason);
        }
    }
}
