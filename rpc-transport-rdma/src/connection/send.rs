//! The send path: a slot and a credit per frame, eager frames posted in batches,
//! rendezvous frames lent within the lending limit, gathered sends.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::MutexGuard;
use rdmarpc_core::wire::HEADER_LEN;
use rdmarpc_core::TransportError;

use super::{Inner, State};
use crate::counters::Counters;
use crate::pool::LargeBuf;
use crate::protocol::session::Close;
use crate::protocol::{Kind, Prefix, Rendezvous, MAX_BATCH, PREFIX_LEN};
use crate::verbs::{Error, RegisteredTarget, SendBuf, SendSlot, Target};

/// How many whole frames `bytes` holds back to back (1 unless the runtime wrote a run
/// of them; bytes that are not whole frames count as one, which the receiver refuses).
pub(super) fn frames_in(bytes: &[u8]) -> u16 {
    let mut at = 0;
    let mut n: u16 = 0;
    while at < bytes.len() {
        match rdmarpc_core::wire::Header::decode(&bytes[at..]) {
            Ok(Some(header)) if header.frame_len() <= bytes.len() - at && n < MAX_BATCH => {
                at += header.frame_len();
                n += 1;
            }
            _ => return 1,
        }
    }
    n.max(1)
}

/// Eager frames back to back in one send slot, not posted yet (held by [`Sends`] while
/// it waits).
///
/// [`Sends`]: super::Sends
#[derive(Debug)]
pub(crate) struct Batch {
    pub(super) slot: SendSlot,
    /// Bytes of frames after the prefix.
    pub(super) len: usize,
    pub(super) frames: u16,
}

/// A send in progress on registered memory: the token(s) it owns.
#[derive(Debug)]
pub(crate) struct RegisteredSend {
    pub(super) inner: Arc<Inner>,
    /// Present until sent; dropping it unsent gives slot and credit back.
    pub(super) slot: Option<SendSlot>,
    /// The rendezvous buffer, for frames over the eager limit.
    pub(super) large: Option<Large>,
    pub(super) len: usize,
    /// Bytes of the lending budget this frame holds (rendezvous frames), released by its
    /// read-done, or by dropping it unsent.
    pub(super) reserved: usize,
    /// Its bytes on a server's account (rendezvous frames), held by its loan once lent.
    pub(super) charge: rdmarpc_core::account::Charge,
}

/// A frame over the eager limit: in a registered buffer to lend, or, where none could be
/// pinned, in heap memory to push in pieces (`push.rs`).
#[derive(Debug)]
pub(crate) enum Large {
    Pinned(LargeBuf),
    Heap(Vec<u8>),
}

impl RegisteredTarget for RegisteredSend {
    fn area_mut(&mut self) -> &mut [u8] {
        match &mut self.large {
            Some(Large::Pinned(buf)) => &mut buf.region_mut().as_mut_slice()[..self.len],
            Some(Large::Heap(bytes)) => &mut bytes[..self.len],
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
            state.sends.give_back(slot);
            state.session.untake();
        }
        if reserved > 0 {
            state.session.release_lending(reserved);
        }
        self.inner.gave_back(state);
    }
}

impl Inner {
    /// Waits until one more frame of `len` bytes fits the lending limit (the smaller of
    /// [`RdmaConfig::lend_budget`](crate::RdmaConfig::lend_budget) and
    /// [`RdmaConfig::max_loans`](crate::RdmaConfig::max_loans) and the peer's figures; a
    /// frame larger than the budget goes alone), and reserves it.
    pub(super) async fn reserve_lending(&self, len: usize) -> Result<usize, TransportError> {
        self.wait_for(
            |state| state.session.try_reserve_lending(len).then_some(len),
            || {},
        )
        .await
    }

    /// Waits for a free send slot and a data credit, and for the frames being pushed to
    /// have gone (`push.rs`: their pieces come first).
    pub(super) async fn take_slot(&self) -> Result<SendSlot, TransportError> {
        self.wait_for(
            |state| {
                (state.pushes.is_empty() && state.sends.has_free() && state.session.try_take_data())
                    .then(|| state.sends.take().expect("checked non-empty"))
            },
            || Counters::bump(&self.counters.credit_stalls, 1),
        )
        .await
    }

    /// Waits, woken by `space`, until `take` gets what it needs from the state (under its
    /// lock), or the connection closes. `stalled` runs once, the first time it waits.
    pub(super) async fn wait_for<T>(
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
            // What frees the space comes by completions: the driver must poll.
            self.completion.shared().wake_driver();
            notified.await;
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
            // Loans come back by completions: the driver polls for them.
            self.completion.shared().wake_driver();
            let charge = self.loan_charges.charge(len, &self.closed).await?;
            let reserved = self.reserve_lending(len).await?;
            let guard = Lending {
                inner: self,
                bytes: reserved,
            };
            let buf = self.rendezvous_buffer(len)?;
            std::mem::forget(guard);
            (Some(buf), reserved, charge)
        } else {
            (None, 0, rdmarpc_core::account::Charge::none())
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
            state.sends.give_back(slot);
            return Err(self.close_error());
        }
        let Some(large) = large else {
            return self.send_eager(state, slot, send.len);
        };
        // Frames waiting in a batch go first: frames arrive in the order sent.
        if let Some(batch) = state.sends.take_batch() {
            if let Err(e) = self.post_batch(&mut state, batch) {
                drop(state);
                return Err(self.post_failed(e));
            }
        }
        let buf = match large {
            Large::Heap(bytes) => return self.send_pushed(state, slot, bytes, &mut send),
            Large::Pinned(buf) => buf,
        };
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
                state.sends.give_back(slot);
                drop(state);
                let reason = format!("lending a rendezvous buffer failed: {e}");
                self.fail(Close::Failed(reason.clone()));
                return Err(TransportError::Other(reason));
            }
        };
        self.post_descriptor(state, slot, lent, send.len, header, Vec::new(), None)
    }

    /// Sends a rendezvous descriptor in `slot` for the frame `head` + the `len` bytes of
    /// `lent` (lent already; an empty head: the whole frame is lent), or, with `pushed`,
    /// of those bytes pushed after it in pieces (`push.rs`).
    #[allow(clippy::too_many_arguments, reason = "one descriptor's fields")]
    pub(super) fn post_descriptor(
        &self,
        mut state: MutexGuard<'_, State>,
        mut slot: SendSlot,
        lent: crate::verbs::Lent,
        len: usize,
        header: [u8; HEADER_LEN],
        head: Vec<u8>,
        pushed: Option<Vec<u8>>,
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
        let mut prefix = advert.prefix(Kind::Rendezvous, head_len as u16);
        if pushed.is_some() {
            prefix.flags |= Prefix::PUSHED;
        }
        prefix.encode(bytes);
        descriptor.encode(&mut bytes[PREFIX_LEN..]);
        Counters::bump(&self.counters.rendezvous_sends, 1);
        let mut posted = state.sends.post(
            &self.rings,
            slot,
            PREFIX_LEN + crate::protocol::RENDEZVOUS_LEN + head_len,
        );
        let pushing = pushed.is_some();
        if let (Ok(()), Some(bytes)) = (&posted, pushed) {
            // Its pieces follow at once, as far as slots and credits go; the driver
            // posts the rest as they come back.
            posted = self.push(&mut state, token, bytes);
        }
        drop(state);
        if pushing {
            // Senders waiting for the pushes to go may go now, if these did.
            self.space.notify_waiters();
        }
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
        // Loans come back by completions: the driver polls for them.
        self.completion.shared().wake_driver();
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
            state.sends.give_back(slot);
            return Err(self.close_error());
        }
        // Frames waiting in a batch go first: frames arrive in the order sent.
        if let Some(batch) = state.sends.take_batch() {
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
                state.sends.give_back(slot);
                drop(state);
                let reason = format!("lending a kept frame failed: {e}");
                self.fail(Close::Failed(reason.clone()));
                return Err(TransportError::Other(reason));
            }
        };
        Counters::bump(&self.counters.lent_in_place, 1);
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&head_bytes[..HEADER_LEN]);
        self.post_descriptor(state, slot, lent, len, header, head_bytes, None)
    }

    /// Sends `head` + `tail` (`total` bytes) copied into one frame.
    pub(super) async fn send_copied(
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
    /// [`COALESCE_AT`](super::slots::COALESCE_AT) sends are in flight; else it waits in a batch (a slot of frames
    /// back to back) that goes as one message when the sends in flight complete or the
    /// batch is full. Under load, many frames then cost the NIC one message.
    pub(super) fn send_eager(
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
        if let Some(batch) = state.sends.batch_mut() {
            if batch.len + len <= self.eager_limit && batch.frames + frames <= MAX_BATCH {
                let from = &self.rings.slot_mut(&mut slot)[PREFIX_LEN..PREFIX_LEN + len];
                let at = PREFIX_LEN + batch.len;
                self.rings.slot_mut(&mut batch.slot)[at..at + len].copy_from_slice(from);
                batch.len += len;
                batch.frames += frames;
                // The frame's own slot and credit go back: the batch's message carries it.
                state.sends.give_back(slot);
                state.session.untake();
                self.gave_back(state);
                return Ok(());
            }
            let full = state.sends.take_batch().expect("checked");
            if let Err(e) = self.post_batch(&mut state, full) {
                drop(state);
                return Err(self.post_failed(e));
            }
        }
        let batch = Batch { slot, len, frames };
        if state.sends.coalescing() {
            state.sends.hold_batch(batch);
            return Ok(());
        }
        let posted = self.post_batch(&mut state, batch);
        drop(state);
        posted.map_err(|e| self.post_failed(e))
    }

    /// Posts `batch` as one DATA message.
    pub(super) fn post_batch(&self, state: &mut State, mut batch: Batch) -> Result<(), Error> {
        let n = if batch.frames > 1 { batch.frames } else { 0 };
        let bytes = self.rings.slot_mut(&mut batch.slot);
        state
            .session
            .advertise()
            .prefix(Kind::Data, n)
            .encode(bytes);
        state
            .sends
            .post(&self.rings, batch.slot, PREFIX_LEN + batch.len)?;
        Counters::bump(&self.counters.eager_sends, u64::from(batch.frames));
        if batch.frames > 1 {
            Counters::bump(&self.counters.batches, 1);
        }
        Ok(())
    }

    /// Posts the waiting batch once fewer than
    /// [`COALESCE_AT`](super::slots::COALESCE_AT) sends are in flight.
    pub(crate) fn flush_batch(&self) -> Result<(), Close> {
        let mut state = self.state.lock();
        if state.sends.coalescing() || state.session.is_closed() {
            return Ok(());
        }
        match state.sends.take_batch() {
            Some(batch) => self
                .post_batch(&mut state, batch)
                .map_err(|e| Close::Failed(format!("posting a send failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Fails the connection after a post failed; the error for the caller.
    pub(super) fn post_failed(&self, e: Error) -> TransportError {
        let reason = format!("posting a send failed: {e}");
        self.fail(Close::Failed(reason.clone()));
        TransportError::Other(reason)
    }
}

/// Lending budget reserved by `alloc` before its frame exists; given back if `alloc` fails.
pub(super) struct Lending<'a> {
    pub(super) inner: &'a Inner,
    pub(super) bytes: usize,
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
    use rdmarpc_core::wire::{FrameKind, Header};

    use super::frames_in;
    use crate::protocol::MAX_BATCH;

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
