//! [`RdmaConnection`]: one RC queue pair with its rings, as an `rpc_core::Connection`.
//!
//! Sending a frame of `len` bytes:
//! - `len <= eager limit`: `alloc` waits for a free send slot and a data credit, the frame
//!   is encoded into the slot right after the 16-byte prefix, `send` posts one SEND.
//! - otherwise (rendezvous): `alloc` reserves room in the lending limit, takes a lendable
//!   buffer from the connection's pool plus a slot and a credit; the frame is encoded into
//!   the buffer; `send` lends it (`Rings::lend`) and sends the descriptor (offset, key of
//!   the connection's own protection domain); the peer's read-done ends the loan and the
//!   buffer returns to the pool.
//!
//! Receiving: whoever polls the shared completion queue (`completion.rs`, `driver.rs`)
//! hands eager frames up in their receive slot (re-posted when the [`RecvBuf`] is
//! dropped) and pulls rendezvous frames with RDMA READ into a buffer of the local pool.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};
use rpc_core::wire::HEADER_LEN;
use rpc_core::{Connection, FrameSink, TransportError, MAX_METADATA_LEN};
use tokio::sync::{watch, Notify};

use crate::completion::Membership;
use crate::counters::{Counters, RdmaCounters};
use crate::pool::{LargeBuf, LargePool};
use crate::protocol::session::{Close, Session};
use crate::protocol::{Kind, Rendezvous, MAX_BATCH, PREFIX_LEN};
use crate::verbs::{Error, RecvSlot, RegisteredTarget, Rings, SendBuf, SendSlot, Target};

/// An established RDMA connection. Cheap to share: clones of the inner state are held by
/// its task, the ping task, a shared CQ's poller while it handles its completions and
/// every outstanding buffer.
#[derive(Debug)]
pub struct RdmaConnection {
    pub(crate) inner: Arc<Inner>,
}

/// State shared by the connection, its driver and its buffers.
///
/// Field order is drop order: the rings (and with them the QP) go first, so the NIC is
/// done with every buffer before the lent ones and the pools are released.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) rings: Rings,
    /// Its place on a shared completion queue (left after the QP is destroyed).
    pub(crate) completion: Membership,
    pub(crate) state: Mutex<State>,
    /// Woken when a send slot or credits come back, or the connection fails.
    pub(crate) space: Notify,
    /// Set once with the reason the connection ended.
    pub(crate) closed: watch::Sender<Option<Close>>,
    pub(crate) counters: Arc<Counters>,
    /// Where received frames go once the runtime asked for them to be pushed
    /// ([`Connection::push_to`]); until then they wait in the session for `recv`.
    pub(crate) upward: Mutex<Upward>,
    /// The first completion error after the end was logged.
    pub(crate) cause_logged: AtomicBool,
    /// Frames sent and received (also counted by the shared CQ, which spins for replies
    /// while more were sent than received there).
    pub(crate) frames: crate::completion::FrameCounts,
    /// Woken when frames wait for `recv`, or the connection ends.
    pub(crate) arrived: Notify,
    pub(crate) tx_pool: LargePool,
    pub(crate) rx_pool: LargePool,
    /// Message buffers: lendable, never kept idle (each is registered for one use).
    pub(crate) msg_pool: LargePool,
    /// Registered memory of received frames the application keeps.
    pub(crate) kept: Arc<KeptBytes>,
    pub(crate) peer: String,
    /// The side channel's peer address.
    pub(crate) peer_addr: Option<std::net::SocketAddr>,
    /// The certificate chain the peer presented on the side channel under TLS.
    pub(crate) peer_certificates: Option<Arc<[bytes::Bytes]>>,
    /// Largest frame accepted or sent.
    pub(crate) max_frame: usize,
    pub(crate) eager_limit: usize,
    /// What the frames lent to the peer hold on a server's account.
    pub(crate) loan_charges: crate::sending::LoanCharges,
}

/// Mutable state, under one short lock: the protocol session, the free send slots, the
/// sends in flight and the batch waiting for them.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) session: Session<RecvBuf>,
    pub(crate) free_send: Vec<SendSlot>,
    /// SENDs posted and not completed.
    pub(crate) in_flight: u32,
    /// Eager frames waiting to go as one message.
    pub(crate) batch: Option<Batch>,
}

impl State {
    /// Posts the first `len` bytes of `slot` as one SEND and counts it in flight; on
    /// failure the slot goes back to the free ones. Every SEND goes through here, under
    /// the state lock: so the advertised count written in the slot cannot be overtaken
    /// by a later message that advertised less, and `in_flight` (which releases a
    /// waiting batch as completions come) is exact.
    pub(crate) fn post(&mut self, rings: &Rings, slot: SendSlot, len: usize) -> Result<(), Error> {
        match rings.post_send(slot, len) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err((slot, e)) => {
                self.free_send.push(slot);
                Err(e)
            }
        }
    }
}

/// How many whole frames `bytes` holds back to back (1 unless the runtime wrote a run
/// of them; bytes that are not whole frames count as one, which the receiver refuses).
fn frames_in(bytes: &[u8]) -> u16 {
    let mut at = 0;
    let mut n: u16 = 0;
    while at < bytes.len() {
        match rpc_core::wire::Header::decode(&bytes[at..]) {
            Ok(Some(header)) if header.frame_len() <= bytes.len() - at && n < MAX_BATCH => {
                at += header.frame_len();
                n += 1;
            }
            _ => return 1,
        }
    }
    n.max(1)
}

/// Eager frames back to back in one send slot, not posted yet.
#[derive(Debug)]
pub(crate) struct Batch {
    slot: SendSlot,
    /// Bytes of frames after the prefix.
    len: usize,
    frames: u16,
}

/// Sends in flight from which an eager frame waits in a batch rather than going at once.
/// One: a frame goes at once whenever the send queue is idle (no latency added to a
/// lone call); behind a send in flight it waits at most until that send completes.
pub(crate) const COALESCE_AT: u32 = 1;

/// The runtime's receive path, when it takes frames from the completion path.
#[derive(Default)]
pub(crate) struct Upward {
    pub(crate) sink: Option<Arc<dyn FrameSink<RecvBuf>>>,
    /// The driver finished: the sink, set now or later, has (or gets) the end.
    pub(crate) ended: bool,
    /// The connection handle is gone: nobody will receive (frames are dropped, not
    /// kept: a kept frame holds the connection's state alive).
    pub(crate) receiver_gone: bool,
}

impl std::fmt::Debug for Upward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upward")
            .field("sink", &self.sink.is_some())
            .field("ended", &self.ended)
            .field("receiver_gone", &self.receiver_gone)
            .finish()
    }
}

/// A send in progress on registered memory: the token(s) it owns.
#[derive(Debug)]
pub(crate) struct RegisteredSend {
    inner: Arc<Inner>,
    /// Present until sent; dropping it unsent gives slot and credit back.
    slot: Option<SendSlot>,
    /// The rendezvous buffer, for frames over the eager limit.
    large: Option<LargeBuf>,
    len: usize,
    /// Bytes of the lending budget this frame holds (rendezvous frames), released by its
    /// read-done, or by dropping it unsent.
    reserved: usize,
    /// Its bytes on a server's account (rendezvous frames), held by its loan once lent.
    charge: rpc_core::account::Charge,
}

impl RegisteredTarget for RegisteredSend {
    fn area_mut(&mut self) -> &mut [u8] {
        match &mut self.large {
            Some(buf) => &mut buf.region_mut().as_mut_slice()[..self.len],
            None => {
                let slot = self.slot.as_mut().expect("slot present until sent");
                &mut self.inner.rings.slot_mut(slot)[PREFIX_LEN..PREFIX_LEN + self.len]
            }
        }
    }
}

impl Drop for RegisteredSend {
    fn drop(&mut self) {
        let (slot, reserved) = (self.slot.take(), std::mem::take(&mut self.reserved));
        if slot.is_none() && reserved == 0 {
            return;
        }
        let mut state = self.inner.state.lock();
        if let Some(slot) = slot {
            state.free_send.push(slot);
            state.session.untake();
        }
        if reserved > 0 {
            state.session.release_lending(reserved);
        }
        drop(state);
        self.inner.space.notify_waiters();
    }
}

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
    fn reserve(&self, size: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(size).filter(|&total| total <= self.max)
            })
            .is_ok()
    }

    /// The kept buffer `bytes` lie in, and their offset in it.
    fn find(&self, bytes: &[u8]) -> Option<(Arc<LargeBuf>, usize)> {
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
struct Kept {
    buf: Arc<LargeBuf>,
    len: usize,
    count: Arc<KeptBytes>,
}

impl Kept {
    /// `buf` (whose size the caller counted in `count`) holding `len` bytes.
    fn new(buf: LargeBuf, len: usize, count: Arc<KeptBytes>) -> Kept {
        Kept {
            buf: Arc::new(buf),
            len,
            count,
        }
    }

    /// As `Bytes`, registered where a send on the connection finds it.
    fn into_bytes(self) -> bytes::Bytes {
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
    /// The frame as kept memory, if it is a rendezvous frame and the connection's
    /// budget for kept frames has room for its buffer; its read-done goes out now.
    pub(crate) fn keep(self) -> Result<bytes::Bytes, RecvBuf> {
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
            } => {
                inner.state.lock().session.frame_consumed(*token, *lent);
                inner.flush_control();
            }
            Received::Header(_) | Received::Bytes(_) | Received::Shared { .. } => {}
        }
    }
}

impl Inner {
    /// Counts a frame sent, here and on the shared CQ.
    pub(crate) fn frame_sent(&self) {
        self.frames.sent.fetch_add(1, Ordering::Relaxed);
        self.completion.shared().frame_sent();
    }

    /// Counts a frame received, here and on the shared CQ.
    pub(crate) fn frame_received(&self) {
        self.frames.received.fetch_add(1, Ordering::Relaxed);
        self.completion.shared().frame_received();
    }

    /// Waits until one more frame of `len` bytes fits the lending limit (the smaller of
    /// [`RdmaConfig::lend_budget`](crate::RdmaConfig::lend_budget) and
    /// [`RdmaConfig::max_loans`](crate::RdmaConfig::max_loans) and the peer's figures; a
    /// frame larger than the budget goes alone), and reserves it.
    async fn reserve_lending(&self, len: usize) -> Result<usize, TransportError> {
        self.wait_for(
            |state| state.session.try_reserve_lending(len).then_some(len),
            || {},
        )
        .await
    }

    /// Waits for a free send slot and a data credit.
    async fn take_slot(&self) -> Result<SendSlot, TransportError> {
        self.wait_for(
            |state| {
                (!state.free_send.is_empty() && state.session.try_take_data())
                    .then(|| state.free_send.pop().expect("checked non-empty"))
            },
            || Counters::bump(&self.counters.credit_stalls, 1),
        )
        .await
    }

    /// Waits, woken by `space`, until `take` gets what it needs from the state (under its
    /// lock), or the connection closes. `stalled` runs once, the first time it waits.
    async fn wait_for<T>(
        &self,
        mut take: impl FnMut(&mut State) -> Option<T>,
        stalled: impl FnOnce(),
    ) -> Result<T, TransportError> {
        let mut stalled = Some(stalled);
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up between the check and the wait
            // is not lost.
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if !state.session.is_open() {
                    return Err(self.close_error());
                }
                if let Some(got) = take(&mut state) {
                    return Ok(got);
                }
            }
            if let Some(stalled) = stalled.take() {
                stalled();
            }
            notified.await;
        }
    }

    /// How the connection ended, for the runtime: `Ok` for a clean close.
    pub(crate) fn end_result(&self) -> Result<(), TransportError> {
        match &*self.closed.borrow() {
            Some(why) if !why.is_clean() => Err(why.into()),
            _ => Ok(()),
        }
    }

    pub(crate) fn close_error(&self) -> TransportError {
        match &*self.closed.borrow() {
            Some(why) => why.into(),
            None => TransportError::Closed,
        }
    }

    pub(crate) async fn alloc(self: &Arc<Self>, len: usize) -> Result<SendBuf, TransportError> {
        if len > self.max_frame {
            return Err(TransportError::TooLarge {
                len,
                max: self.max_frame,
            });
        }
        let (large, reserved, charge) = if len > self.eager_limit {
            // The account, then the budget, then memory: a caller that waits for the
            // peer to read what was lent before holds no buffer meanwhile.
            let charge = self.loan_charges.charge(len, &self.closed).await?;
            let reserved = self.reserve_lending(len).await?;
            let guard = Lending {
                inner: self,
                bytes: reserved,
            };
            let buf = self
                .tx_pool
                .take(len)
                .map_err(|e| TransportError::Other(format!("rendezvous buffer: {e}")))?;
            std::mem::forget(guard);
            (Some(buf), reserved, charge)
        } else {
            (None, 0, rpc_core::account::Charge::none())
        };
        // From here the reservation is the frame's (released by its drop if unsent).
        let mut frame = RegisteredSend {
            inner: self.clone(),
            slot: None,
            large,
            len,
            reserved,
            charge,
        };
        frame.slot = Some(self.take_slot().await?);
        Ok(SendBuf {
            target: Target::Registered(frame),
            filled: 0,
            cap: len,
            reservation: None,
        })
    }

    pub(crate) fn send(&self, mut send: RegisteredSend) -> Result<(), TransportError> {
        let slot = send.slot.take().expect("slot present until sent");
        let large = send.large.take();
        let mut state = self.state.lock();
        if state.session.is_closed() {
            state.free_send.push(slot);
            return Err(self.close_error());
        }
        let Some(buf) = large else {
            return self.send_eager(state, slot, send.len);
        };
        // Frames waiting in a batch go first: frames arrive in the order sent.
        if let Some(batch) = state.batch.take() {
            if let Err(e) = self.post_batch(&mut state, batch) {
                drop(state);
                return Err(self.post_failed(e));
            }
        }
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&buf.region().as_slice()[..HEADER_LEN]);
        // Lent (its own key, valid on this connection's QP only) before the descriptor
        // goes.
        let charge = std::mem::take(&mut send.reserved);
        let lent = match self.rings.lend(buf, send.len, charge) {
            Ok(lent) => {
                self.loan_charges
                    .lent(lent.key, std::mem::take(&mut send.charge));
                lent
            }
            Err((_buf, e)) => {
                state.session.release_lending(charge);
                state.free_send.push(slot);
                drop(state);
                let reason = format!("lending a rendezvous buffer failed: {e}");
                self.fail(Close::Failed(reason.clone()));
                return Err(TransportError::Other(reason));
            }
        };
        self.post_descriptor(state, slot, lent, send.len, header, Vec::new())
    }

    /// Sends a rendezvous descriptor in `slot` for the frame `head` + the `len` bytes of
    /// `lent` (lent already; an empty head: the whole frame is lent).
    fn post_descriptor(
        &self,
        mut state: MutexGuard<'_, State>,
        mut slot: SendSlot,
        lent: crate::verbs::Lent,
        len: usize,
        header: [u8; HEADER_LEN],
        head: Vec<u8>,
    ) -> Result<(), TransportError> {
        let advert = state.session.advertise();
        let token = state.session.lend(lent.key, Instant::now());
        let head_len = head.len();
        let descriptor = Rendezvous {
            offset: lent.remote.addr,
            len: len as u64,
            rkey: lent.remote.rkey,
            token,
            header,
            head,
        };
        tracing::trace!(
            token,
            len,
            head_len,
            rkey = lent.remote.rkey,
            "lending a rendezvous frame"
        );
        let bytes = self.rings.slot_mut(&mut slot);
        advert
            .prefix(Kind::Rendezvous, head_len as u16)
            .encode(bytes);
        descriptor.encode(&mut bytes[PREFIX_LEN..]);
        Counters::bump(&self.counters.rendezvous_sends, 1);
        let posted = state.post(
            &self.rings,
            slot,
            PREFIX_LEN + crate::protocol::RENDEZVOUS_LEN + head_len,
        );
        drop(state);
        posted.map_err(|e| self.post_failed(e))?;
        self.frame_sent();
        Ok(())
    }

    /// Sends the frame `head` + `tail` (a gathered send, see
    /// [`Connection::send_gathered`]). A single tail part that lies in a received frame
    /// the application kept on this connection is lent from where it is, the head going
    /// inline in the descriptor: no copy. Anything else is copied into one buffer and
    /// sent as usual.
    pub(crate) async fn send_gathered(
        self: &Arc<Self>,
        mut head: RegisteredSend,
        tail: Vec<bytes::Bytes>,
    ) -> Result<(), TransportError> {
        // The head is small: copied out, its slot (and credit) go back at once, so that
        // a sender waiting for lending budget below holds no slot.
        let head_bytes = head.area_mut().to_vec();
        drop(head);
        let total = head_bytes.len() + tail.iter().map(bytes::Bytes::len).sum::<usize>();
        // The prefix's token count carries the head's length: 16 bits.
        let fits_inline = head_bytes.len() >= HEADER_LEN
            && head_bytes.len() <= usize::from(u16::MAX)
            && PREFIX_LEN + crate::protocol::RENDEZVOUS_LEN + head_bytes.len()
                <= self.rings.slot_size();
        let found = match tail.as_slice() {
            [part] if fits_inline && total <= self.max_frame => self.kept.find(part),
            _ => None,
        };
        let Some((buf, offset)) = found else {
            return self.send_copied(&head_bytes, &tail, total).await;
        };
        let part = tail.into_iter().next().expect("one part");
        let len = part.len();
        // The account, the budget, then the slot, as `alloc` does.
        let account_charge = self.loan_charges.charge(len, &self.closed).await?;
        let charge = self.reserve_lending(len).await?;
        let guard = Lending {
            inner: self,
            bytes: charge,
        };
        let slot = self.take_slot().await?;
        std::mem::forget(guard);
        let mut state = self.state.lock();
        if state.session.is_closed() {
            state.session.release_lending(charge);
            state.free_send.push(slot);
            return Err(self.close_error());
        }
        // Frames waiting in a batch go first: frames arrive in the order sent.
        if let Some(batch) = state.batch.take() {
            if let Err(e) = self.post_batch(&mut state, batch) {
                drop(state);
                return Err(self.post_failed(e));
            }
        }
        let lent = match self.rings.lend_shared(buf, offset, len, part, charge) {
            Ok(lent) => {
                self.loan_charges.lent(lent.key, account_charge);
                lent
            }
            Err(e) => {
                state.session.release_lending(charge);
                state.free_send.push(slot);
                drop(state);
                let reason = format!("lending a kept frame failed: {e}");
                self.fail(Close::Failed(reason.clone()));
                return Err(TransportError::Other(reason));
            }
        };
        Counters::bump(&self.counters.lent_in_place, 1);
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&head_bytes[..HEADER_LEN]);
        self.post_descriptor(state, slot, lent, len, header, head_bytes)
    }

    /// Sends `head` + `tail` (`total` bytes) copied into one frame.
    async fn send_copied(
        self: &Arc<Self>,
        head: &[u8],
        tail: &[bytes::Bytes],
        total: usize,
    ) -> Result<(), TransportError> {
        let SendBuf { target, .. } = self.alloc(total).await?;
        let Target::Registered(mut frame) = target else {
            unreachable!("an RDMA connection allocates registered memory");
        };
        let area = frame.area_mut();
        area[..head.len()].copy_from_slice(head);
        let mut at = head.len();
        for part in tail {
            area[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.send(frame)
    }

    /// Sends an eager frame of `len` bytes written in `slot`: at once when fewer than
    /// [`COALESCE_AT`] sends are in flight; else it waits in a batch (a slot of frames
    /// back to back) that goes as one message when the sends in flight complete or the
    /// batch is full. Under load, many frames then cost the NIC one message.
    fn send_eager(
        &self,
        mut state: MutexGuard<'_, State>,
        mut slot: SendSlot,
        len: usize,
    ) -> Result<(), TransportError> {
        // The runtime may have written several frames back to back (a run of stream
        // messages): they go as that many frames of a batch.
        let frames = frames_in(&self.rings.slot_mut(&mut slot)[PREFIX_LEN..PREFIX_LEN + len]);
        for _ in 0..frames {
            self.frame_sent();
        }
        if let Some(batch) = state.batch.as_mut() {
            if batch.len + len <= self.eager_limit && batch.frames + frames <= MAX_BATCH {
                let from = &self.rings.slot_mut(&mut slot)[PREFIX_LEN..PREFIX_LEN + len];
                let at = PREFIX_LEN + batch.len;
                self.rings.slot_mut(&mut batch.slot)[at..at + len].copy_from_slice(from);
                batch.len += len;
                batch.frames += frames;
                // The frame's own slot and credit go back: the batch's message carries it.
                state.free_send.push(slot);
                state.session.untake();
                drop(state);
                self.space.notify_waiters();
                return Ok(());
            }
            let full = state.batch.take().expect("checked");
            if let Err(e) = self.post_batch(&mut state, full) {
                drop(state);
                return Err(self.post_failed(e));
            }
        }
        let batch = Batch { slot, len, frames };
        if state.in_flight >= COALESCE_AT {
            state.batch = Some(batch);
            return Ok(());
        }
        let posted = self.post_batch(&mut state, batch);
        drop(state);
        posted.map_err(|e| self.post_failed(e))
    }

    /// Posts `batch` as one DATA message.
    fn post_batch(&self, state: &mut State, mut batch: Batch) -> Result<(), Error> {
        let n = if batch.frames > 1 { batch.frames } else { 0 };
        let bytes = self.rings.slot_mut(&mut batch.slot);
        state
            .session
            .advertise()
            .prefix(Kind::Data, n)
            .encode(bytes);
        state.post(&self.rings, batch.slot, PREFIX_LEN + batch.len)?;
        Counters::bump(&self.counters.eager_sends, u64::from(batch.frames));
        if batch.frames > 1 {
            Counters::bump(&self.counters.batches, 1);
        }
        Ok(())
    }

    /// Posts the waiting batch once fewer than [`COALESCE_AT`] sends are in flight.
    pub(crate) fn flush_batch(&self) -> Result<(), Close> {
        let mut state = self.state.lock();
        if state.in_flight >= COALESCE_AT || state.session.is_closed() {
            return Ok(());
        }
        match state.batch.take() {
            Some(batch) => self
                .post_batch(&mut state, batch)
                .map_err(|e| Close::Failed(format!("posting a send failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Fails the connection after a post failed; the error for the caller.
    fn post_failed(&self, e: Error) -> TransportError {
        let reason = format!("posting a send failed: {e}");
        self.fail(Close::Failed(reason.clone()));
        TransportError::Other(reason)
    }

    pub(crate) fn counters(&self) -> RdmaCounters {
        self.counters.snapshot(
            self.tx_pool.registrations() + self.rx_pool.registrations(),
            (self.rings.send_slots(), self.rings.recv_slots()),
            self.kept.held.load(Ordering::Relaxed) as u64,
        )
    }
}

impl RdmaConnection {
    /// This connection's transport counters.
    pub fn counters(&self) -> RdmaCounters {
        self.inner.counters()
    }

    /// Largest frame that travels eagerly (by one SEND) on this connection.
    pub fn eager_limit(&self) -> usize {
        self.inner.eager_limit
    }

    /// A buffer of `len` bytes for a large message field, in this connection's
    /// registered memory (as eRPC's `alloc_msg_buffer`): fill it, [`MessageBuf::freeze`]
    /// it into `Bytes`, put those in a message's `bytes` field, and a call on this
    /// connection lends the field from where it lies instead of copying it. It counts
    /// against [`RdmaConfig::keep_bytes`](crate::RdmaConfig::keep_bytes) while held;
    /// beyond that (or if registering fails) the buffer is ordinary heap memory, and the
    /// field is copied when sent, as any other.
    ///
    /// Each buffer is registered for its own use and deregistered when the last of its
    /// `Bytes` is dropped (a registration per buffer: worth it for large fields), so that
    /// the peer, which may read it once it was lent, never sees anything else in it. Fill
    /// it only with what this connection's peer may see.
    pub fn message_buf(&self, len: usize) -> MessageBuf {
        MessageBuf::registered(&self.inner, len).unwrap_or_else(|| MessageBuf::heap(len))
    }
}

/// Memory for a large message field: registered memory of one RDMA connection (sent
/// from where it lies on that connection), or heap memory. See
/// [`RdmaConnection::message_buf`]. Its initial contents are unspecified.
pub struct MessageBuf(MessageMemory);

enum MessageMemory {
    Registered(Kept),
    Heap(Vec<u8>),
}

impl std::fmt::Debug for MessageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBuf")
            .field("len", &self.len())
            .field("registered", &self.is_registered())
            .finish()
    }
}

impl MessageBuf {
    /// `len` bytes of heap memory.
    pub fn heap(len: usize) -> MessageBuf {
        MessageBuf(MessageMemory::Heap(vec![0; len]))
    }

    /// `len` bytes of `inner`'s lendable memory, if its budget for held registered
    /// memory has room and registering works.
    fn registered(inner: &Arc<Inner>, len: usize) -> Option<MessageBuf> {
        let count = inner.kept.clone();
        let size = crate::pool::class_of(len);
        if !count.reserve(size) {
            return None;
        }
        // A registration of its own, deregistered when dropped, never reused: once lent,
        // its key is known to the peer, so it must never hold anything else.
        let buf = match inner.msg_pool.take(len) {
            Ok(buf) => buf,
            Err(e) => {
                count.held.fetch_sub(size, Ordering::AcqRel);
                tracing::debug!("message buffer of {len} bytes in heap memory: {e}");
                return None;
            }
        };
        debug_assert_eq!(buf.region().len(), size);
        Some(MessageBuf(MessageMemory::Registered(Kept::new(
            buf, len, count,
        ))))
    }

    /// Its length.
    pub fn len(&self) -> usize {
        match &self.0 {
            MessageMemory::Registered(kept) => kept.len,
            MessageMemory::Heap(v) => v.len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is registered memory (sent without a copy on its connection).
    pub fn is_registered(&self) -> bool {
        matches!(self.0, MessageMemory::Registered(_))
    }

    /// The bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            MessageMemory::Registered(kept) => {
                let len = kept.len;
                let buf = Arc::get_mut(&mut kept.buf).expect("not shared before freeze");
                &mut buf.region_mut().as_mut_slice()[..len]
            }
            MessageMemory::Heap(v) => v,
        }
    }

    /// The filled buffer as `Bytes`, for a message field. Registered memory goes back
    /// to the connection's pool when the last of them (and the last loan of it) is gone.
    pub fn freeze(self) -> bytes::Bytes {
        match self.0 {
            MessageMemory::Registered(kept) => kept.into_bytes(),
            MessageMemory::Heap(v) => bytes::Bytes::from(v),
        }
    }
}

impl Connection for RdmaConnection {
    type SendBuf = SendBuf;
    type RecvBuf = RecvBuf;

    async fn alloc(&self, len: usize) -> Result<SendBuf, TransportError> {
        self.inner.alloc(len).await
    }

    async fn send(&self, frame: SendBuf) -> Result<(), TransportError> {
        match frame.target {
            Target::Registered(send) => {
                if frame.filled != frame.cap {
                    return Err(TransportError::Other(format!(
                        "frame of {} bytes sent with {} written",
                        frame.cap, frame.filled
                    )));
                }
                self.inner.send(send)
            }
            Target::Bytes(_) => Err(TransportError::Other(
                "a TCP buffer sent on an RDMA connection".into(),
            )),
        }
    }

    /// Frames back to back in one eager buffer go as one batch message (the receiver
    /// splits and checks them as it does the batches this transport makes itself).
    fn max_frames_per_buffer(&self) -> usize {
        usize::from(MAX_BATCH)
    }

    /// Fields of more than a slot's worth: those that lie in a kept received frame are
    /// lent from where they are (the frame's first bytes inline in the descriptor);
    /// others are copied.
    fn gather_min(&self) -> Option<usize> {
        Some(self.inner.eager_limit + 1)
    }

    async fn send_gathered(
        &self,
        head: SendBuf,
        tail: Vec<bytes::Bytes>,
    ) -> Result<(), TransportError> {
        match head.target {
            Target::Registered(send) if head.filled == head.cap => {
                self.inner.send_gathered(send, tail).await
            }
            Target::Registered(_) => Err(TransportError::Other(format!(
                "frame head of {} bytes sent with {} written",
                head.cap, head.filled
            ))),
            Target::Bytes(_) => Err(TransportError::Other(
                "a TCP buffer sent on an RDMA connection".into(),
            )),
        }
    }

    /// Keeps the server's account: frames lent to the peer are charged to it until
    /// their read-done.
    fn serving(
        &self,
        methods: std::sync::Arc<dyn rpc_core::MethodKinds>,
        account: &rpc_core::account::Account,
    ) {
        let _ = methods;
        self.inner.loan_charges.serving(account);
    }

    /// Rendezvous frames (pulled by READ into a buffer of their own) while the
    /// connection's [`RdmaConfig::keep_bytes`](crate::RdmaConfig::keep_bytes) has room;
    /// never eager ones, which hold a receive slot (and with it the peer's credit).
    fn keep(&self, frame: RecvBuf) -> Result<bytes::Bytes, RecvBuf> {
        frame.keep()
    }

    /// Takes the next frame the session has in order; when there is none, polls the
    /// completion queue itself (under load the next frame is usually there: no hop
    /// through the driver), and only then waits for the driver.
    async fn recv(&self) -> Result<Option<RecvBuf>, TransportError> {
        let inner = &self.inner;
        loop {
            let notified = inner.arrived.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up in between is not lost.
            notified.as_mut().enable();
            {
                let mut state = inner.state.lock();
                if let Some(frame) = state.session.poll_deliver() {
                    return Ok(Some(frame));
                }
                if state.session.is_closed() {
                    drop(state);
                    return inner.end_result().map(|()| None);
                }
            }
            match crate::driver::progress(inner) {
                Ok(0) => notified.await,
                Ok(_) => {}
                Err(why) => inner.fail(why),
            }
        }
    }

    fn close(&self) {
        self.inner.close_gracefully();
    }

    fn push_to(&self, sink: Arc<dyn FrameSink<RecvBuf>>) -> bool {
        // Nobody polls meanwhile, so the frames waiting now go up before any later ones.
        self.inner
            .completion
            .shared()
            .exclusive(|| self.push_waiting(sink))
    }

    fn peer(&self) -> String {
        self.inner.peer.clone()
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.inner.peer_addr
    }

    fn peer_certificates(&self) -> Option<Arc<[bytes::Bytes]>> {
        self.inner.peer_certificates.clone()
    }
}

impl RdmaConnection {
    /// [`Connection::push_to`] while nobody polls.
    fn push_waiting(&self, sink: Arc<dyn FrameSink<RecvBuf>>) -> bool {
        let ended = {
            let mut upward = self.inner.upward.lock();
            if upward.sink.is_some() {
                return false;
            }
            upward.sink = Some(sink.clone());
            upward.ended
        };
        // Outside the `upward` lock: the sink's work may drop this handle, whose drop
        // takes it.
        let waiting = self.inner.state.lock().session.take_ready();
        for frame in waiting {
            sink.frame(frame);
        }
        if ended {
            sink.closed(self.inner.end_result());
        }
        true
    }
}

impl Drop for RdmaConnection {
    fn drop(&mut self) {
        self.inner.close_gracefully();
        // Frames nobody will receive hold the connection's state: let them go.
        let waiting = {
            let mut upward = self.inner.upward.lock();
            upward.receiver_gone = true;
            self.inner.state.lock().session.take_ready()
        };
        drop(waiting);
    }
}

/// Frame-size limit for a payload limit.
pub(crate) fn max_frame(max_message_size: usize) -> usize {
    HEADER_LEN + MAX_METADATA_LEN + max_message_size
}

/// Lending budget reserved by `alloc` before its frame exists; given back if `alloc` fails.
struct Lending<'a> {
    inner: &'a Inner,
    bytes: usize,
}

impl Drop for Lending<'_> {
    fn drop(&mut self) {
        {
            self.inner.state.lock().session.release_lending(self.bytes);
        }
        self.inner.space.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use rpc_core::wire::{FrameKind, Header};

    use super::{frames_in, MAX_BATCH};

    fn frame(payload: usize) -> Vec<u8> {
        let mut header = Header::new(FrameKind::Message, 7);
        header.payload_len = payload as u32;
        let mut bytes = header.encode().to_vec();
        bytes.resize(bytes.len() + payload, 0xab);
        bytes
    }

    #[test]
    fn a_run_of_frames_in_one_buffer_counts_each() {
        assert_eq!(frames_in(&frame(10)), 1);
        let run: Vec<u8> = [frame(10), frame(0), frame(300)].concat();
        assert_eq!(frames_in(&run), 3);
        // Not whole frames: one (the receiver refuses it).
        assert_eq!(frames_in(&run[..run.len() - 1]), 1);
        assert_eq!(frames_in(&[0u8; 50]), 1);
        // More than a batch holds: one, never a count over the limit.
        let many: Vec<u8> = (0..=MAX_BATCH).flat_map(|_| frame(1)).collect();
        assert_eq!(frames_in(&many), 1);
    }
}
