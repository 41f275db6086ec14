//! The windows the inboxes of one connection may grant together.

use std::collections::VecDeque;
use std::sync::Weak;

use parking_lot::Mutex;

use super::inbox::Inbox;

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
    pub(super) waiting: VecDeque<Weak<Inbox>>,
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

    pub(super) fn wait(&self, inbox: Weak<Inbox>) {
        self.state.lock().waiting.push_back(inbox);
    }

    /// Gives `bytes` back; the inboxes waiting for room, to retry.
    #[must_use]
    pub(super) fn release(&self, bytes: usize) -> Vec<Weak<Inbox>> {
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

/// Lets the inboxes that waited for room grant what they could not.
pub(super) fn retry(waiting: Vec<Weak<Inbox>>) {
    for inbox in waiting {
        if let Some(inbox) = inbox.upgrade() {
            inbox.retry_grant();
        }
    }
}
