//! Rapid reset (CVE-2023-44487): a client that opens streams and resets each one right
//! after the server accepted it makes the server start a handler per reset. This counts
//! the client's resets of accepted streams over a sliding window of recent streams and
//! tells when they are past the budget: the connection then gets GOAWAY with
//! `ENHANCE_YOUR_CALM` and is closed. Sans-IO: the driver and the calls feed it.

/// Resets of accepted streams over a window of recently accepted streams.
///
/// Over budget: more than `min_resets` resets counted and more than half of the streams
/// counted were reset. The counts decay by half once more than `window` streams were
/// counted, so the ratio is of the recent streams: a client that cancels some of its
/// calls now and then stays under it, one that resets most of them does not.
#[derive(Debug, Clone)]
pub(crate) struct ResetBudget {
    min_resets: u64,
    window: u64,
    accepted: u64,
    resets: u64,
}

impl ResetBudget {
    /// A budget of more than `min_resets` resets (at least 1) that are more than half
    /// of the recent streams: the window is four times that.
    pub(crate) fn new(min_resets: u32) -> ResetBudget {
        let min_resets = u64::from(min_resets.max(1));
        ResetBudget {
            min_resets,
            window: 4 * min_resets,
            accepted: 0,
            resets: 0,
        }
    }

    /// A stream was accepted (a call started for it).
    pub(crate) fn accepted(&mut self) {
        self.accepted += 1;
        if self.accepted > self.window {
            self.accepted /= 2;
            self.resets /= 2;
        }
    }

    /// The client reset an accepted stream before its call finished. Returns whether the
    /// resets are now over the budget.
    pub(crate) fn reset(&mut self) -> bool {
        // A reset is of a stream counted as accepted (the decay may have halved it away).
        self.resets = (self.resets + 1).min(self.accepted.max(1));
        self.over()
    }

    /// Whether the resets are over the budget.
    pub(crate) fn over(&self) -> bool {
        self.resets > self.min_resets && self.resets * 2 > self.accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resetting_every_stream_is_over_budget_just_past_the_minimum() {
        let mut budget = ResetBudget::new(8);
        for n in 1..=8 {
            budget.accepted();
            assert!(!budget.reset(), "reset {n} of 8 is within the minimum");
        }
        budget.accepted();
        assert!(budget.reset(), "the 9th reset of 9 streams is over");
    }

    #[test]
    fn cancelling_a_few_calls_never_is() {
        let mut budget = ResetBudget::new(8);
        // Two in five calls cancelled, for a long time.
        for n in 0..100_000u32 {
            budget.accepted();
            if n % 5 < 2 {
                assert!(!budget.reset(), "stream {n}");
            }
        }
    }

    #[test]
    fn resets_count_over_the_recent_streams_only() {
        let mut budget = ResetBudget::new(8);
        // Many good calls first do not buy a later burst of resets.
        for _ in 0..10_000 {
            budget.accepted();
        }
        let mut over = None;
        for n in 1..=1000 {
            budget.accepted();
            if budget.reset() {
                over = Some(n);
                break;
            }
        }
        let n = over.expect("a long run of resets is over budget");
        assert!(n <= 4 * 8 * 2, "over after {n} resets");
    }

    #[test]
    fn more_than_half_reset_but_few_is_within() {
        let mut budget = ResetBudget::new(100);
        for _ in 0..50 {
            budget.accepted();
            assert!(!budget.reset());
        }
        assert!(!budget.over());
    }
}
