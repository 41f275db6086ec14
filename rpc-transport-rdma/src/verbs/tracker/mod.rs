//! [`Rings`]: a connection's queue pair, its registered send and receive rings, and the
//! completion tracker that owns every buffer the NIC may touch.
//!
//! ```text
//!   send ring (LOCAL access only)             receive ring (LOCAL_WRITE only)
//!   +--------+--------+-----+--------+        +--------+--------+-----+--------+
//!   | slot 0 | slot 1 | ... | slot S |        | slot 0 | slot 1 | ... | slot R |
//!   +--------+--------+-----+--------+        +--------+--------+-----+--------+
//!    each slot_size bytes                      each slot_size bytes, posted as RECVs
//! ```
//!
//! Ownership of a slot is a token: [`SendSlot`] and [`RecvSlot`] exist at most once per
//! slot index and are not `Clone`. Whoever holds the token may touch the slot's bytes;
//! posting a work request consumes the token, and only reaping that request's completion
//! in [`Rings::complete`] recreates it. So the CPU can never write a slot the NIC is reading,
//! nor read one the NIC is writing (CONTRIBUTING.md rule 6), and dropping a user's future cannot
//! break that: the future only ever held a token, never a posted range. READ targets
//! ([`LargeBuf`]) are moved into the tracker for as long as their READs are posted.
//!
//! Field order matters: the QP is dropped (and with it every posted work request) before
//! the rings and the READ targets it might still reference.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;
use slab::Slab;

use crate::pool::LargeBuf;
use crate::verbs::{
    Completion, Error, ProtectionDomain, QueuePair, RemoteBuf, Result, Rts, SendOptions, WcStatus,
    WrId,
};
mod bounce;
mod loans;
mod prepared;
mod ring;
mod slots;

pub(crate) use self::loans::Lent;
use self::loans::Loan;
pub(crate) use self::prepared::PreparedRings;
use self::ring::Ring;
pub(crate) use self::ring::RingGeometry;
pub(crate) use self::slots::{Event, RecvSlot, SendSlot};
use self::slots::{TAG_MASK, TAG_READ, TAG_RECV, TAG_SEND};

/// Distinguishes tokens of different [`Rings`], so a token can never address another
/// connection's memory.
pub(super) static NEXT_RINGS_ID: AtomicU64 = AtomicU64::new(1);

/// What a READ work request in flight belongs to.
#[derive(Debug)]
enum Pending {
    Read(PendingRead),
    Bounce(bounce::Bounce),
}

/// A READ whose chunks are posted.
#[derive(Debug)]
struct PendingRead {
    buf: LargeBuf,
    tag: u64,
    remaining: u32,
    status: std::result::Result<(), WcStatus>,
}

/// A connected QP with its rings and the completion tracker. See the module docs.
#[derive(Debug)]
pub(crate) struct Rings {
    /// Dropped first: destroying the QP retires every work request still posted.
    qp: QueuePair<Rts>,
    /// READ targets (and bounce slots) owned while their READs are posted, keyed by
    /// work-request id.
    reads: Mutex<Slab<Pending>>,
    /// Buffers lent to the peer, until the loan ends.
    loans: Mutex<Slab<Loan>>,
    send: Ring,
    recv: Ring,
    /// Serializes the growth of either ring.
    growing: Mutex<()>,
    pd: Arc<ProtectionDomain>,
    geometry: RingGeometry,
    id: u64,
}

/// Posts every slot of `indices` (one whole segment, just registered or at set-up) as
/// a RECV.
fn post_segment<S: crate::verbs::RecvReady>(
    qp: &QueuePair<S>,
    ring: &Ring,
    indices: std::ops::Range<u32>,
) -> Result<()> {
    let (region, first) = ring.locate(indices.start);
    let slot = ring.slot_size;
    let recvs: Vec<_> = indices
        .clone()
        .map(|i| {
            let offset = first + (i - indices.start) as usize * slot;
            (WrId(TAG_RECV | u64::from(i)), offset, slot)
        })
        .collect();
    // SAFETY: each posted range is one whole slot of one segment of `ring` (the indices
    // are the segment's, registered just now or at set-up), slots do not overlap, and no
    // RecvSlot token exists for them yet: the CPU can only touch a slot again through
    // the token that `Rings::complete` creates when the slot's completion is reaped. The ring
    // lives in the same struct as the QP and is dropped after it (field order of Rings).
    unsafe { qp.post_recv_batch(region, &recvs) }.map_err(|e| e.source)
}

impl Rings {
    /// The local QP number (what asynchronous events name).
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The ring geometry (as set up: the rings may have grown since).
    pub(crate) fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    /// Bytes per slot.
    pub(crate) fn slot_size(&self) -> usize {
        self.geometry.slot_size as usize
    }

    /// Send slots now.
    pub(crate) fn send_slots(&self) -> u32 {
        self.send.slots()
    }

    /// Receive slots posted for the peer now.
    pub(crate) fn recv_slots(&self) -> u32 {
        self.recv.slots()
    }

    /// Doubles the send ring (up to the geometry's maximum): the new slots' tokens, none
    /// when it is at its maximum.
    ///
    /// # Errors
    /// Registering the new segment failed (e.g. over the memlock limit).
    pub(crate) fn grow_send(&self) -> Result<Vec<SendSlot>> {
        let _growing = self.growing.lock();
        let n = self
            .send
            .slots()
            .min(self.geometry.max_slots - self.send.slots());
        if n == 0 {
            return Ok(Vec::new());
        }
        let Some(indices) = self.send.grow(&self.pd, n)? else {
            return Ok(Vec::new());
        };
        Ok(indices
            .map(|index| SendSlot {
                rings: self.id,
                index,
            })
            .collect())
    }

    /// Doubles the receive ring (up to the geometry's maximum) and posts the new slots:
    /// how many were added (0 at the maximum).
    ///
    /// # Errors
    /// Registering or posting the new segment failed.
    pub(crate) fn grow_recv(&self) -> Result<u32> {
        let _growing = self.growing.lock();
        let n = self
            .recv
            .slots()
            .min(self.geometry.max_slots - self.recv.slots());
        if n == 0 {
            return Ok(0);
        }
        let Some(indices) = self.recv.grow(&self.pd, n)? else {
            return Ok(0);
        };
        post_segment(&self.qp, &self.recv, indices)?;
        Ok(n)
    }

    /// Inline bytes the provider granted.
    pub(crate) fn max_inline(&self) -> usize {
        self.qp.max_inline() as usize
    }

    /// The whole slot, writable.
    ///
    /// # Panics
    /// If `slot` belongs to other rings (a bug).
    pub(crate) fn slot_mut<'a>(&'a self, slot: &'a mut SendSlot) -> &'a mut [u8] {
        assert_eq!(slot.rings, self.id, "send slot of another connection");
        let len = self.geometry.slot_size as usize;
        let (region, offset) = self.send.locate(slot.index);
        // SAFETY: `slot` is the only token of this index (tokens are created once per index
        // when its segment is set up or grown, and re-created only when that index's SEND
        // completion is reaped), we borrow it mutably for the slice's lifetime, and a slot
        // is posted only by consuming its token: so no other reference to these bytes
        // exists and no work request covers them. In bounds: `locate` found its segment.
        unsafe { region.range_mut_unchecked(offset, len) }.expect("slot within the send ring")
    }

    /// The bytes the peer sent into `slot`.
    ///
    /// # Panics
    /// If `slot` belongs to other rings (a bug).
    pub(crate) fn received<'a>(&'a self, slot: &'a RecvSlot) -> &'a [u8] {
        assert_eq!(slot.rings, self.id, "receive slot of another connection");
        // The token proves the completion was reaped and the slot is not posted.
        let (region, offset) = self.recv.locate(slot.index);
        region
            .slice(offset, slot.len as usize)
            .expect("slot within the receive ring")
    }

    /// Posts the first `len` bytes of `slot` as one signaled SEND (inline when small);
    /// the slot comes back from [`Rings::poll`] as [`Event::Sent`].
    ///
    /// # Errors
    /// The verbs error, with the slot given back (nothing was posted).
    pub(crate) fn post_send(
        &self,
        slot: SendSlot,
        len: usize,
    ) -> std::result::Result<(), (SendSlot, Error)> {
        assert_eq!(slot.rings, self.id, "send slot of another connection");
        let opts = SendOptions {
            signaled: true,
            inline: len <= self.max_inline(),
            imm: None,
        };
        let wr_id = WrId(TAG_SEND | u64::from(slot.index));
        let (region, offset) = self.send.locate(slot.index);
        // SAFETY: the range is inside the slot owned by `slot`, which is consumed here and
        // re-created only when this SEND's completion is reaped (`poll`), so the CPU cannot
        // write it meanwhile; the ring outlives the QP (field order).
        match unsafe { self.qp.post_send(wr_id, region, offset, len, opts) } {
            // The token is consumed: `poll` re-creates it from the completion.
            Ok(()) => Ok(()),
            Err(e) => Err((slot, e)),
        }
    }

    /// Re-posts a receive slot.
    ///
    /// # Errors
    /// The verbs error (the slot is then lost with the connection, which is failing).
    pub(crate) fn post_recv(&self, slot: RecvSlot) -> Result<()> {
        assert_eq!(slot.rings, self.id, "receive slot of another connection");
        let slot_size = self.geometry.slot_size as usize;
        let wr_id = WrId(TAG_RECV | u64::from(slot.index));
        let (region, offset) = self.recv.locate(slot.index);
        // SAFETY: the token is consumed, and a new one is created only when this RECV's
        // completion is reaped, so the CPU cannot touch the slot while the NIC may write it;
        // the ring outlives the QP (field order).
        unsafe { self.qp.post_recv(wr_id, region, offset, slot_size) }
    }

    /// Pulls `len` bytes at `remote` into `buf[at..at + len]` with RDMA READs of at most
    /// `chunk` bytes each; `buf` comes back with `tag` in [`Event::Read`] once all
    /// completed.
    ///
    /// # Errors
    /// The verbs error of the first chunk, with `buf` given back; a failure of a later
    /// chunk fails the QP and is reported through `poll`.
    pub(crate) fn post_read(
        &self,
        buf: LargeBuf,
        at: usize,
        len: usize,
        remote: RemoteBuf,
        chunk: usize,
        tag: u64,
    ) -> std::result::Result<(), (LargeBuf, Error)> {
        let chunk = chunk.max(1);
        let chunks = len.div_ceil(chunk).max(1);
        if let Err(e) = buf.region().check_range(at, len) {
            return Err((buf, e));
        }
        // The remote address is the peer's word: its range must not wrap.
        if remote.addr.checked_add(len as u64).is_none() {
            let e = Error::TooLarge {
                what: "remote READ range (address + length overflows)",
                len,
                max: (u64::MAX - remote.addr) as usize,
            };
            return Err((buf, e));
        }
        let mut reads = self.reads.lock();
        let key = reads.insert(Pending::Read(PendingRead {
            buf,
            tag,
            remaining: chunks as u32,
            status: Ok(()),
        }));
        let wr_id = WrId(TAG_READ | key as u64);
        for i in 0..chunks {
            let offset = i * chunk;
            let n = chunk.min(len - offset);
            let Pending::Read(pending) = &reads[key] else {
                unreachable!("inserted above");
            };
            let target = RemoteBuf {
                addr: remote.addr + offset as u64,
                rkey: remote.rkey,
            };
            // SAFETY: the target buffer now belongs to the tracker (`reads`), which gives it
            // back only after the last chunk's completion is reaped in `poll`; nothing else
            // references it. It outlives the QP (field order). Chunks do not overlap.
            let posted = unsafe {
                self.qp
                    .post_read(wr_id, pending.buf.region(), at + offset, n, target)
            };
            if let Err(e) = posted {
                if i == 0 {
                    let Pending::Read(pending) = reads.remove(key) else {
                        unreachable!("inserted above");
                    };
                    return Err((pending.buf, e));
                }
                // Chunks already posted will complete (or flush) and return the buffer.
                let Pending::Read(pending) = &mut reads[key] else {
                    unreachable!("inserted above");
                };
                pending.remaining -= (chunks - i) as u32;
                pending.status = Err(WcStatus::LocQpOp);
                return Ok(());
            }
        }
        Ok(())
    }

    /// Turns one completion of this QP (reaped from its CQ, which other QPs may share)
    /// into the event it means, with the ownership it returns; a completion that ends
    /// nothing yet (a READ chunk but the last, a successful bind) adds no event.
    pub(crate) fn complete(&self, c: Completion, events: &mut Vec<Event>) {
        debug_assert_eq!(c.qp_num, self.qp_num());
        let index = (c.wr_id.0 & !TAG_MASK) as u32;
        match c.wr_id.0 & TAG_MASK {
            TAG_SEND => events.push(Event::Sent {
                slot: SendSlot {
                    rings: self.id,
                    index,
                },
                status: c.status,
            }),
            TAG_RECV => events.push(Event::Received {
                // A flushed RECV's slot carries nothing; the token still returns.
                slot: Some(RecvSlot {
                    rings: self.id,
                    index,
                    len: if c.status.is_ok() { c.byte_len } else { 0 },
                }),
                status: c.status,
            }),
            TAG_READ => {
                let mut reads = self.reads.lock();
                let key = index as usize;
                let pending = match reads.get_mut(key) {
                    Some(Pending::Read(pending)) => pending,
                    Some(Pending::Bounce(_)) => {
                        return self.bounce_completed(&mut reads, key, c.status, events);
                    }
                    None => {
                        tracing::error!(key, "completion of an unknown READ");
                        return;
                    }
                };
                if pending.status.is_ok() {
                    pending.status = c.status;
                }
                pending.remaining -= 1;
                if pending.remaining == 0 {
                    let Some(Pending::Read(done)) = reads.try_remove(key) else {
                        unreachable!("matched above");
                    };
                    events.push(Event::Read {
                        buf: done.buf,
                        tag: done.tag,
                        status: done.status,
                    });
                }
            }
            _ => tracing::error!(
                wr_id = c.wr_id.0,
                "completion with an unknown work-request id"
            ),
        }
    }

    /// Moves the QP to the error state: every posted work request completes (flushed).
    ///
    /// # Errors
    /// The verbs error.
    pub(crate) fn fail(&self) -> Result<()> {
        self.qp.modify_to_error()
    }
}
