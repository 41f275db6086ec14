//! Streams: the flow-controlled halves of a streaming call, shared by client and server.
//!
//! Each direction of a stream has a window in frame bytes (see the wire docs): the
//! receiving side's [`Inbox`] grants it and checks the peer keeps to it, the sending
//! side's [`Outbox`] waits while it is spent. An inbox holds at most its window plus one
//! message (a message may be sent while the window is positive, whatever its length), so
//! a consumer that does not read bounds what its stream buffers, and the peer's other
//! streams on the connection go on: the connection's reader never waits for a stream.
//!
//! [`Streaming`] is the application's view of an inbox: a [`Stream`] of decoded
//! messages, on the client (a response stream) and on the server (a request stream).

mod budget;
mod inbox;
mod outbox;
mod payloads;
mod reading;
mod streaming;

pub(crate) use self::budget::Budget;
pub(crate) use self::inbox::Inbox;
pub(crate) use self::outbox::Outbox;
pub(crate) use self::payloads::{take_payload, take_payloads, Keep};
#[cfg_attr(not(feature = "unstable-fuzzing"), allow(unused_imports))]
pub(crate) use self::reading::Reading;
pub(crate) use self::streaming::CallHandle;
pub use self::streaming::{IntoStreamingRequest, Streaming};

#[cfg(test)]
mod tests;
