//! The client's call demultiplexer: a connection's received frames to its calls.
//!
//! Sans-IO: frames in; out, the calls' outcomes (a unary call's response, a stream's
//! headers, messages and end, more window for a request stream, a call failed) and the
//! control frames to send (PONG, CANCEL, the GOAWAY acknowledgement) queued in the
//! connection's [`ControlQueue`], which the connection's control task sends. The receive
//! shell (`receive.rs`) feeds it and ends the connection on a [`Violation`]. Unit tests in
//! `demux_tests.rs`; fuzz target `client_demux` (through [`crate::fuzzing`]).

use std::ops::Deref;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::client::calls::{CallTable, Waiter};
use crate::control::ControlQueue;
use crate::stream::{Inbox, Keep};
use crate::violation::Violation;
use crate::wire::{is_plain_message, Flags, Frame, FrameError, FrameKind, Header, HEADER_LEN};
use crate::{Code, Metadata, Status};

/// What the shell learns from a frame besides what the demultiplexer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Heard {
    /// Nothing more to do.
    Frame,
    /// The server's first GOAWAY: the connection takes no new calls (a balanced
    /// endpoint is told).
    Draining,
}

impl Heard {
    pub(crate) fn or(self, other: Heard) -> Heard {
        if self == Heard::Draining {
            self
        } else {
            other
        }
    }
}

/// One connection's calls and control queue, and who keeps received frames.
pub(crate) struct Demux<'a, B, K> {
    pub(crate) calls: &'a Mutex<CallTable<B>>,
    pub(crate) control: &'a ControlQueue,
    /// The transport (whether a frame is kept or copied out).
    pub(crate) keep: &'a K,
}

/// The header of a frame that is a stream message with a payload to queue.
fn stream_message(buf: &[u8]) -> Option<Header> {
    let header = Frame::parse(buf).ok()?.header;
    (header.kind == FrameKind::Message
        && !header.flags.contains(Flags::DISCARDED)
        && !header.flags.contains(Flags::END_STREAM))
    .then_some(header)
}

impl<B: Deref<Target = [u8]>, K: Keep<B>> Demux<'_, B, K> {
    /// Hands a run of received frames to their calls (and drains `run`): consecutive
    /// messages of one stream go to its inbox together (one lookup, one lock, one
    /// wake-up, one allocation for their copies), anything else frame by frame as
    /// [`Demux::frame`] does.
    ///
    /// # Errors
    /// The first frame that breaks the protocol; the frames after it are dropped.
    pub(crate) fn run(&self, run: &mut Vec<B>) -> Result<Heard, Violation> {
        if run.len() == 1 {
            return self.frame(run.pop().expect("one"));
        }
        let mut heard = Heard::Frame;
        let mut frames = run.drain(..).peekable();
        let mut group = Vec::new();
        while let Some(buf) = frames.next() {
            let Some(header) = stream_message(&buf) else {
                heard = heard.or(self.frame(buf)?);
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
                heard = heard.or(self.frame(buf)?);
                continue;
            }
            let inbox = match self.calls.lock().get(call_id) {
                Some(Waiter::Stream(inbox, _)) => inbox.clone(),
                _ => {
                    tracing::trace!(call_id, "messages for a stream no longer open");
                    group.clear();
                    continue;
                }
            };
            let payloads = crate::stream::take_payloads(self.keep, group.drain(..));
            inbox.push_run(payloads)?;
        }
        Ok(heard)
    }

    /// Hands a run of stream messages (whole plain `Message` frames back to back, from
    /// [`Connection::recv_ready_run`](crate::Connection::recv_ready_run)) to their
    /// streams: each stream's consecutive messages are copied together out of the
    /// transport's buffer (which they must not pin while they wait to be read) and
    /// queued as one entry that the reader splits.
    ///
    /// # Errors
    /// The run is not what the transport promised (a frame that is not a whole plain
    /// message), or a stream's rules are broken.
    pub(crate) fn messages(&self, run: &[u8]) -> Result<Heard, Violation> {
        let mut at = 0;
        while at < run.len() {
            let start = at;
            let (call_id, mut last_len) = plain_message(&run[at..])?;
            at += last_len;
            // A bad frame ends the run (and the connection) after the messages before it.
            let mut bad = Ok(());
            while at < run.len() {
                match plain_message(&run[at..]) {
                    Ok((next, len)) if next == call_id => {
                        at += len;
                        last_len = len;
                    }
                    Ok(_) => break,
                    Err(violation) => {
                        bad = Err(violation);
                        break;
                    }
                }
            }
            // The call table's lock is let go before the copy.
            let inbox = match self.calls.lock().get(call_id) {
                Some(Waiter::Stream(inbox, _)) => Some(inbox.clone()),
                _ => None,
            };
            let Some(inbox) = inbox else {
                tracing::trace!(call_id, "messages for a stream no longer open");
                bad?;
                continue;
            };
            inbox.push_frames(Bytes::copy_from_slice(&run[start..at]), last_len)?;
            bad?;
        }
        Ok(Heard::Frame)
    }

    /// Hands one received frame to its call, or answers it (PING, GOAWAY).
    ///
    /// # Errors
    /// The frame breaks the protocol (malformed, or against its stream's rules).
    pub(crate) fn frame(&self, buf: B) -> Result<Heard, Violation> {
        let header = Frame::parse(&buf)?.header;
        match header.kind {
            FrameKind::Response => self.response(buf, &header)?,
            FrameKind::Message => self.message(buf, &header)?,
            FrameKind::WindowUpdate => self.window_update(&header)?,
            FrameKind::Ping => self.control.pong(header.call_id),
            FrameKind::GoAway => return Ok(self.go_away()),
            kind => tracing::trace!(?kind, "ignoring frame"),
        }
        Ok(Heard::Frame)
    }

    /// A response frame: a unary call's answer, or a stream's headers or end.
    fn response(&self, buf: B, header: &Header) -> Result<(), Violation> {
        let call_id = header.call_id;
        let mut calls = self.calls.lock();
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
                self.control.cancel_stream(call_id);
            }
            return Ok(());
        }
        if !calls.complete(call_id, Ok(buf)) {
            tracing::trace!(call_id, "response to a call no longer waiting");
        }
        Ok(())
    }

    /// A message of a response stream, queued in its inbox.
    fn message(&self, buf: B, header: &Header) -> Result<(), Violation> {
        let call_id = header.call_id;
        let calls = self.calls.lock();
        let Some(Waiter::Stream(inbox, _)) = calls.get(call_id) else {
            tracing::trace!(call_id, "message for a stream no longer open");
            return Ok(());
        };
        let inbox = inbox.clone();
        drop(calls);
        if header.flags.contains(Flags::DISCARDED) {
            inbox.fail(
                crate::status::discarded("stream message", header, None),
                true,
            );
            if self.calls.lock().take(call_id).is_some() {
                self.control.cancel_stream(call_id);
            }
            return Ok(());
        }
        if header.flags.contains(Flags::END_STREAM) {
            return Err(Violation::MessageEndsStream { call_id });
        }
        let payload = crate::stream::take_payload(self.keep, buf, header);
        inbox.push(header.frame_len(), payload)
    }

    /// More window for a request stream.
    fn window_update(&self, header: &Header) -> Result<(), Violation> {
        let calls = self.calls.lock();
        let outbox = match calls.get(header.call_id) {
            Some(Waiter::Upload(_, outbox) | Waiter::Stream(_, Some(outbox))) => outbox.clone(),
            _ => return Ok(()),
        };
        drop(calls);
        outbox.grant(header.credits)
    }

    /// The server is going away: no new calls here, the GOAWAY acknowledged once the
    /// calls sent before it are accounted for.
    fn go_away(&self) -> Heard {
        let mut calls = self.calls.lock();
        let first = !calls.is_draining();
        let acknowledge = calls.drain();
        drop(calls);
        if acknowledge {
            self.control.goaway();
        }
        // Once: a server repeating GOAWAY does not wake every waiting pick again.
        if first {
            Heard::Draining
        } else {
            Heard::Frame
        }
    }
}

/// A response frame of a server-streaming or bidirectional call: its headers, or (`end`)
/// its status and trailers. Malformed headers end the connection; malformed trailers
/// fail the stream.
fn stream_response(inbox: &Inbox, buf: &[u8], end: bool) -> Result<(), Violation> {
    let frame = Frame::parse(buf)?;
    let metadata = Metadata::decode(frame.metadata);
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
        Ok(trailers) => inbox.close(Some(trailers)),
        Err(e) => {
            let status = format!("malformed metadata from server: {e}");
            inbox.fail(Status::internal(status), false);
            Ok(())
        }
    }
}

/// The call and the length of the frame at the front of a run of stream messages.
///
/// # Errors
/// The run does not begin with a whole plain message frame (which the transport
/// promised).
fn plain_message(run: &[u8]) -> Result<(u64, usize), Violation> {
    let header = Header::decode(run)?.filter(|h| is_plain_message(h) && h.frame_len() <= run.len());
    match header {
        Some(header) => Ok((header.call_id, header.frame_len())),
        None => Err(Violation::Malformed(FrameError::LengthMismatch {
            declared: HEADER_LEN,
            actual: run.len(),
        })),
    }
}

#[cfg(test)]
#[path = "demux_tests.rs"]
mod tests;
