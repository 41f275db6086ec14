//! The windows the inboxes of one connection may grant together.

use std::collections::VecDeque;
use std::sync::Weak;

use parking_lot::Mutex;

/// The windows the inboxes of one connection may grant together: each stream keeps to
/// its window, but a peer with many streams would otherwise make the sum `calls x
/// window`. A window is granted from the budget and given back as its messages are
/// consumed (or the stream ends); an inbox that finds no room waits, with its window
/// spent, until another gives some back. The reader never stops reading for it (control
/// frames, cancellations and the end of the connection are always seen).
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
pub(super) struct BudgetState {
    /// Windows granted and not given back.
    pub(super) committed: usize,
    /// Inboxes that want to grant more, in the order they asked.
    pub(super) waiting: VecDeque<Weak<dyn WaitsForRoom>>,
}

/// The smallest grant worth a window update (a smaller want is granted whole or not).
pub(super) const MIN_GRANT: usize = 4096;

impl Budget {
    pub(crate) fn new(limit: usize) -> Budget {
        Budget {
            limit,
            state: Mutex::default(),
        }
    }

    /// Up to `wanted` bytes of window, as far as the budget has room (nothing if less
    /// than `wanted` or [`MIN_GRANT`], whichever is smaller, is left).
    pub(super) fn commit(&self, wanted: usize) -> usize {
        let mut state = self.state.lock();
        let got = wanted.min(self.limit.saturating_sub(state.committed));
        if got < wanted.min(MIN_GRANT) {
            return 0;
        }
        state.committed += got;
        got
    }

    /// `waiter` retries once someone gives room back.
    pub(super) fn wait(&self, waiter: Weak<dyn WaitsForRoom>) {
        self.state.lock().waiting.push_back(waiter);
    }

    /// Gives `bytes` back; the inboxes waiting for room, to retry.
    #[must_use]
    pub(super) fn release(&self, bytes: usize) -> Vec<Weak<dyn WaitsForRoom>> {
        if bytes == 0 {
            return Vec::new();
        }
        let mut state = self.state.lock();
        state.committed = state.committed.saturating_sub(bytes);
        state.waiting.drain(..).collect()
    }

    /// Windows granted and not given back.
    #[cfg(test)]
    pub(crate) fn committed(&self) -> usize {
        self.state.lock().committed
    }
}

/// Who waits for room in a [`Budget`]: an inbox that wants to grant more window.
pub(super) trait WaitsForRoom: Send + Sync {
    /// Room was given back: try again.
    fn retry(&self);
}

/// Lets those that waited for room take what they could not.
pub(super) fn retry(waiting: Vec<Weak<dyn WaitsForRoom>>) {
    for waiter in waiting {
        if let Some(waiter) = waiter.upgrade() {
            waiter.retry();
        }
    }
}
