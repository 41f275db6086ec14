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
//! Invariant: every request counted in `sent` is recorded exactly once, as a reply or as
//! an error. In-flight calls at the end of `-z` are waited for (bounded by `-t`); calls
//! cut short by Ctrl-C are recorded as `CANCELLED`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use rdmarpc_core::Code;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::data::Messages;
use crate::schedule::Schedule;
use crate::stats::{CallError, Stats};
use crate::target::Target;
use crate::template::CallFacts;

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
    /// Whether every call is kept for a per-call listing (`-O csv`).
    pub details: bool,
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
    /// Requests sent in the measured run; equals `stats.count()`.
    pub sent: u64,
    /// From the start of the measured run to the completion of its last call.
    pub total_time: Duration,
    /// Why the run ended.
    pub end_reason: EndReason,
    /// Warm-up calls made (not counted in `stats`).
    pub warmup_calls: u64,
    /// Warm-up calls that failed.
    pub warmup_errors: u64,
}

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
    completed: AtomicU64,
    phase: AtomicU8,
    started: OnceLock<Instant>,
    cancel: watch::Sender<bool>,
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

    fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    fn set_phase(&self, phase: Phase) {
        self.completed.store(0, Ordering::Relaxed);
        self.phase.store(phase as u8, Ordering::Relaxed);
    }
}

/// State shared by the workers of one phase.
struct Shared {
    schedule: Schedule,
    total: Option<u64>,
    /// `None` during the warm-up and without `-z`.
    deadline: Option<Instant>,
    start: Instant,
    /// The next request number to claim.
    next: AtomicU64,
    sent: AtomicU64,
    time_up: AtomicBool,
    /// `None` during the warm-up: nothing is recorded.
    shards: Option<Vec<Mutex<Stats>>>,
    warmup_errors: AtomicU64,
    monitor: Arc<Monitor>,
    /// When calls in flight are stopped (`-x close` and `-x ignore` at the end of `-z`).
    stop_in_flight: Option<(Instant, DurationStop)>,
    /// Active workers over time (`--concurrency-schedule`).
    workers: Option<Schedule>,
}

impl Shared {
    /// Counts a call worker `index` made, measured from `measure_from`: in its worker's
    /// shard of the statistics, or (warming up) only its failure.
    fn record(
        &self,
        index: usize,
        measure_from: Instant,
        result: &Result<(), CallError>,
        (stream_sent, stream_received): (u64, u64),
    ) {
        let end = Instant::now();
        match &self.shards {
            Some(shards) => {
                let mut shard = shards[index % shards.len()].lock();
                shard.record(end - measure_from, end - self.start, result);
                shard.record_stream(stream_sent, stream_received);
            }
            None => {
                if result.is_err() {
                    self.warmup_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.monitor.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the run has no more requests to hand out.
    fn exhausted(&self) -> bool {
        if self
            .total
            .is_some_and(|n| self.next.load(Ordering::Relaxed) >= n)
        {
            return true;
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.time_up.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Whether worker `index` is active now under the concurrency schedule.
    fn active(&self, index: usize) -> bool {
        let Some(workers) = &self.workers else {
            return true;
        };
        let active = workers
            .rate_at(self.start.elapsed())
            .map_or(usize::MAX, |n| n.floor().max(1.0) as usize);
        index < active
    }
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

    let start = Instant::now();
    let _ = monitor.started.set(start);
    monitor.set_phase(Phase::Measuring);
    let shards = (0..concurrency.min(MAX_SHARDS))
        .map(|_| {
            let stats = Stats::new(plan.interval).counting_errors(plan.count_errors);
            Mutex::new(stats.keeping_details(plan.details))
        })
        .collect();
    let deadline = plan.duration.map(|d| start + d);
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
    });
    run_workers(targets, &messages, &shared, concurrency).await;
    let total_time = start.elapsed();
    monitor.set_phase(Phase::Done);

    let mut stats = Stats::new(plan.interval)
        .counting_errors(plan.count_errors)
        .keeping_details(plan.details);
    for shard in shared.shards.iter().flatten() {
        stats.merge(&shard.lock());
    }
    let end_reason = if monitor.is_cancelled() {
        EndReason::Cancel
    } else if shared.time_up.load(Ordering::Relaxed) {
        EndReason::Timeout
    } else {
        EndReason::Normal
    };
    RunOutcome {
        stats,
        sent: shared.sent.load(Ordering::Relaxed),
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
        start: Instant::now(),
        next: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        time_up: AtomicBool::new(false),
        shards: None,
        warmup_errors: AtomicU64::new(0),
        monitor: monitor.clone(),
        stop_in_flight: None,
        workers: None,
    });
    run_workers(targets, messages, &warmup, concurrency).await;
    (
        warmup.sent.load(Ordering::Relaxed),
        warmup.warmup_errors.load(Ordering::Relaxed),
    )
}

async fn run_workers<T: Target>(
    targets: &[Arc<T>],
    messages: &Arc<Messages>,
    shared: &Arc<Shared>,
    concurrency: usize,
) {
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            tokio::spawn(worker(
                w,
                targets[w % targets.len()].clone(),
                messages.clone(),
                shared.clone(),
            ))
        })
        .collect();
    for handle in workers {
        if let Err(e) = handle.await {
            // A panicking worker is a bug; surface it rather than report wrong counts.
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

async fn worker<T: Target>(
    index: usize,
    target: Arc<T>,
    messages: Arc<Messages>,
    shared: Arc<Shared>,
) {
    let mut cancel = shared.monitor.cancel.subscribe();
    loop {
        if shared.monitor.is_cancelled() {
            return;
        }
        // Under a concurrency schedule, a worker beyond the active count waits its turn
        // (checked every 10 ms) unless the run has ended.
        while !shared.active(index) {
            if shared.exhausted() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
                _ = cancel.wait_for(|&c| c) => return,
            }
        }
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if shared.total.is_some_and(|n| i >= n) {
            return;
        }
        let now = Instant::now();
        let intended = shared.schedule.send_time(i).map(|t| shared.start + t);
        let send_at = intended.unwrap_or(now);
        if shared.deadline.is_some_and(|d| send_at >= d) {
            shared.time_up.store(true, Ordering::Relaxed);
            return;
        }
        // Latency runs from the intended send time when the request is late because the
        // worker was busy (coordinated-omission correction), but from the actual send when
        // the worker was waiting for its time: then only the timer (1 ms granularity in
        // tokio) made it late, which is the generator's doing, not the server's.
        let measure_from = if send_at > now {
            tokio::select! {
                () = tokio::time::sleep_until(send_at) => {}
                _ = cancel.wait_for(|&c| c) => return,
            }
            Instant::now()
        } else {
            send_at
        };

        shared.sent.fetch_add(1, Ordering::Relaxed);
        let stop_at = shared.stop_in_flight.map(|(at, _)| at);
        let call = CallFacts {
            request_number: i,
            worker: index,
        };
        let (result, (stream_sent, stream_received)) = tokio::select! {
            biased;
            outcome = target.call(call, &messages) => outcome,
            _ = cancel.wait_for(|&c| c) => {
                (Err(CallError::new(Code::Cancelled, "run cancelled")), (0, 0))
            }
            () = tokio::time::sleep_until(stop_at.unwrap_or_else(Instant::now)), if stop_at.is_some() => {
                shared.time_up.store(true, Ordering::Relaxed);
                if shared.stop_in_flight.is_some_and(|(_, mode)| mode == DurationStop::Ignore) {
                    // Not counted: as if it had never been sent.
                    shared.sent.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
                let why = "the run's duration (-z) ended with the call in flight (-x close)";
                (Err(CallError::new(Code::Cancelled, why)), (0, 0))
            }
        };
        shared.record(index, measure_from, &result, (stream_sent, stream_received));
    }
}
