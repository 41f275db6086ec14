//! Received frames: a [`RecvBuf`] in its receive slot (re-posted when dropped) or in a
//! buffer its rendezvous READ filled, and the kept large payloads the application holds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rdmarpc_core::wire::HEADER_LEN;

use super::Inner;
use crate::counters::Counters;
use crate::pool::LargeBuf;
use crate::protocol::PREFIX_LEN;
use crate::verbs::RecvSlot;

/// A received frame: in its receive slot, in a pool buffer (rendezvous), or a header
/// alone (discarded oversized frame). Dropping it gives the memory back.
#[derive(Debug)]
pub struct RecvBuf(pub(crate) Received);

impl RecvBuf {
    /// A frame received as bytes (over TCP or HTTP/2).
    pub fn from_bytes(bytes: bytes::Bytes) -> RecvBuf {
        RecvBuf(Received::Bytes(bytes))
    }

    /// The frame's bytes, if it was received as bytes ([`RecvBuf::from_bytes`]).
    ///
    /// # Errors
    /// The buffer itself, if it holds RDMA resources (a slot, a pulled frame).
    pub fn into_bytes(self) -> Result<bytes::Bytes, RecvBuf> {
        match self.into_received() {
            Received::Bytes(bytes) => Ok(bytes),
            other => Err(RecvBuf(other)),
        }
    }

    /// What it holds, taken out (the emptied buffer's drop does nothing).
    pub(crate) fn into_received(mut self) -> Received {
        std::mem::replace(&mut self.0, Received::Header([0; HEADER_LEN]))
    }
}

#[derive(Debug)]
pub(crate) enum Received {
    Slot {
        inner: Arc<Inner>,
        slot: Option<RecvSlot>,
    },
    /// A frame pulled by READ; its read-done is sent when it is dropped (or kept), so
    /// the peer's loan (and the borrower's count) lasts until the runtime is done with
    /// the frame: frames read but not consumed stay within what this side announced.
    Large {
        inner: Arc<Inner>,
        buf: LargeBuf,
        /// The frame's length.
        len: usize,
        /// Bytes the peer lent for it (acknowledged by the read-done).
        lent: usize,
        token: u64,
    },
    /// A frame pulled through bounce slots into heap memory (no pinned buffer could be
    /// had); like `Large`, its read-done is sent when it is dropped.
    Copied {
        inner: Arc<Inner>,
        bytes: Vec<u8>,
        lent: usize,
        token: u64,
    },
    Header([u8; HEADER_LEN]),
    Bytes(bytes::Bytes),
    /// One frame of a batch: `range` of the shared slot's body.
    Shared {
        hold: Arc<SlotHold>,
        range: std::ops::Range<usize>,
    },
}

/// A received slot whose frames (a batch) are handed up separately: re-posted when the
/// last of them is dropped.
#[derive(Debug)]
pub(crate) struct SlotHold {
    pub(crate) inner: Arc<Inner>,
    pub(crate) slot: Option<RecvSlot>,
}

impl SlotHold {
    /// The message's body (after the prefix).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self
            .inner
            .rings
            .received(self.slot.as_ref().expect("present until drop"))[PREFIX_LEN..]
    }
}

/// Registered bytes of received frames the application keeps, the most it may, and
/// where they lie (so that one sent on is lent from where it is).
#[derive(Debug)]
pub(crate) struct KeptBytes {
    pub(crate) held: AtomicUsize,
    pub(crate) max: usize,
    /// The kept buffers by start address.
    pub(crate) regions: Mutex<BTreeMap<usize, Weak<LargeBuf>>>,
}

impl KeptBytes {
    /// Counts `size` more bytes held, if that stays within the budget.
    pub(super) fn reserve(&self, size: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(size).filter(|&total| total <= self.max)
            })
            .is_ok()
    }

    /// The kept buffer `bytes` lie in, and their offset in it.
    pub(super) fn find(&self, bytes: &[u8]) -> Option<(Arc<LargeBuf>, usize)> {
        let start = bytes.as_ptr() as usize;
        let regions = self.regions.lock();
        let (&base, buf) = regions.range(..=start).next_back()?;
        let buf = buf.upgrade()?;
        let offset = start - base;
        (offset + bytes.len() <= buf.region().len()).then_some((buf, offset))
    }
}

/// A received rendezvous frame the application keeps: its READ target, back to the
/// pool (or deregistered) when the last slice of it (and the last loan of it) is gone.
/// It holds neither the connection nor the peer's loan (the read-done went out when it
/// was kept).
pub(super) struct Kept {
    pub(super) buf: Arc<LargeBuf>,
    pub(super) len: usize,
    pub(super) count: Arc<KeptBytes>,
}

impl Kept {
    /// `buf` (whose size the caller counted in `count`) holding `len` bytes.
    pub(super) fn new(buf: LargeBuf, len: usize, count: Arc<KeptBytes>) -> Kept {
        Kept {
            buf: Arc::new(buf),
            len,
            count,
        }
    }

    /// As `Bytes`, registered where a send on the connection finds it.
    pub(super) fn into_bytes(self) -> bytes::Bytes {
        let base = self.buf.region().as_slice().as_ptr() as usize;
        self.count
            .regions
            .lock()
            .insert(base, Arc::downgrade(&self.buf));
        bytes::Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        &self.buf.region().as_slice()[..self.len]
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let region = self.buf.region();
        self.count
            .regions
            .lock()
            .remove(&(region.as_slice().as_ptr() as usize));
        self.count.held.fetch_sub(region.len(), Ordering::AcqRel);
    }
}

impl RecvBuf {
    /// The frame as kept memory, if it is a rendezvous frame in heap memory (bounced or
    /// pushed), or in a registered buffer the connection's budget for kept frames has
    /// room for; its read-done goes out now.
    pub(crate) fn keep(self) -> Result<bytes::Bytes, RecvBuf> {
        if let Received::Copied { .. } = &self.0 {
            // Heap memory already (bounced or pushed): kept as it is, its read-done now.
            let Received::Copied {
                inner,
                bytes,
                lent,
                token,
            } = self.into_received()
            else {
                unreachable!("matched above");
            };
            inner.state.lock().session.frame_consumed(token, lent);
            inner.flush_control();
            return Ok(bytes::Bytes::from(bytes));
        }
        let Received::Large { inner, buf, .. } = &self.0 else {
            return Err(self);
        };
        let count = inner.kept.clone();
        if !count.reserve(buf.region().len()) {
            return Err(self);
        }
        let Received::Large {
            inner,
            buf,
            len,
            lent,
            token,
        } = self.into_received()
        else {
            unreachable!("matched above");
        };
        inner.state.lock().session.frame_consumed(token, lent);
        inner.flush_control();
        Counters::bump(&inner.counters.kept_frames, 1);
        Ok(Kept::new(buf, len, count).into_bytes())
    }
}

impl Drop for SlotHold {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.inner.repost(slot);
        }
    }
}

impl std::ops::Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Received::Slot { inner, slot } => &inner
                .rings
                .received(slot.as_ref().expect("present until drop"))[PREFIX_LEN..],
            Received::Large { buf, len, .. } => &buf.region().as_slice()[..*len],
            Received::Copied { bytes, .. } => bytes,
            Received::Header(h) => h,
            Received::Bytes(b) => b,
            Received::Shared { hold, range } => &hold.bytes()[range.clone()],
        }
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        match &mut self.0 {
            Received::Slot { inner, slot } => {
                if let Some(slot) = slot.take() {
                    inner.repost(slot);
                }
            }
            Received::Large {
                inner, token, lent, ..
            }
            | Received::Copied {
                inner, token, lent, ..
            } => {
                inner.state.lock().session.frame_consumed(*token, *lent);
                inner.flush_control();
            }
            Received::Header(_) | Received::Bytes(_) | Received::Shared { .. } => {}
        }
    }
}
