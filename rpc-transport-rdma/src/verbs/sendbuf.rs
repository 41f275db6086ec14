//! [`SendBuf`]: the buffer a frame is encoded into, as `bytes::BufMut`.
//!
//! `BufMut` is an `unsafe trait` (its `advance_mut` promises initialised bytes), so its
//! one implementation lives here, in the only module allowed `unsafe`. The memory is
//! either a `BytesMut` (TCP) or registered memory owned through a token (a send slot or
//! a rendezvous buffer), which is always initialised (registered regions are zeroed at
//! allocation).

use bytes::buf::UninitSlice;
use bytes::{BufMut, BytesMut};

/// Where a frame is being written.
#[derive(Debug)]
pub(crate) enum Target {
    /// TCP: a heap buffer.
    Bytes(BytesMut),
    /// RDMA: registered memory reached through [`RegisteredTarget::area_mut`].
    Registered(crate::connection::RegisteredSend),
}

/// Registered memory a frame can be written into.
pub(crate) trait RegisteredTarget {
    /// The frame's whole writable area (exactly the frame's length).
    fn area_mut(&mut self) -> &mut [u8];
}

/// Room for one frame of a known length, in the transport's own memory. Filled by the
/// runtime through `bytes::BufMut`, then handed to `send`.
#[derive(Debug)]
pub struct SendBuf {
    pub(crate) target: Target,
    /// Bytes written so far (registered targets).
    pub(crate) filled: usize,
    /// The frame's length (registered targets).
    pub(crate) cap: usize,
    /// TCP: the room reserved for this frame in the connection's send queue.
    pub(crate) reservation: Option<rdmarpc_transport_tcp::SendReservation>,
}

impl SendBuf {
    /// A heap buffer for a frame of `len` bytes, with no room reserved (gRPC).
    pub fn heap(len: usize) -> SendBuf {
        SendBuf {
            target: Target::Bytes(BytesMut::with_capacity(len)),
            filled: 0,
            cap: len,
            reservation: None,
        }
    }

    /// A TCP buffer for a frame of `len` bytes, in room already reserved.
    pub fn bytes(len: usize, reservation: rdmarpc_transport_tcp::SendReservation) -> SendBuf {
        SendBuf {
            target: Target::Bytes(BytesMut::with_capacity(len)),
            filled: 0,
            cap: len,
            reservation: Some(reservation),
        }
    }

    /// The heap bytes of a buffer from [`SendBuf::heap`] or [`SendBuf::bytes`], with its
    /// reservation; `None` for a buffer of registered memory (which is dropped).
    pub fn into_heap(self) -> Option<(BytesMut, Option<rdmarpc_transport_tcp::SendReservation>)> {
        match self.target {
            Target::Bytes(bytes) => Some((bytes, self.reservation)),
            Target::Registered(_) => None,
        }
    }

    /// The same buffer without its reservation (given back at once).
    pub fn without_reservation(mut self) -> SendBuf {
        self.reservation = None;
        self
    }
}

// SAFETY: `BufMut` requires that `chunk_mut` returns writable memory of at most
// `remaining_mut` bytes and that `advance_mut(cnt)` is only honoured for bytes the caller
// initialised. The `Bytes` arm delegates to `BytesMut`'s own implementation. The
// `Registered` arm hands out `area[filled..cap]` of memory that is always initialised (a
// zeroed registered region, exclusively owned through a slot token or a pool buffer:
// `area_mut` borrows `self` mutably), and `advance_mut` checks `cnt` against what is left,
// so `filled` never passes `cap` and no byte outside the area is ever exposed.
unsafe impl BufMut for SendBuf {
    // Inlined across crates: prost encodes a message a byte or a field at a time, each
    // through these three.
    #[inline]
    fn remaining_mut(&self) -> usize {
        match &self.target {
            Target::Bytes(b) => b.remaining_mut(),
            Target::Registered(_) => self.cap - self.filled,
        }
    }

    #[inline]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        match &mut self.target {
            // SAFETY: forwarded with the caller's guarantee that `cnt` bytes of the chunk
            // were initialised.
            Target::Bytes(b) => unsafe { b.advance_mut(cnt) },
            Target::Registered(_) => {
                assert!(
                    cnt <= self.cap - self.filled,
                    "advance_mut past the end of the frame"
                );
                self.filled += cnt;
            }
        }
    }

    #[inline]
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        match &mut self.target {
            Target::Bytes(b) => b.chunk_mut(),
            Target::Registered(r) => {
                let area = r.area_mut();
                UninitSlice::new(&mut area[self.filled..self.cap])
            }
        }
    }
}
