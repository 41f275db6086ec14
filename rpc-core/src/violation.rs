//! [`Violation`]: how a peer broke the call protocol. Returned by the sans-IO cores (the
//! client's and the server's call demultiplexers, the streams' inboxes and outboxes);
//! any of these ends the connection it came on, never the process.

use crate::wire::{FrameError, MAX_STREAM_WINDOW};

/// How a peer broke the call protocol: the connection it came on must close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Violation {
    /// The bytes are not a valid frame.
    #[error("malformed frame: {0}")]
    Malformed(#[from] FrameError),
    /// A request stream's message or half-close after its half-close, or a response
    /// stream's message after its end.
    #[error("stream {call_id:#x}: message after the end of the stream")]
    MessageAfterEnd {
        /// The stream.
        call_id: u64,
    },
    /// A stream message sent while the window this side granted was used up.
    #[error("stream {call_id:#x}: message sent past the stream's window")]
    PastWindow {
        /// The stream.
        call_id: u64,
    },
    /// A second END_STREAM on one stream.
    #[error("stream {call_id:#x}: ended twice")]
    EndedTwice {
        /// The stream.
        call_id: u64,
    },
    /// A window update that takes a stream's window past [`MAX_STREAM_WINDOW`].
    #[error("window update of {credits} bytes takes a stream's window past {MAX_STREAM_WINDOW}")]
    WindowOverflow {
        /// The credits granted.
        credits: u32,
    },
    /// The server ended a response stream with a message frame (its end is a response
    /// frame, with the status).
    #[error("stream {call_id:#x} ended by a message frame")]
    MessageEndsStream {
        /// The stream.
        call_id: u64,
    },
    /// The client half-closed a request stream with a frame that carries a payload.
    #[error("stream {call_id:#x}: half-close with a payload")]
    HalfCloseWithPayload {
        /// The stream.
        call_id: u64,
    },
    /// A request whose call id belongs to a call still waiting or running.
    #[error("call id {call_id:#x} is already in use by a running call")]
    CallIdInUse {
        /// The call id.
        call_id: u64,
    },
    /// The client sent a response frame.
    #[error("the client sent a response frame")]
    ResponseFromClient,
}
