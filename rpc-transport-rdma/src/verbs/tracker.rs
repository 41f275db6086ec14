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

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rdma_sys::ibv_wc;
use slab::Slab;

use super::{
    Access, Completion, CompletionQueue, Error, Init, MemoryRegion, ProtectionDomain, QpConfig,
    QpEndpoint, QueuePair, RemoteBuf, Result, Rts, SendOptions, WcStatus, WrId,
};
use crate::pool::LargeBuf;

/// Work-request id tags (top byte of the 64-bit id); the rest is the slot index or the
/// READ's key in the tracker.
const TAG_SEND: u64 = 1 << 56;
const TAG_RECV: u64 = 2 << 56;
const TAG_READ: u64 = 3 << 56;
const TAG_MASK: u64 = 0xff << 56;

/// Distinguishes tokens of different [`Rings`], so a token can never address another
/// connection's memory.
static NEXT_RINGS_ID: AtomicU64 = AtomicU64::new(1);

/// Exclusive ownership of one send slot: its bytes may be written.
#[derive(Debug)]
pub(crate) struct SendSlot {
    rings: u64,
    index: u32,
}

/// Exclusive ownership of one received slot: its first `len` bytes hold a message.
#[derive(Debug)]
pub(crate) struct RecvSlot {
    rings: u64,
    index: u32,
    len: u32,
}

impl RecvSlot {
    /// Bytes the peer sent into this slot.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }
}

/// A completion, with the ownership it returns.
#[derive(Debug)]
pub(crate) enum Event {
    /// A SEND completed: its slot is free again.
    Sent {
        slot: SendSlot,
        status: std::result::Result<(), WcStatus>,
    },
    /// A message arrived in `slot` (on success).
    Received {
        slot: Option<RecvSlot>,
        status: std::result::Result<(), WcStatus>,
    },
    /// Every chunk of a READ completed: `buf` holds the data (on success).
    Read {
        buf: LargeBuf,
        tag: u64,
        status: std::result::Result<(), WcStatus>,
    },
}

/// A buffer lent to the peer (by its own key, valid for this connection's QP only: the
/// connection's own PD), owned by the tracker until the loan ends.
#[derive(Debug)]
struct Loan {
    /// Held until the loan ends, so the lent memory stays registered and unchanged.
    buf: LoanBuf,
    charge: usize,
}

/// What a loan holds.
#[derive(Debug)]
enum LoanBuf {
    /// A rendezvous buffer the frame was encoded into.
    Pool(LargeBuf),
    /// A received frame the application kept and sends on (its `Bytes` keep the buffer
    /// from going back to the pool; nothing writes to it while they live).
    Shared(Arc<LargeBuf>, bytes::Bytes),
}

/// What the peer is told of a loan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    /// Names the loan in [`Rings::reclaim`].
    pub(crate) key: u32,
    /// Offset 0 in the lent region, and its key.
    pub(crate) remote: RemoteBuf,
}

/// A READ whose chunks are posted.
#[derive(Debug)]
struct PendingRead {
    buf: LargeBuf,
    tag: u64,
    remaining: u32,
    status: std::result::Result<(), WcStatus>,
}

/// Geometry of a connection's rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingGeometry {
    /// Send slots to start with.
    pub(crate) send_slots: u32,
    /// Receive slots to start with (the credits first granted to the peer).
    pub(crate) recv_slots: u32,
    /// Slots either ring may grow to (the QP is created for this many).
    pub(crate) max_slots: u32,
    /// Bytes per slot.
    pub(crate) slot_size: u32,
}

/// Segments a ring may have: the first, then each growth.
const MAX_SEGMENTS: usize = 8;

/// A ring of slots registered in segments as it grows: segment `k` holds slots
/// `start..start + len`. Segments are only ever added, and live as long as the ring.
#[derive(Debug)]
struct Ring {
    segments: [OnceLock<Segment>; MAX_SEGMENTS],
    /// Slots in all segments.
    slots: AtomicU32,
    slot_size: usize,
}

#[derive(Debug)]
struct Segment {
    start: u32,
    len: u32,
    region: MemoryRegion,
}

impl Ring {
    fn new(pd: &Arc<ProtectionDomain>, slots: u32, slot_size: u32) -> Result<Ring> {
        let ring = Ring {
            segments: Default::default(),
            slots: AtomicU32::new(0),
            slot_size: slot_size as usize,
        };
        ring.grow(pd, slots)?;
        Ok(ring)
    }

    fn slots(&self) -> u32 {
        self.slots.load(Ordering::Acquire)
    }

    /// The region holding slot `index`, and the slot's offset in it.
    ///
    /// # Panics
    /// If the slot is outside the ring (a bug: tokens are made only for its slots).
    fn locate(&self, index: u32) -> (&MemoryRegion, usize) {
        for segment in self.segments.iter().map_while(OnceLock::get) {
            if (segment.start..segment.start + segment.len).contains(&index) {
                let offset = (index - segment.start) as usize * self.slot_size;
                return (&segment.region, offset);
            }
        }
        panic!("slot {index} outside its ring");
    }

    /// Registers a segment of `n` more slots (callers serialize growth): the new slots'
    /// indices, or `None` if every segment is in use.
    fn grow(&self, pd: &Arc<ProtectionDomain>, n: u32) -> Result<Option<std::ops::Range<u32>>> {
        let Some(free) = self.segments.iter().find(|s| s.get().is_none()) else {
            return Ok(None);
        };
        let start = self.slots();
        let region = MemoryRegion::new(pd, self.slot_size * n as usize, Access::Local)?;
        if free
            .set(Segment {
                start,
                len: n,
                region,
            })
            .is_err()
        {
            panic!("ring growth is serialized by its callers");
        }
        self.slots.store(start + n, Ordering::Release);
        Ok(Some(start..start + n))
    }
}

/// A connection's QP in INIT with its rings registered and every receive slot posted:
/// what exists before the peer's endpoint is known.
#[derive(Debug)]
pub(crate) struct PreparedRings {
    qp: QueuePair<Init>,
    send: Ring,
    recv: Ring,
    pd: Arc<ProtectionDomain>,
    geometry: RingGeometry,
    id: u64,
}

impl PreparedRings {
    /// Creates the QP on `cq`, registers both rings in `pd` (no remote access) and posts
    /// every receive slot.
    ///
    /// # Errors
    /// Any verbs failure (QP creation, registration, e.g. over the memlock limit, posting).
    pub(crate) fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        qp_config: &QpConfig,
        geometry: RingGeometry,
    ) -> Result<PreparedRings> {
        let send = Ring::new(pd, geometry.send_slots, geometry.slot_size)?;
        let recv = Ring::new(pd, geometry.recv_slots, geometry.slot_size)?;
        let qp = QueuePair::new(pd, cq, cq, qp_config)?.into_init()?;
        post_segment(&qp, &recv, 0..geometry.recv_slots)?;
        Ok(PreparedRings {
            qp,
            send,
            recv,
            pd: pd.clone(),
            geometry,
            id: NEXT_RINGS_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The local QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// What the peer needs to connect to this QP.
    pub(crate) fn endpoint(&self) -> QpEndpoint {
        self.qp.endpoint()
    }

    /// Connects to the peer (INIT -> RTR -> RTS) and hands out every send slot.
    ///
    /// # Errors
    /// A failed state transition.
    pub(crate) fn connect(self, remote: &QpEndpoint) -> Result<(Rings, Vec<SendSlot>)> {
        let qp = self.qp.into_rtr(remote)?.into_rts()?;
        let slots = (0..self.geometry.send_slots)
            .map(|index| SendSlot {
                rings: self.id,
                index,
            })
            .collect();
        let rings = Rings {
            qp,
            reads: Mutex::new(Slab::new()),
            loans: Mutex::new(Slab::new()),
            send: self.send,
            recv: self.recv,
            growing: Mutex::new(()),
            pd: self.pd,
            geometry: self.geometry,
            id: self.id,
        };
        Ok((rings, slots))
    }
}

/// A connected QP with its rings and the completion tracker. See the module docs.
#[derive(Debug)]
pub(crate) struct Rings {
    /// Dropped first: destroying the QP retires every work request still posted.
    qp: QueuePair<Rts>,
    /// READ targets owned while their READs are posted, keyed by work-request id.
    reads: Mutex<Slab<PendingRead>>,
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
fn post_segment<S: super::RecvReady>(
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
        let key = reads.insert(PendingRead {
            buf,
            tag,
            remaining: chunks as u32,
            status: Ok(()),
        });
        let wr_id = WrId(TAG_READ | key as u64);
        for i in 0..chunks {
            let offset = i * chunk;
            let n = chunk.min(len - offset);
            let pending = &reads[key];
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
                    return Err((reads.remove(key).buf, e));
                }
                // Chunks already posted will complete (or flush) and return the buffer.
                let pending = &mut reads[key];
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
                let Some(pending) = reads.get_mut(key) else {
                    tracing::error!(key, "completion of an unknown READ");
                    return;
                };
                if pending.status.is_ok() {
                    pending.status = c.status;
                }
                pending.remaining -= 1;
                if pending.remaining == 0 {
                    let done = reads.remove(key);
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

    /// Lends `buf[..len]` to the peer by the buffer's own key (an [`Access::Lendable`]
    /// region of the connection's own PD: useless to any other QP); the tracker owns the
    /// buffer until [`Rings::reclaim`]. (Lending per transfer through memory windows is
    /// shown on rxe by the verbs tests, and not used: rxe replays binds on retransmission,
    /// see docs/limits.md, "Memory isolation".)
    ///
    /// # Errors
    /// `len` beyond the buffer, or a buffer registered otherwise; `buf` is given back.
    pub(crate) fn lend(
        &self,
        buf: LargeBuf,
        len: usize,
        charge: usize,
    ) -> std::result::Result<Lent, (LargeBuf, Error)> {
        if let Err(e) = buf.region().check_range(0, len) {
            return Err((buf, e));
        }
        if buf.region().access() != Access::Lendable {
            return Err((
                buf,
                Error::Unsupported {
                    what: "lending a buffer not registered as lendable",
                },
            ));
        }
        let rkey = buf.region().rkey();
        let loan = Loan {
            buf: LoanBuf::Pool(buf),
            charge,
        };
        let key = self.loans.lock().insert(loan) as u32;
        Ok(Lent {
            key,
            remote: RemoteBuf { addr: 0, rkey },
        })
    }

    /// Lends `buf[offset..offset + len]`, a received frame the application kept (of this
    /// connection's READ targets, [`Access::Lendable`] in its own PD), by the buffer's own
    /// key; `hold` (the application's bytes in it) is held with it until
    /// [`Rings::reclaim`], so the buffer neither returns to its pool nor changes meanwhile.
    ///
    /// # Errors
    /// The range beyond the buffer, or a buffer registered otherwise.
    pub(crate) fn lend_shared(
        &self,
        buf: Arc<LargeBuf>,
        offset: usize,
        len: usize,
        hold: bytes::Bytes,
        charge: usize,
    ) -> Result<Lent> {
        buf.region().check_range(offset, len)?;
        if buf.region().access() != Access::Lendable {
            return Err(Error::Unsupported {
                what: "lending a buffer not registered as lendable",
            });
        }
        let rkey = buf.region().rkey();
        let loan = Loan {
            buf: LoanBuf::Shared(buf, hold),
            charge,
        };
        let key = self.loans.lock().insert(loan) as u32;
        Ok(Lent {
            key,
            remote: RemoteBuf {
                addr: offset as u64,
                rkey,
            },
        })
    }

    /// Ends a loan: the buffer goes back to its pool; returns the charge it was lent with.
    ///
    /// # Errors
    /// An unknown or already reclaimed key.
    pub(crate) fn reclaim(&self, key: u32) -> Result<usize> {
        let mut loans = self.loans.lock();
        if !loans.contains(key as usize) {
            return Err(Error::Unsupported {
                what: "reclaiming a loan that is not lent",
            });
        }
        let loan = loans.remove(key as usize);
        drop(loans);
        Ok(loan.charge)
    }

    /// Loans not yet reclaimed.
    pub(crate) fn loans(&self) -> usize {
        self.loans.lock().len()
    }

    /// Moves the QP to the error state: every posted work request completes (flushed).
    ///
    /// # Errors
    /// The verbs error.
    pub(crate) fn fail(&self) -> Result<()> {
        self.qp.modify_to_error()
    }
}
