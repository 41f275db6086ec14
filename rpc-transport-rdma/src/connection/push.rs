//! Pushed rendezvous frames, send side. A frame over the eager limit needs a registered
//! buffer to lend; where this process cannot pin one (its locked-memory limit spent, idle
//! buffers given back already), the frame is written into heap memory instead, its
//! descriptor goes flagged PUSHED, and its bytes follow in PIECE messages, one send slot
//! and one data credit each (the receive side: `protocol/session/pushed.rs`). Slower than
//! a READ, but the call is served. The loan is kept as any other (the lending limit, the
//! loan timeout, the read-done that ends it), without registered memory behind it.
//!
//! While frames are being pushed, their pieces go before any new frame (`take_slot`
//! waits): a receiver copies out the frames that arrive behind a pushed one and re-posts
//! their slots at once, so the pieces always find receive slots, and the frames sent
//! meanwhile stay few (those whose slot was taken before the push began).

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;

use parking_lot::MutexGuard;
use rdmarpc_core::wire::HEADER_LEN;
use rdmarpc_core::TransportError;

use super::send::{Large, RegisteredSend};
use super::{Inner, State};
use crate::counters::Counters;
use crate::protocol::session::Close;
use crate::protocol::{Kind, PIECE_TOKEN_LEN, PREFIX_LEN};
use crate::verbs::{Error, SendSlot};

/// A frame whose pieces are being posted.
#[derive(Debug)]
pub(crate) struct Push {
    token: u64,
    bytes: Vec<u8>,
    /// Bytes posted so far.
    at: usize,
}

/// The frames being pushed, oldest first (its pieces go first).
pub(crate) type Pushes = VecDeque<Push>;

impl Inner {
    /// A buffer for a frame of `len` bytes over the eager limit: registered, to lend, or,
    /// where the locked-memory account refused one, in heap memory, to push (said once at
    /// WARN).
    ///
    /// # Errors
    /// Registration failed for a reason other than the limit.
    pub(super) fn rendezvous_buffer(&self, len: usize) -> Result<Large, TransportError> {
        match self.tx_pool.take(len) {
            Ok(buf) => Ok(Large::Pinned(buf)),
            Err(e) if e.is_out_of_locked_memory() => {
                static SAID: AtomicBool = AtomicBool::new(false);
                crate::warn_once::warn_once(
                    &SAID,
                    format_args!(
                        "rendezvous frames to {} are pushed through the connection's send \
                         slots from unpinned memory, slot by slot (slower; raise the limit \
                         to avoid it): {e}",
                        self.peer
                    ),
                );
                // A failed allocation fails this message, never the process.
                let mut bytes = Vec::new();
                bytes.try_reserve_exact(len).map_err(|_| {
                    TransportError::Other(format!("no heap memory for a message of {len} bytes"))
                })?;
                bytes.resize(len, 0);
                Ok(Large::Heap(bytes))
            }
            Err(e) => Err(TransportError::Other(format!("rendezvous buffer: {e}"))),
        }
    }

    /// Sends the frame in `bytes` (written by the caller, who took `slot`) pushed: its
    /// descriptor in `slot`, then its pieces.
    pub(super) fn send_pushed(
        &self,
        state: MutexGuard<'_, State>,
        slot: SendSlot,
        mut bytes: Vec<u8>,
        send: &mut RegisteredSend,
    ) -> Result<(), TransportError> {
        bytes.truncate(send.len);
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&bytes[..HEADER_LEN]);
        let lent = self.rings.lend_pushed(std::mem::take(&mut send.reserved));
        self.loan_charges
            .lent(lent.key, std::mem::take(&mut send.charge));
        Counters::bump(&self.counters.pushed_sends, 1);
        let len = bytes.len();
        self.post_descriptor(state, slot, lent, len, header, Vec::new(), Some(bytes))
    }

    /// Queues the frame `token` (its descriptor posted) and posts what pieces slots and
    /// credits allow.
    ///
    /// # Errors
    /// A post failed (the caller fails the connection).
    pub(super) fn push(&self, state: &mut State, token: u64, bytes: Vec<u8>) -> Result<(), Error> {
        state.pushes.push_back(Push {
            token,
            bytes,
            at: 0,
        });
        self.push_pieces(state)
    }

    /// Posts pieces of the frames being pushed, oldest first, while a send slot and a
    /// data credit are free.
    ///
    /// # Errors
    /// A post failed (the caller fails the connection).
    fn push_pieces(&self, state: &mut State) -> Result<(), Error> {
        let piece = self.piece_len;
        while let Some(push) = state.pushes.front_mut() {
            if !state.sends.has_free() || !state.session.try_take_data() {
                return Ok(());
            }
            let mut slot = state.sends.take().expect("checked");
            let n = piece.min(push.bytes.len() - push.at);
            let advert = state.session.advertise();
            let out = self.rings.slot_mut(&mut slot);
            advert.prefix(Kind::Piece, 0).encode(out);
            out[PREFIX_LEN..PREFIX_LEN + PIECE_TOKEN_LEN]
                .copy_from_slice(&push.token.to_le_bytes());
            out[PREFIX_LEN + PIECE_TOKEN_LEN..][..n].copy_from_slice(&push.bytes[push.at..][..n]);
            push.at += n;
            if push.at == push.bytes.len() {
                state.pushes.pop_front();
            }
            state
                .sends
                .post(&self.rings, slot, PREFIX_LEN + PIECE_TOKEN_LEN + n)?;
        }
        Ok(())
    }

    /// A send slot or credit went back outside a completion (`state` still locked):
    /// wakes the senders waiting, and runs the bounces and pieces waiting for a slot,
    /// which no completion may come to run.
    pub(super) fn gave_back(&self, state: MutexGuard<'_, State>) {
        let waiting = !state.pushes.is_empty() || !state.unpinned.is_empty();
        drop(state);
        self.space.notify_waiters();
        if waiting {
            crate::driver::resume(self);
        }
    }

    /// Posts the pieces due after completions gave slots or credits back (the driver,
    /// after each batch); wakes the senders waiting once every frame is pushed.
    ///
    /// # Errors
    /// A post failed.
    pub(crate) fn push_due(&self) -> Result<(), Close> {
        let drained = {
            let mut state = self.state.lock();
            if state.pushes.is_empty() {
                return Ok(());
            }
            self.push_pieces(&mut state)
                .map_err(|e| Close::Failed(format!("posting a piece failed: {e}")))?;
            state.pushes.is_empty()
        };
        if drained {
            self.space.notify_waiters();
        }
        Ok(())
    }
}
