//! The time of the per-call paths: a call's deadline on the client, a request's deadline
//! on the server, a load generator's latency stamps.
//!
//! By default it is the system's monotonic clock ([`Instant::now`]): a vDSO read of
//! ~20 ns where the kernel's clock source is the TSC. Where it is not (a guest whose
//! clock source is an emulated HPET), every read is a system call, and a call makes
//! several. A transport that already reads a cheaper clock on its hot path (the RDMA
//! transport's cycle counter, as perftest and eRPC do) installs it here with
//! [`install`], once, for the whole process; it answers in user space and falls back to
//! the system clock whenever it cannot tell the time (not yet calibrated, or found
//! drifting).
//!
//! An installed source must tell the system clock's time: deadlines taken from it are
//! timed by tokio's timers, which read the system clock. The RDMA transport's steps to
//! the system clock's time at each of its anchors (every 100 ms) by its rate's error over
//! that time, well under a millisecond once learnt; a source further off turns itself
//! off.

use std::sync::OnceLock;
use std::time::Instant;

/// A clock that answers in user space, or `None` when it cannot tell the time now.
pub type ClockSource = fn() -> Option<Instant>;

static SOURCE: OnceLock<ClockSource> = OnceLock::new();

/// Makes `source` the process's clock for the per-call paths, unless one was installed
/// before; whether this one was.
pub fn install(source: ClockSource) -> bool {
    SOURCE.set(source).is_ok()
}

/// Now: from the installed source if it answers, else from the system's clock.
pub fn now() -> Instant {
    SOURCE
        .get()
        .and_then(|source| source())
        .unwrap_or_else(Instant::now)
}

/// Now on tokio's clock: from the installed source if it answers, else tokio's own
/// reading (which, unlike the system's, stands still in tests that pause time: an
/// installed source does not, so a test that pauses time must not open an RDMA device).
pub fn tokio_now() -> tokio::time::Instant {
    match SOURCE.get().and_then(|source| source()) {
        Some(now) => tokio::time::Instant::from_std(now),
        None => tokio::time::Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn without_a_source_it_is_the_system_clock() {
        // (No test of this crate installs one.)
        let before = Instant::now();
        let now = now();
        let after = Instant::now();
        assert!(before <= now && now <= after);
        assert!(tokio_now().into_std() >= after);
        assert!(tokio_now().into_std() - after < Duration::from_secs(1));
    }
}
