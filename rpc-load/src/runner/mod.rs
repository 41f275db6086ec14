//! The load loop: workers that claim request numbers, wait for their intended send time,
//! call a [`Target`] and record the outcome.
//!
//! ```text
//!            next request number (atomic)           schedule.send_time(i)
//! worker 0 ─┐        │                                      │
//! worker 1 ─┼─ claim i ─> wait until start + send_time(i) ─> call ─> record(latency)
//!   ...    ─┘   (stop at -n, at -z, on Ctrl-C)                           │
//!                                                               stats shard w % shards
//! ```
//!
//! Worker `w` uses target `w % targets.len()`, so `--connections K` spreads the
//! concurrency evenly over K connections. Under a paced schedule, latency runs from the
//! *intended* send time, so time a request spent waiting for a free worker counts (no
//! coordinated omission); unpaced, or when the worker was idle waiting for that time, it
//! runs from the actual send.
//!
//! With `--async` a worker does not wait for its call: the call runs on a task of its
//! own, holding one of `--max-in-flight` permits, and the worker goes on to its next
//! request (it waits for a permit when all are taken).
//!
//! Invariant: every request counted in `sent` is recorded exactly once, as a reply, as an
//! error, or as one of the first `--skipFirst` results, which are not counted. Calls in
//! flight at the end of `-z` are cancelled, waited for or ignored as `--duration-stop`
//! says; calls cut short by Ctrl-C are recorded as `CANCELLED`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::data::Messages;
use crate::schedule::Schedule;
use crate::stats::{DetailRoom, Stats};
use crate::target::Target;

mod monitor;
mod worker;

pub use monitor::{Monitor, Phase};
use worker::{run_workers, Shared};

/// Shards the measurements are recorded into (fewer if there are fewer workers).
const MAX_SHARDS: usize = 8;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Workers, each with at most one call in flight (`-c`, >= 1); with a concurrency
    /// schedule, the most it has active.
    pub concurrency: usize,
    /// `--concurrency-schedule` step or line: how many workers are active over time
    /// (worker `w` works while more than `w` are); `None`: all of them.
    pub workers: Option<Schedule>,
    /// Requests to send (`-n`); `None` to run for `duration` only.
    pub total: Option<u64>,
    /// How long to send requests (`-z`); `None` to stop at `total` only.
    pub duration: Option<Duration>,
    /// When requests are due.
    pub schedule: Schedule,
    /// Requests sent, unpaced, before the measured run, and not counted (`--warmup`).
    pub warmup: u64,
    /// Width of one interval of the timeline.
    pub interval: Duration,
    /// What happens to calls in flight when `duration` ends (`-x`).
    pub duration_stop: DurationStop,
    /// Whether failed calls' latencies count in the latency figures (`--count-errors`).
    pub count_errors: bool,
    /// Whether every call is kept for a per-call listing (`-O csv`, `json`, ...).
    pub details: bool,
    /// Results not counted at the start of the run (`--skipFirst`).
    pub skip_first: u64,
    /// `--async`: the most calls in flight at once; `None`: each worker waits for its
    /// call.
    pub max_in_flight: Option<usize>,
    /// Connections the workers share (worker `w` uses connection `w % connections`).
    pub connections: usize,
}

/// `-x`/`--duration-stop`: what happens to calls still in flight when `-z` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DurationStop {
    /// They are cancelled and counted as `CANCELLED` errors (ghz's default).
    #[default]
    Close,
    /// They are waited for (up to their timeout) and counted.
    Wait,
    /// They are cancelled and not counted at all.
    Ignore,
}

/// Why a run ended, with ghz's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndReason {
    /// The requested number of calls was made.
    Normal,
    /// The duration (`-z`) passed.
    Timeout,
    /// Cancelled by the user (Ctrl-C).
    Cancel,
}

impl EndReason {
    /// `normal`, `timeout` or `cancel`, as in ghz's `endReason`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Normal => "normal",
            EndReason::Timeout => "timeout",
            EndReason::Cancel => "cancel",
        }
    }
}

/// The outcome of a run.
#[derive(Debug)]
pub struct RunOutcome {
    /// The measurements of the counted calls.
    pub stats: Stats,
    /// Requests sent in the measured run; equals `stats.count() + skipped`.
    pub sent: u64,
    /// The first results, not counted (`--skipFirst`).
    pub skipped: u64,
    /// When the measured run started, by the wall clock.
    pub started: SystemTime,
    /// From the start of the measured run to the completion of its last call.
    pub total_time: Duration,
    /// Why the run ended.
    pub end_reason: EndReason,
    /// Warm-up calls made (not counted in `stats`).
    pub warmup_calls: u64,
    /// Warm-up calls that failed.
    pub warmup_errors: u64,
}
/// Runs `plan` against `targets` (at least one), with request `i` carrying
/// `messages.get(i)`.
pub async fn run<T: Target>(
    targets: &[Arc<T>],
    messages: Arc<Messages>,
    plan: &LoadPlan,
    monitor: Arc<Monitor>,
) -> RunOutcome {
    assert!(!targets.is_empty(), "no target");
    let concurrency = plan.concurrency.max(1);

    let (warmup_calls, warmup_errors) = match plan.warmup {
        0 => (0, 0),
        calls => warm_up(targets, &messages, calls, concurrency, &monitor).await,
    };

    let start = rdmarpc_core::clock::tokio_now();
    let started = SystemTime::now();
    let _ = monitor.started.set(start);
    monitor.set_phase(Phase::Measuring);
    // The details of the first calls recorded, by whichever worker: one room for all.
    let room = DetailRoom::default();
    let new_stats = || {
        Stats::new(plan.interval)
            .counting_errors(plan.count_errors)
            .keeping_details(plan.details.then_some(started), &room)
    };
    let shards = (0..concurrency.min(MAX_SHARDS))
        .map(|_| Mutex::new(new_stats()))
        .collect();
    // A duration past what the clock can add is no deadline (the flags stop at 292 years).
    let deadline = plan.duration.and_then(|d| start.checked_add(d));
    let shared = Arc::new(Shared {
        schedule: plan.schedule,
        total: plan.total,
        deadline,
        start,
        next: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        time_up: AtomicBool::new(false),
        shards: Some(shards),
        warmup_errors: AtomicU64::new(0),
        monitor: monitor.clone(),
        stop_in_flight: deadline
            .filter(|_| plan.duration_stop != DurationStop::Wait)
            .map(|d| (d, plan.duration_stop)),
        workers: plan.workers,
        skip_first: plan.skip_first,
        results: AtomicU64::new(0),
        in_flight: plan
            .max_in_flight
            .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
    });
    run_workers(targets, &messages, &shared, concurrency).await;
    let total_time = start.elapsed();
    monitor.set_phase(Phase::Done);

    let mut stats = new_stats();
    for shard in shared.shards.iter().flatten() {
        stats.merge(&mut shard.lock());
    }
    let end_reason = if monitor.is_cancelled() {
        EndReason::Cancel
    } else if shared.time_up.load(Ordering::Relaxed) {
        EndReason::Timeout
    } else {
        EndReason::Normal
    };
    RunOutcome {
        skipped: shared.results.load(Ordering::Relaxed).min(plan.skip_first),
        stats,
        sent: shared.sent.load(Ordering::Relaxed),
        started,
        total_time,
        end_reason,
        warmup_calls,
        warmup_errors,
    }
}

/// The uncounted warm-up: `calls` calls, unpaced, by `concurrency` workers. The calls it
/// made and how many failed.
async fn warm_up<T: Target>(
    targets: &[Arc<T>],
    messages: &Arc<Messages>,
    calls: u64,
    concurrency: usize,
    monitor: &Arc<Monitor>,
) -> (u64, u64) {
    let warmup = Arc::new(Shared {
        schedule: Schedule::unpaced(),
        total: Some(calls),
        deadline: None,
        start: rdmarpc_core::clock::tokio_now(),
        next: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        time_up: AtomicBool::new(false),
        shards: None,
        warmup_errors: AtomicU64::new(0),
        monitor: monitor.clone(),
        stop_in_flight: None,
        workers: None,
        skip_first: 0,
        results: AtomicU64::new(0),
        in_flight: None,
    });
    run_workers(targets, messages, &warmup, concurrency).await;
    (
        warmup.sent.load(Ordering::Relaxed),
        warmup.warmup_errors.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests;
