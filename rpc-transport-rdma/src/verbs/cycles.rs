//! A spin clock that costs no system call: the CPU's cycle counter (the TSC on x86_64),
//! read where a busy-poll loop bounds its spinning, as perftest and eRPC do. Where the
//! kernel's clock source is not the TSC (an emulated guest's HPET), every
//! `Instant::now` is a system call; the TSC is read in user space everywhere.
//!
//! Its rate is learnt from the clock itself: the first [`SpinClock::deadline`] after
//! 10 ms since the counter was first read compares the two. Until then, and on other
//! architectures, spin bounds fall back to the system clock, read once per 64 checks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Cycles per microsecond, once learnt (0: not yet).
static RATE: AtomicU64 = AtomicU64::new(0);
/// The first reading, against which the rate is learnt.
static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();

/// How long the rate is measured over at least.
const CALIBRATION: Duration = Duration::from_millis(10);
/// Checks between two clock reads while the rate is unknown.
const CLOCK_EVERY: u32 = 64;

/// The cycle counter, if this architecture has one the process can read.
pub(super) fn counter() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a register and touches no memory: no memory-safety
        // precondition. (An OS may make it fault for user space, e.g. Linux's
        // PR_SET_TSC: a SIGSEGV, not undefined behaviour.)
        Some(unsafe { std::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Learns the counter's rate when enough time has passed since its first reading
/// (`now`, read by the caller anyway).
fn learn(now: Instant, cycles: u64) {
    let &(t0, c0) = ORIGIN.get_or_init(|| (now, cycles));
    let elapsed = now.saturating_duration_since(t0);
    if elapsed >= CALIBRATION && cycles > c0 {
        let per_us = (cycles - c0) / (elapsed.as_micros() as u64).max(1);
        if per_us > 0 {
            RATE.store(per_us, Ordering::Relaxed);
        }
    }
}

/// The pace of events (batches of completions): the gap between two, averaged, in
/// cycles of the counter. Costs a counter read per event, no system call.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pace {
    last: Option<u64>,
    /// Exponentially weighted (1/8), 0 until two events were seen.
    gap: u64,
}

impl Pace {
    /// An event happened now.
    pub(crate) fn tick(&mut self) {
        let Some(now) = counter() else { return };
        if let Some(last) = self.last {
            let gap = now.saturating_sub(last);
            self.gap = if self.gap == 0 {
                gap
            } else {
                self.gap - self.gap / 8 + gap / 8
            };
        }
        self.last = Some(now);
    }

    /// The averaged gap, once it and the counter's rate are known.
    pub(crate) fn gap(&self) -> Option<Duration> {
        let rate = RATE.load(Ordering::Relaxed);
        (self.gap > 0 && rate > 0).then(|| Duration::from_micros(self.gap / rate))
    }
}

/// The end of a spin: [`SpinClock::passed`] tells when it has come.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SpinClock {
    /// `len` cycles of the counter from `start`. Compared as a distance from `start`, so
    /// a counter read on another CPU that lags ends the spin rather than prolongs it.
    Cycles { start: u64, len: u64 },
    /// By the system clock, read every `CLOCK_EVERY` checks.
    Clock { until: Instant, checks: u32 },
}

impl SpinClock {
    /// A spin of `length` from now.
    pub(crate) fn deadline(length: Duration) -> SpinClock {
        let rate = RATE.load(Ordering::Relaxed);
        match counter() {
            Some(start) if rate > 0 => {
                let micros = u64::try_from(length.as_micros()).unwrap_or(u64::MAX);
                SpinClock::Cycles {
                    start,
                    len: rate.saturating_mul(micros),
                }
            }
            cycles => {
                let now = Instant::now();
                if let Some(cycles) = cycles {
                    learn(now, cycles);
                }
                SpinClock::Clock {
                    until: now.checked_add(length).unwrap_or(now),
                    checks: 0,
                }
            }
        }
    }

    /// Whether the spin is over.
    pub(crate) fn passed(&mut self) -> bool {
        match self {
            SpinClock::Cycles { start, len } => {
                counter().is_none_or(|now| now.wrapping_sub(*start) >= *len)
            }
            SpinClock::Clock { until, checks } => {
                *checks = checks.wrapping_add(1);
                checks.is_multiple_of(CLOCK_EVERY) && Instant::now() >= *until
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_ends_after_its_length_and_not_long_before() {
        // Twice: the second spin may run on the learnt rate.
        for _ in 0..2 {
            let start = Instant::now();
            let mut spin = SpinClock::deadline(Duration::from_millis(15));
            while !spin.passed() {
                std::hint::spin_loop();
            }
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(14), "ended after {took:?}");
        }
        #[cfg(target_arch = "x86_64")]
        assert!(
            RATE.load(Ordering::Relaxed) > 0,
            "the TSC's rate was learnt"
        );
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_pace_is_the_averaged_gap_between_events() {
        // The rate is learnt first (a spin past the calibration time).
        let mut spin = SpinClock::deadline(Duration::from_millis(12));
        while !spin.passed() {}
        let mut spin = SpinClock::deadline(Duration::from_micros(1));
        while !spin.passed() {}
        let mut pace = Pace::default();
        assert_eq!(pace.gap(), None);
        for _ in 0..20 {
            pace.tick();
            std::thread::sleep(Duration::from_millis(2));
        }
        let gap = pace.gap().expect("a gap");
        assert!(gap >= Duration::from_millis(2), "{gap:?}");
        assert!(gap < Duration::from_millis(200), "{gap:?}");
    }
}
