//! The system's monotonic clock told from the cycle counter: what this transport
//! installs as the process's clock for the per-call paths ([`rdmarpc_core::clock`]), so
//! that a call's deadline and a load generator's stamps cost no system call where the
//! kernel's clock source is not the TSC (an emulated guest's HPET).
//!
//! The counter's reading is turned into an [`Instant`] from an anchor (a reading of both
//! clocks together: the counter on both sides of the system clock, the closest of three
//! such pairs), at a rate learnt over the whole time since the first reading. The
//! anchor is taken again whenever the last one is more than [`REANCHOR`] old by the
//! counter: three system clock reads per [`REANCHOR`] while the clock is in use, which also
//! checks the prediction. [`STRIKES`] predictions in a row further off than [`MAX_ERROR`]
//! (and 1 %, and how far apart the counter's readings around each anchor's clock read
//! were) turn the clock off for good (the system clock answers from then on).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::cycles::counter;

/// How old an anchor may get, by the counter, before it is taken again.
const REANCHOR: Duration = Duration::from_millis(100);
/// How long the rate is learnt over before the clock answers.
const CALIBRATION: Duration = Duration::from_millis(20);
/// How far off a prediction may be (against the system clock, at a new anchor; plus 1 %
/// of the time since the last anchor) before the counter is deemed unfit as a clock (it
/// stopped, jumped, or runs at a varying rate).
const MAX_ERROR: Duration = Duration::from_millis(2);
/// Predictions off in a row before the counter is deemed unfit: one can be a thread
/// preempted while it read the clocks, or a rate learnt from noisy first readings (a
/// loaded, emulated guest), which the next anchors correct.
const STRIKES: u32 = 3;

/// The first reading of both clocks: the origin of the anchors and of the rate.
static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
/// The latest anchor, written under a sequence count (odd while it is being written).
static SEQ: AtomicU64 = AtomicU64::new(0);
/// The anchor's time, in nanoseconds since `ORIGIN`.
static AT_NS: AtomicU64 = AtomicU64::new(0);
/// The anchor's counter reading.
static AT_CYCLES: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per cycle, times 2^32; 0 until learnt.
static SCALE: AtomicU64 = AtomicU64::new(0);
/// Set while one thread takes a new anchor.
static ANCHORING: AtomicBool = AtomicBool::new(false);
/// How far the anchor's clock read may be from the counter's reading it was paired
/// with, in cycles (half the gap between the counter's readings around it).
static AT_SLACK: AtomicU64 = AtomicU64::new(0);
/// Predictions off in a row.
static MISSES: AtomicU32 = AtomicU32::new(0);
/// Set once [`STRIKES`] predictions in a row were found too far off.
static UNFIT: AtomicBool = AtomicBool::new(false);

/// Now, told from the cycle counter, or `None` when it cannot tell (no counter, the rate
/// not learnt yet, the counter found unfit, the anchor being rewritten for long): the
/// caller then reads the system clock.
pub(crate) fn now() -> Option<Instant> {
    if UNFIT.load(Ordering::Relaxed) {
        return None;
    }
    let cycles = counter()?;
    let (at_ns, at_cycles, scale) = anchor()?;
    // Signed: a reading on a CPU whose counter lags the anchor's is "the anchor's time",
    // not a wrapped, very old one.
    let ahead = cycles.wrapping_sub(at_cycles) as i64;
    if scale == 0 || ahead > i64::try_from(cycles_in(REANCHOR, scale)).unwrap_or(i64::MAX) {
        match reanchor() {
            Some(now) => return Some(now),
            None if scale == 0 => return Some(Instant::now()),
            // Another thread is anchoring: the old anchor serves meanwhile.
            None => {}
        }
    }
    let &(origin, _) = ORIGIN.get()?;
    let since = (u128::from(ahead.max(0) as u64) * u128::from(scale)) >> 32;
    let since = u64::try_from(since).unwrap_or(u64::MAX);
    Some(origin + Duration::from_nanos(at_ns.saturating_add(since)))
}

/// The anchor, read consistently: its time since `ORIGIN`, its counter reading, the
/// scale; `None` if a writer held it through every try (descheduled mid-write).
fn anchor() -> Option<(u64, u64, u64)> {
    for _ in 0..64 {
        let seq = SEQ.load(Ordering::Acquire);
        if seq.is_multiple_of(2) {
            let read = (
                AT_NS.load(Ordering::Acquire),
                AT_CYCLES.load(Ordering::Acquire),
                SCALE.load(Ordering::Acquire),
            );
            if SEQ.load(Ordering::Acquire) == seq {
                return Some(read);
            }
        }
        std::hint::spin_loop();
    }
    None
}

/// Cycles of the counter in `length`, at `scale`.
fn cycles_in(length: Duration, scale: u64) -> u64 {
    ((length.as_nanos() << 32) / u128::from(scale.max(1))).min(u128::from(u64::MAX)) as u64
}

/// The system clock and the counter read together: the counter on both sides of the
/// clock, three times, and the pair whose two counter readings are closest (the thread
/// least likely to have been preempted between), with their midpoint and half their gap.
fn paired() -> Option<(Instant, u64, u64)> {
    let mut best: Option<(u64, Instant, u64)> = None;
    for _ in 0..3 {
        let before = counter()?;
        let now = Instant::now();
        let after = counter()?;
        if after < before {
            continue; // moved to a CPU whose counter lags
        }
        let gap = after - before;
        if best.is_none_or(|(best_gap, _, _)| gap < best_gap) {
            best = Some((gap, now, before + gap / 2));
        }
    }
    best.map(|(gap, now, cycles)| (now, cycles, gap / 2))
}

/// Takes a new anchor (one thread at a time: `None` when another one is at it), learning
/// the rate over the time since `ORIGIN` and checking the old anchor's prediction; the
/// system clock's reading.
fn reanchor() -> Option<Instant> {
    if ANCHORING.swap(true, Ordering::Acquire) {
        return None;
    }
    let taken = paired();
    if let Some((now, cycles, slack)) = taken {
        anchor_at(now, cycles, slack);
    }
    ANCHORING.store(false, Ordering::Release);
    Some(taken.map_or_else(Instant::now, |(now, _, _)| now))
}

/// Checks the old anchor's prediction for `now` (read with the counter's `cycles`, at
/// most `slack` cycles apart), and makes them the anchor once the rate can be learnt.
/// Never moves the anchor backwards.
fn anchor_at(now: Instant, cycles: u64, slack: u64) {
    let &(origin, origin_cycles) = ORIGIN.get_or_init(|| (now, cycles));
    let elapsed = now.saturating_duration_since(origin);
    let Some((at_ns, at_cycles, scale)) = anchor() else {
        return;
    };
    if cycles <= at_cycles {
        return;
    }
    if scale > 0 {
        let to_ns = |c: u64| (u128::from(c) * u128::from(scale)) >> 32;
        let since = to_ns(cycles - at_cycles);
        let uncertain = to_ns(slack.saturating_add(AT_SLACK.load(Ordering::Relaxed)));
        let error = (u128::from(at_ns) + since).abs_diff(elapsed.as_nanos());
        let misses = MISSES.load(Ordering::Relaxed);
        let (misses, unfit) = judge(misses, off(error, since, uncertain));
        MISSES.store(misses, Ordering::Relaxed);
        if unfit && !UNFIT.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                error_ns = u64::try_from(error).unwrap_or(u64::MAX),
                "the cycle counter is unfit as a clock: the system clock tells the time"
            );
        }
    }
    if elapsed >= CALIBRATION && cycles > origin_cycles {
        let scale = (elapsed.as_nanos() << 32) / u128::from(cycles - origin_cycles);
        SEQ.fetch_add(1, Ordering::AcqRel);
        AT_NS.store(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        AT_CYCLES.store(cycles, Ordering::Release);
        AT_SLACK.store(slack, Ordering::Relaxed);
        SCALE.store(
            u64::try_from(scale.max(1)).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        SEQ.fetch_add(1, Ordering::AcqRel);
    }
}

/// Whether a prediction `error` ns off, `since` ns after its anchor, is too far off: past
/// [`MAX_ERROR`], 1 % of `since` (the rate's own error grows with it) and the `uncertain`
/// ns of the two anchors' pairings.
fn off(error: u128, since: u128, uncertain: u128) -> bool {
    error > MAX_ERROR.as_nanos() + since / 100 + uncertain
}

/// After `misses` predictions off in a row, one that is `off` or not: the misses in a row
/// now, and whether the counter is unfit (the [`STRIKES`]th in a row).
fn judge(misses: u32, off: bool) -> (u32, bool) {
    if !off {
        return (0, false);
    }
    let misses = misses.saturating_add(1);
    (misses, misses >= STRIKES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One prediction off (a preempted read, a rate learnt from noisy first readings)
    /// does not turn the counter off; three in a row do; a good one in between starts the
    /// count again. The anchors' own uncertainty widens what counts as off.
    #[test]
    fn the_counter_is_unfit_after_three_predictions_off_in_a_row() {
        let ms = |n: u128| n * 1_000_000;
        assert!(!off(ms(2), ms(100), 0), "within 2 ms");
        assert!(!off(ms(3), ms(100), 0), "within 2 ms + 1 % of 100 ms");
        assert!(off(ms(4), ms(100), 0));
        assert!(!off(ms(4), ms(100), ms(1)), "the pairings' 1 ms of doubt");
        assert_eq!(judge(0, true), (1, false));
        assert_eq!(judge(1, true), (2, false));
        assert_eq!(judge(2, true), (3, true));
        assert_eq!(judge(2, false), (0, false));
        let mut misses = 0;
        for off in [true, true, false, true, true] {
            let (now, unfit) = judge(misses, off);
            assert!(!unfit, "never three in a row");
            misses = now;
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn it_tells_the_system_clocks_time_once_calibrated() {
        // Until calibrated it answers from the system clock (or not at all).
        let start = Instant::now();
        while start.elapsed() < CALIBRATION * 2 {
            let _ = now();
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = now();
        assert!(SCALE.load(Ordering::Relaxed) > 0, "the rate was learnt");
        // Then it agrees with the system clock within a millisecond, across anchors.
        for _ in 0..30 {
            let before = Instant::now();
            let told = now().expect("a calibrated counter");
            let after = Instant::now();
            let margin = Duration::from_millis(1);
            assert!(
                told + margin >= before && told <= after + margin,
                "{told:?} not within {before:?}..{after:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!UNFIT.load(Ordering::Relaxed));
    }
}
