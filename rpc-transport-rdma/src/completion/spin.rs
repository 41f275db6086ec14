//! Callers' mode: a task alone on a shared CQ polls it itself while it waits (a caller
//! for its response, an idle server connection for its next request), and the CQ's
//! driver stands aside meanwhile (see the module above).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::SharedCq;
use crate::verbs::SpinClock;

/// What [`SharedCq::spin_until`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spin {
    /// `done` said true at once: nothing spun.
    Ready,
    /// `done` said true during the spin.
    Found,
    /// No spin (someone else waits, or no spinner is allowed), or a spin that ended
    /// without `done`.
    NotFound,
}

/// Tasks spinning on a CQ now, in the whole process (see [`SharedCq::spin_until`]).
static SPINNING: AtomicUsize = AtomicUsize::new(0);

impl SharedCq {
    /// Waits for `done` by polling the CQ from the calling task, for `await_spin` at
    /// most, without yielding ([`Connection::spin_until`](rdmarpc_core::Connection::spin_until)).
    /// Only a task alone on the CQ spins (nobody else waits on its connection, one
    /// member, no other spinner on it, fewer
    /// spinners in the process than the runtime has workers, so that one is left to run
    /// the rest): it holds its worker meanwhile. While it spins and
    /// after, the driver stands aside (callers' mode), until `others` says someone else
    /// waits, the spin ended without `done`, or a tick passes with no spin.
    pub(crate) fn spin_until(
        &self,
        done: &mut dyn FnMut() -> bool,
        others: &dyn Fn() -> bool,
    ) -> Spin {
        // Already there (under load, the next frames usually are): no spin, and the
        // driver is left as it is, unless others wait.
        if done() {
            if others() {
                self.wake_driver();
            }
            return Spin::Ready;
        }
        let Some(guard) = (!others()
            && !self.caller_spin.is_zero()
            && !self.failed.load(Ordering::Relaxed)
            && self.members.lock().by_qp.len() == 1)
            .then(|| Spinner::enter(self))
            .flatten()
        else {
            self.wake_driver();
            return Spin::NotFound;
        };
        // Counted first: the driver's tick sees this spin even if it looks between.
        self.spins.fetch_add(1, Ordering::Relaxed);
        self.callers_poll.store(true, Ordering::Release);
        let mut until = SpinClock::deadline(self.caller_spin);
        let got = loop {
            if done() {
                break true;
            }
            if until.passed() || self.progress().is_err() {
                // (A failed poll is the driver's to report.)
                break false;
            }
            std::hint::spin_loop();
        };
        drop(guard);
        if !got || others() {
            self.wake_driver();
        }
        if got {
            Spin::Found
        } else {
            Spin::NotFound
        }
    }

    /// Someone waits for the CQ's completions without polling it: the driver leaves
    /// callers' mode. Costs an atomic read when it is not in it.
    pub(crate) fn wake_driver(&self) {
        if self.callers_poll.load(Ordering::Relaxed)
            && self.callers_poll.swap(false, Ordering::AcqRel)
        {
            self.wake.notify_one();
        }
    }
}

/// The right to spin on one CQ: its spinner flag and a place in [`SPINNING`], given
/// back when dropped (also if `done` or a poll panics).
struct Spinner<'a> {
    cq: &'a SharedCq,
}

impl<'a> Spinner<'a> {
    /// Takes the CQ's spinner flag and a place among the process's spinners, if the
    /// calling task's runtime has a worker to spare (one fewer spinners than its
    /// workers; none on a current-thread runtime or outside a runtime).
    fn enter(cq: &'a SharedCq) -> Option<Spinner<'a>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let max = match runtime.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                runtime.metrics().num_workers().saturating_sub(1)
            }
            _ => 0,
        };
        if max == 0 || cq.spinner.swap(true, Ordering::Acquire) {
            return None;
        }
        if SPINNING.fetch_add(1, Ordering::AcqRel) >= max {
            SPINNING.fetch_sub(1, Ordering::AcqRel);
            cq.spinner.store(false, Ordering::Release);
            return None;
        }
        Some(Spinner { cq })
    }
}

impl Drop for Spinner<'_> {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, Ordering::AcqRel);
        self.cq.spinner.store(false, Ordering::Release);
    }
}
