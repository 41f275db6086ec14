//! Callers' mode: a task alone on a shared CQ polls it itself while it waits (a caller
//! for its response, an idle server connection for its next request), and the CQ's
//! driver stands aside meanwhile (see the module above).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::SharedCq;
use crate::verbs::SpinClock;

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
    /// waits, the spin ended without `done`, or a tick passes with no spin. Whether
    /// `done` returned true.
    pub(crate) fn spin_until(
        &self,
        done: &mut dyn FnMut() -> bool,
        others: &dyn Fn() -> bool,
    ) -> bool {
        // Already there (under load, the next frames usually are): no spin, and the
        // driver is left as it is, unless others wait.
        if done() {
            if others() {
                self.wake_driver();
            }
            return true;
        }
        if others()
            || self.max_spinners == 0
            || self.caller_spin.is_zero()
            || self.failed.load(Ordering::Relaxed)
            || self.members.lock().by_qp.len() != 1
            || self.spinner.swap(true, Ordering::Acquire)
        {
            self.wake_driver();
            return false;
        }
        if SPINNING.fetch_add(1, Ordering::AcqRel) >= self.max_spinners {
            SPINNING.fetch_sub(1, Ordering::AcqRel);
            self.spinner.store(false, Ordering::Release);
            self.wake_driver();
            return false;
        }
        self.callers_poll.store(true, Ordering::Release);
        self.spins.fetch_add(1, Ordering::Relaxed);
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
        SPINNING.fetch_sub(1, Ordering::AcqRel);
        self.spinner.store(false, Ordering::Release);
        if !got || others() {
            self.wake_driver();
        }
        got
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
