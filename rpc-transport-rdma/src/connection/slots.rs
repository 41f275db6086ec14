//! The send half of a connection's state: its free send slots, the SENDs in flight, and
//! the batch of eager frames waiting for them. The fields are private: the send path
//! (`send.rs`), control messages (`control.rs`) and completions (`driver.rs`) change them
//! only through these methods, under the state lock.
//!
//! Invariants kept here: every SEND is posted through [`Sends::post`] (so `in_flight` is
//! exact, and a message's advertised credit count, written under the lock, cannot be
//! overtaken by a later message that advertised less); a slot is either free, in a
//! batch, held by one sender, or owned by the NIC until its completion gives it back
//! ([`Sends::completed`]).

use super::send::Batch;
use crate::verbs::{Error, Rings, SendSlot};

/// Sends in flight from which an eager frame waits in a batch rather than going at once.
/// One: a frame goes at once whenever the send queue is idle (no latency added to a
/// lone call); behind a send in flight it waits at most until that send completes.
pub(crate) const COALESCE_AT: u32 = 1;

/// The send half of a connection's state: see the module docs.
#[derive(Debug)]
pub(crate) struct Sends {
    free: Vec<SendSlot>,
    /// SENDs posted and not completed.
    in_flight: u32,
    /// Eager frames waiting to go as one message.
    batch: Option<Batch>,
}

impl Sends {
    /// The send half of a new connection, every slot of its send ring free.
    pub(crate) fn new(free: Vec<SendSlot>) -> Sends {
        Sends {
            free,
            in_flight: 0,
            batch: None,
        }
    }

    /// How many send slots are free.
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }

    /// Whether a send slot is free.
    pub(crate) fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// Whether all `total` slots of the send ring are free: nothing is posted, batched
    /// or being written.
    pub(crate) fn all_free(&self, total: usize) -> bool {
        self.free.len() == total
    }

    /// A free send slot, if there is one.
    pub(crate) fn take(&mut self) -> Option<SendSlot> {
        self.free.pop()
    }

    /// A slot taken and not posted comes back.
    pub(crate) fn give_back(&mut self, slot: SendSlot) {
        self.free.push(slot);
    }

    /// The SEND posted from `slot` completed: the slot is free again.
    pub(crate) fn completed(&mut self, slot: SendSlot) {
        self.free.push(slot);
        self.in_flight -= 1;
    }

    /// The send ring grew by `slots`.
    pub(crate) fn grew(&mut self, slots: impl IntoIterator<Item = SendSlot>) {
        self.free.extend(slots);
    }

    /// Posts the first `len` bytes of `slot` as one SEND and counts it in flight; on
    /// failure the slot goes back to the free ones.
    ///
    /// # Errors
    /// The post failed (the connection is then failed by the caller).
    pub(crate) fn post(&mut self, rings: &Rings, slot: SendSlot, len: usize) -> Result<(), Error> {
        match rings.post_send(slot, len) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err((slot, e)) => {
                self.free.push(slot);
                Err(e)
            }
        }
    }

    /// Whether enough SENDs are in flight that an eager frame waits in a batch.
    pub(crate) fn coalescing(&self) -> bool {
        self.in_flight >= COALESCE_AT
    }

    /// The batch waiting, taken (to post it, or to add to it and put it back).
    pub(crate) fn take_batch(&mut self) -> Option<Batch> {
        self.batch.take()
    }

    /// The batch waiting, to add a frame to it.
    pub(crate) fn batch_mut(&mut self) -> Option<&mut Batch> {
        self.batch.as_mut()
    }

    /// `batch` waits for the SENDs in flight.
    pub(crate) fn hold_batch(&mut self, batch: Batch) {
        debug_assert!(self.batch.is_none(), "one batch at a time");
        self.batch = Some(batch);
    }
}
