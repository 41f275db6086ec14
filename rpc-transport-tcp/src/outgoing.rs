//! What a connection hands its writer: frames, each with the room it reserved.

use bytes::{Bytes, BytesMut};
use rdmarpc_core::account::Charge;
use tokio::sync::OwnedSemaphorePermit;

/// A frame queued for the writer, with the share of the byte budget (and of the
/// server's account) it holds.
pub(crate) type Queued = (OutFrame, SendReservation);

/// A frame to write: `head`, then the `tail` parts in order (a gathered write: large
/// `bytes` fields are written from where they lie, not copied into `head`).
#[derive(Debug)]
pub(crate) struct OutFrame {
    pub(crate) head: BytesMut,
    pub(crate) tail: Vec<Bytes>,
}

impl OutFrame {
    /// The frame's length.
    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.tail.iter().map(Bytes::len).sum::<usize>()
    }
}

/// Room reserved in a connection's send queue for one frame, from
/// [`TcpConnection::reserve`](crate::TcpConnection::reserve), and on a server the frame's
/// bytes on the connection's account
/// ([`Resource::Sending`](rdmarpc_core::account::Resource::Sending)) until it is written;
/// dropping it unused gives both back.
#[derive(Debug)]
pub struct SendReservation {
    pub(crate) _queue: OwnedSemaphorePermit,
    pub(crate) _account: Charge,
}
