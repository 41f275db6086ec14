//! The server's call demultiplexer: a connection's received frames to its calls.
//!
//! Sans-IO: frames in; out, the request streams' messages, half-closes and failures
//! (queued in their inboxes, which grant window through the connection's control queue),
//! the response streams' window, and an [`Action`] for what needs the shell: a request to
//! start, a call to stop, a PING to answer, the client's GOAWAY. The reader (`frames.rs`)
//! feeds it and closes the connection on a [`Violation`]. Unit tests in
//! `demux_tests.rs`; fuzz target `server_demux` (through [`crate::fuzzing`]).

use std::collections::HashMap;
use std::ops::Deref;

use parking_lot::Mutex;

use super::streams::StreamEnds;
use crate::stream::Keep;
use crate::violation::Violation;
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::Status;

/// What a frame asks of the shell once the demultiplexer handled its part.
#[derive(Debug)]
pub(crate) enum Action<B> {
    /// Nothing more.
    Done,
    /// A request: the shell checks its call id, routes it, charges it and starts or
    /// queues its handler (or answers it with a status).
    Request {
        /// The frame.
        buf: B,
        /// Its header.
        header: Header,
    },
    /// The client cancelled the call: its streams are ended; the shell stops its handler
    /// (or drops it from the waiting queue).
    Cancelled(u64),
    /// Answer a PING with this id.
    Pong(u64),
    /// The client's GOAWAY: it sends no more requests.
    GoAway,
}

/// One connection's open streams, who keeps received frames, and the largest message
/// accepted.
pub(crate) struct Demux<'a, K> {
    pub(crate) streams: &'a Mutex<HashMap<u64, StreamEnds>>,
    /// The transport (whether a frame is kept or copied out).
    pub(crate) keep: &'a K,
    pub(crate) max_message_size: usize,
}

impl<K> Demux<'_, K> {
    /// Handles one received frame.
    ///
    /// # Errors
    /// The frame breaks the protocol (malformed, a response from the client, or against
    /// its stream's rules).
    pub(crate) fn frame<B: Deref<Target = [u8]>>(&self, buf: B) -> Result<Action<B>, Violation>
    where
        K: Keep<B>,
    {
        let header = Frame::parse(&buf)?.header;
        match header.kind {
            FrameKind::Request => return Ok(Action::Request { buf, header }),
            FrameKind::Message => self.message(buf, &header)?,
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
                let call_id = header.call_id;
                if let Some(ends) = self.streams.lock().remove(&call_id) {
                    ends.end(Status::cancelled("the client cancelled the call"));
                }
                return Ok(Action::Cancelled(call_id));
            }
            FrameKind::Ping => return Ok(Action::Pong(header.call_id)),
            FrameKind::GoAway => return Ok(Action::GoAway),
            FrameKind::Response => return Err(Violation::ResponseFromClient),
            kind => tracing::trace!(?kind, "ignoring frame"),
        }
        Ok(Action::Done)
    }

    /// A message of a client's request stream: queued for the handler, within the
    /// window.
    fn message<B: Deref<Target = [u8]>>(&self, buf: B, header: &Header) -> Result<(), Violation>
    where
        K: Keep<B>,
    {
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
        let max = self.max_message_size;
        if header.flags.contains(Flags::DISCARDED) || header.payload_len as usize > max {
            inbox.fail(
                crate::status::discarded("request message", header, Some(max)),
                true,
            );
            return Ok(());
        }
        if header.flags.contains(Flags::END_STREAM) {
            if header.payload_len != 0 {
                return Err(Violation::HalfCloseWithPayload { call_id });
            }
            return inbox.close(None);
        }
        let payload = crate::stream::take_payload(self.keep, buf, header);
        inbox.push(header.frame_len(), payload)
    }
}

#[cfg(test)]
#[path = "demux_tests.rs"]
mod tests;
