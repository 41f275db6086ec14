//! A connection's lifetime limits, sans-IO: `max_connection_idle`, `max_connection_age`
//! and `max_connection_age_grace`, as gRPC servers have them.
//!
//! ```text
//!   opened ── (age ± 10 %) ──> drain: GOAWAY, calls in flight go on ── (grace) ──> close
//!   last call ended ── (idle, no call waiting, running or open) ──> drain
//! ```
//!
//! The reader loop asks [`Lifetime::next`] when to wake it and [`Lifetime::check`] what
//! is due; it reports calls' arrivals with [`Lifetime::activity`] and gives `check` the
//! time the last handler ended, so that idleness counts from the last call's end. The age is jittered by up to
//! ±10 % per connection, so that connections opened together (a fleet that restarted)
//! do not all reconnect in the same instant.

use std::time::{Duration, Instant};

/// How often a busy connection looks again whether it became idle: an idle connection
/// is closed `max_connection_idle` after its last call's end, at most this late.
const BUSY_RECHECK: Duration = Duration::from_secs(1);

/// What is due now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    /// Nothing yet.
    Nothing,
    /// Start a graceful close (GOAWAY; the calls in flight may finish).
    Drain(&'static str),
    /// The grace after the drain ran out: close, ending the calls still in flight.
    Close,
}

/// The settings, from [`ServerConfig`](crate::ServerConfig).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Settings {
    pub(super) idle: Option<Duration>,
    pub(super) age: Option<Duration>,
    pub(super) grace: Option<Duration>,
}

/// One connection's lifetime state.
#[derive(Debug)]
pub(super) struct Lifetime {
    settings: Settings,
    /// When the age runs out (jittered).
    old_at: Option<Instant>,
    /// The last time a call arrived or ended (as far as known).
    active_at: Instant,
    /// When the idle check runs next.
    idle_check_at: Option<Instant>,
    /// Set once a drain started (by this or by a server shutdown): when to close.
    close_at: Option<Option<Instant>>,
}

impl Lifetime {
    /// A connection opened at `now`; `jitter` is any number (a hash), turned into the
    /// age's ±10 %.
    pub(super) fn new(settings: Settings, now: Instant, jitter: u64) -> Lifetime {
        let old_at = settings.age.map(|age| now + jittered(age, jitter));
        Lifetime {
            settings,
            old_at,
            active_at: now,
            idle_check_at: settings.idle.map(|idle| now + idle),
            close_at: None,
        }
    }

    /// Whether calls' arrivals matter ([`Lifetime::activity`]): `max_connection_idle` is
    /// set.
    pub(super) fn watches_idle(&self) -> bool {
        self.settings.idle.is_some()
    }

    /// A call arrived (or something else that makes the connection not idle).
    pub(super) fn activity(&mut self, now: Instant) {
        self.active_at = now;
    }

    /// The drain started at `now` (for any reason): from here only the grace counts.
    pub(super) fn draining(&mut self, now: Instant) {
        if self.close_at.is_none() {
            self.close_at = Some(self.settings.grace.map(|g| now + g));
        }
    }

    /// When something may next be due.
    pub(super) fn next(&self) -> Option<Instant> {
        match self.close_at {
            Some(close_at) => close_at,
            None => [self.old_at, self.idle_check_at]
                .into_iter()
                .flatten()
                .min(),
        }
    }

    /// What is due at `now`; `busy` says whether any call is waiting, running or open,
    /// `last_end` when the last handler ended (if one did).
    pub(super) fn check(&mut self, now: Instant, busy: bool, last_end: Option<Instant>) -> Due {
        if let Some(close_at) = self.close_at {
            return match close_at {
                Some(at) if now >= at => Due::Close,
                _ => Due::Nothing,
            };
        }
        if self.old_at.is_some_and(|at| now >= at) {
            return Due::Drain("max_connection_age");
        }
        let Some(idle) = self.settings.idle else {
            return Due::Nothing;
        };
        if busy {
            self.idle_check_at = Some(now + BUSY_RECHECK.min(idle));
            return Due::Nothing;
        }
        self.active_at = self.active_at.max(last_end.unwrap_or(self.active_at));
        let idle_at = self.active_at + idle;
        if now >= idle_at {
            return Due::Drain("max_connection_idle");
        }
        self.idle_check_at = Some(idle_at);
        Due::Nothing
    }
}

/// `age` moved by up to ±10 % according to `jitter`.
fn jittered(age: Duration, jitter: u64) -> Duration {
    let tenth = age / 10;
    let nanos = u64::try_from(tenth.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return age;
    }
    let offset = Duration::from_nanos(jitter % (2 * nanos + 1));
    (age - tenth) + offset
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn settings(idle: Option<u32>, age: Option<u32>, grace: Option<u32>) -> Settings {
        Settings {
            idle: idle.map(|ms| ms * MS),
            age: age.map(|ms| ms * MS),
            grace: grace.map(|ms| ms * MS),
        }
    }

    #[test]
    fn without_settings_nothing_is_ever_due() {
        let t0 = Instant::now();
        let mut l = Lifetime::new(Settings::default(), t0, 7);
        assert_eq!(l.next(), None);
        assert_eq!(
            l.check(t0 + Duration::from_secs(86_400), false, None),
            Due::Nothing
        );
        l.draining(t0);
        assert_eq!(l.next(), None, "no grace: the drain is not cut short");
        assert_eq!(
            l.check(t0 + Duration::from_secs(86_400), true, None),
            Due::Nothing
        );
    }

    #[test]
    fn the_age_drains_within_ten_percent_then_the_grace_closes() {
        let t0 = Instant::now();
        for jitter in [0, 1, 999_999, u64::MAX, 12_345_678_901] {
            let mut l = Lifetime::new(settings(None, Some(1000), Some(300)), t0, jitter);
            let at = l.next().expect("an age");
            assert!(at >= t0 + 900 * MS && at <= t0 + 1100 * MS, "{jitter}");
            assert_eq!(l.check(at - MS, true, None), Due::Nothing);
            assert_eq!(l.check(at, true, None), Due::Drain("max_connection_age"));
            l.draining(at);
            assert_eq!(l.next(), Some(at + 300 * MS));
            assert_eq!(l.check(at + 299 * MS, true, None), Due::Nothing);
            assert_eq!(l.check(at + 300 * MS, true, None), Due::Close);
        }
        // Different connections get different ages.
        let a = Lifetime::new(settings(None, Some(1000), None), t0, 1 << 20).next();
        let b = Lifetime::new(settings(None, Some(1000), None), t0, 3 << 27).next();
        assert_ne!(a, b);
    }

    #[test]
    fn a_shutdown_drain_keeps_its_grace_and_stops_the_other_checks() {
        let t0 = Instant::now();
        let mut l = Lifetime::new(settings(Some(100), Some(200), None), t0, 0);
        l.draining(t0 + 10 * MS);
        assert_eq!(l.next(), None);
        assert_eq!(
            l.check(t0 + Duration::from_secs(5), false, None),
            Due::Nothing
        );
    }

    #[test]
    fn idle_counts_from_the_last_call_and_never_while_busy() {
        let t0 = Instant::now();
        let mut l = Lifetime::new(settings(Some(500), None, None), t0, 0);
        assert_eq!(l.next(), Some(t0 + 500 * MS));
        l.activity(t0 + 300 * MS);
        // The first check finds the call that arrived has since ended: it waits out
        // the rest.
        assert_eq!(l.check(t0 + 500 * MS, false, None), Due::Nothing);
        assert_eq!(l.next(), Some(t0 + 800 * MS));
        // Busy (a long call, an open stream): looked at again within a second.
        assert_eq!(l.check(t0 + 800 * MS, true, None), Due::Nothing);
        assert_eq!(l.next(), Some(t0 + 1300 * MS));
        assert_eq!(l.check(t0 + 5000 * MS, true, None), Due::Nothing);
        assert_eq!(l.next(), Some(t0 + 5500 * MS));
        // The stream ended at 5.2 s: idle from its end, not from the check.
        let end = Some(t0 + 5200 * MS);
        assert_eq!(l.check(t0 + 5500 * MS, false, end), Due::Nothing);
        assert_eq!(l.next(), Some(t0 + 5700 * MS));
        assert_eq!(l.check(t0 + 5699 * MS, false, end), Due::Nothing);
        assert_eq!(
            l.check(t0 + 5700 * MS, false, end),
            Due::Drain("max_connection_idle")
        );
    }

    #[test]
    fn a_long_idle_setting_rechecks_a_busy_connection_each_second() {
        let t0 = Instant::now();
        let mut l = Lifetime::new(settings(Some(60_000), None, None), t0, 0);
        assert_eq!(l.check(t0 + 60_000 * MS, true, None), Due::Nothing);
        assert_eq!(l.next(), Some(t0 + 61_000 * MS));
        let end = Some(t0 + 60_500 * MS);
        assert_eq!(l.check(t0 + 61_000 * MS, false, end), Due::Nothing);
        assert_eq!(l.next(), Some(t0 + 120_500 * MS));
        assert_eq!(
            l.check(t0 + 120_500 * MS, false, end),
            Due::Drain("max_connection_idle")
        );
    }

    #[test]
    fn the_age_comes_first_when_both_are_due() {
        let t0 = Instant::now();
        let mut l = Lifetime::new(settings(Some(100), Some(100), Some(0)), t0, 0);
        assert_eq!(
            l.check(t0 + 200 * MS, false, None),
            Due::Drain("max_connection_age")
        );
        l.draining(t0 + 200 * MS);
        assert_eq!(l.check(t0 + 200 * MS, false, None), Due::Close);
    }
}
