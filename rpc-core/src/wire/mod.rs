//! The wire protocol shared by every transport: header codec and frame parsing.
//!
//! Pure functions with no I/O: transports use them to delimit frames, the runtime to
//! build and read them.

mod error;
mod frame;
mod header;
mod run;
#[cfg(test)]
mod tests;

pub use error::FrameError;
pub use frame::{encode_head, Frame};
pub(crate) use header::PAYLOAD_LEN_AT;
pub use header::{
    Flags, FrameKind, Header, HEADER_LEN, INITIAL_STREAM_WINDOW, MAGIC, MAX_STREAM_WINDOW, VERSION,
};
pub use run::{is_plain_message, message_run};
