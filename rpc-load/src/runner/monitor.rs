//! [`Monitor`]: a run observed and controlled from outside (progress, cancellation).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The run's phase, as [`Monitor::phase`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Warm-up calls are being made.
    Warmup,
    /// The measured run is going on.
    Measuring,
    /// All calls have completed.
    Done,
}

/// Observes and controls a run from outside: progress and cancellation.
#[derive(Debug)]
pub struct Monitor {
    pub(super) completed: AtomicU64,
    phase: AtomicU8,
    pub(super) started: OnceLock<Instant>,
    pub(super) cancel: watch::Sender<bool>,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor {
            completed: AtomicU64::new(0),
            phase: AtomicU8::new(Phase::Warmup as u8),
            started: OnceLock::new(),
            cancel: watch::channel(false).0,
        }
    }
}

impl Monitor {
    /// A monitor for one run.
    pub fn new() -> Monitor {
        Monitor::default()
    }

    /// Calls completed in the current phase.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Warmup,
            1 => Phase::Measuring,
            _ => Phase::Done,
        }
    }

    /// Time since the measured run started (zero before).
    pub fn elapsed(&self) -> Duration {
        self.started.get().map_or(Duration::ZERO, Instant::elapsed)
    }

    /// Stops the run: no new calls start, calls in flight end as `CANCELLED`.
    pub fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// Marks the run as done (ends the progress display), e.g. when it failed to start.
    pub fn finish(&self) {
        self.set_phase(Phase::Done);
    }

    pub(super) fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    pub(super) fn set_phase(&self, phase: Phase) {
        self.completed.store(0, Ordering::Relaxed);
        self.phase.store(phase as u8, Ordering::Relaxed);
    }
}
