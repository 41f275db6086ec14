//! The workers: each claims request numbers, waits for its request's send time, makes
//! the call (or, with `--async`, starts it on a task of its own) and records it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rdmarpc_core::Code;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{DurationStop, Monitor};
use crate::data::Messages;
use crate::schedule::Schedule;
use crate::stats::{CallError, Stats};
use crate::target::Target;
use crate::template::CallFacts;

/// State shared by the workers of one phase.
pub(super) struct Shared {
    pub(super) schedule: Schedule,
    pub(super) total: Option<u64>,
    /// `None` during the warm-up and without `-z`.
    pub(super) deadline: Option<Instant>,
    pub(super) start: Instant,
    /// The next request number to claim.
    pub(super) next: AtomicU64,
    pub(super) sent: AtomicU64,
    pub(super) time_up: AtomicBool,
    /// `None` during the warm-up: nothing is recorded.
    pub(super) shards: Option<Vec<Mutex<Stats>>>,
    pub(super) warmup_errors: AtomicU64,
    pub(super) monitor: Arc<Monitor>,
    /// When calls in flight are stopped (`--duration-stop close` and `ignore` at the end
    /// of `-z`).
    pub(super) stop_in_flight: Option<(Instant, DurationStop)>,
    /// Active workers over time (`--concurrency-schedule`).
    pub(super) workers: Option<Schedule>,
    /// Results not counted at the start (`--skipFirst`).
    pub(super) skip_first: u64,
    /// Results so far, counted or skipped.
    pub(super) results: AtomicU64,
    /// `--async`: permits for the calls in flight.
    pub(super) in_flight: Option<Arc<Semaphore>>,
}

impl Shared {
    /// Counts a call worker `index` made, measured from `measure_from`: in its worker's
    /// shard of the statistics (unless it is one of the first `--skipFirst`), or (warming
    /// up) only its failure.
    fn record(
        &self,
        index: usize,
        measure_from: Instant,
        result: &Result<(), CallError>,
        (stream_sent, stream_received): (u64, u64),
    ) {
        let end = now();
        match &self.shards {
            Some(_) if self.results.fetch_add(1, Ordering::Relaxed) < self.skip_first => {}
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
        tracing::debug!(
            worker = index,
            status = result
                .as_ref()
                .map_or_else(|e| crate::stats::code_name(e.code), |()| "OK"),
            latency_ns = (end - measure_from).as_nanos() as u64,
            error = result.as_ref().err().map(CallError::to_ghz_string),
            "call ended"
        );
        self.monitor.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the run has no more requests to hand out.
    fn exhausted(&self) -> bool {
        self.total
            .is_some_and(|n| self.next.load(Ordering::Relaxed) >= n)
            || self.past_deadline()
    }

    /// Whether `-z` has passed (then the run's end reason is the timeout).
    fn past_deadline(&self) -> bool {
        let past = self.deadline.is_some_and(|d| now() >= d);
        if past {
            self.time_up.store(true, Ordering::Relaxed);
        }
        past
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

/// Runs `concurrency` workers over `targets` until the phase `shared` describes ends.
pub(super) async fn run_workers<T: Target>(
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

/// A request a worker claimed: its number, the instant its latency runs from, and
/// whether it has an intended send time (a rate).
struct Claimed {
    number: u64,
    measure_from: Instant,
    /// When the call goes out (`measure_from` may be the intended time, earlier).
    sent_at: Instant,
    paced: bool,
}

async fn worker<T: Target>(
    index: usize,
    target: Arc<T>,
    messages: Arc<Messages>,
    shared: Arc<Shared>,
) {
    let mut cancel = shared.monitor.cancel.subscribe();
    let mut in_flight = JoinSet::new();
    while let Some(mut claimed) = claim(index, &shared, &mut cancel).await {
        let Some(permits) = &shared.in_flight else {
            shared.sent.fetch_add(1, Ordering::Relaxed);
            let call = call_and_record(index, &*target, &messages, &shared, claimed);
            call.await;
            continue;
        };
        // A request claimed before -z ends but given room only after it is dropped: it
        // was never sent, so it is neither sent now nor counted.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => Some(permit.expect("never closed")),
            _ = cancel.wait_for(|&c| c) => break,
            () = until(shared.deadline) => None,
        };
        let Some(permit) = permit.filter(|_| !shared.past_deadline()) else {
            shared.time_up.store(true, Ordering::Relaxed);
            break;
        };
        // The call goes out now (its deadline runs from here, whatever the latency does).
        claimed.sent_at = now();
        if !claimed.paced {
            // Unpaced, the request is sent now: waiting for room was the generator's
            // bound (--max-in-flight), not the server's time. (Paced, the wait counts,
            // as waiting for a worker does.)
            claimed.measure_from = claimed.sent_at;
        }
        shared.sent.fetch_add(1, Ordering::Relaxed);
        let (target, messages, shared) = (target.clone(), messages.clone(), shared.clone());
        in_flight.spawn(async move {
            call_and_record(index, &*target, &messages, &shared, claimed).await;
            drop(permit);
        });
        while let Some(done) = in_flight.try_join_next() {
            surface_panic(done);
        }
    }
    while let Some(done) = in_flight.join_next().await {
        surface_panic(done);
    }
}

/// Now, for the stamps of each call: the process's clock for per-call paths
/// ([`rdmarpc_core::clock`]), which over rdma:// is the cycle counter (the stamps then
/// cost no system call where the system clock is one, as perftest's do not).
fn now() -> Instant {
    rdmarpc_core::clock::tokio_now()
}

/// Sleeps until `deadline`; never ends without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn surface_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// The next request worker `index` makes, once it is due; `None` when the run has
/// ended for it (`-n`, `-z`, Ctrl-C).
async fn claim(
    index: usize,
    shared: &Shared,
    cancel: &mut watch::Receiver<bool>,
) -> Option<Claimed> {
    if shared.monitor.is_cancelled() {
        return None;
    }
    // Under a concurrency schedule, a worker beyond the active count waits its turn
    // (checked every 10 ms) unless the run has ended.
    while !shared.active(index) {
        if shared.exhausted() {
            return None;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
            _ = cancel.wait_for(|&c| c) => return None,
        }
    }
    let number = shared.next.fetch_add(1, Ordering::Relaxed);
    if shared.total.is_some_and(|n| number >= n) {
        return None;
    }
    let now = now();
    let intended = shared.schedule.send_time(number).map(|t| shared.start + t);
    let send_at = intended.unwrap_or(now);
    if shared.deadline.is_some_and(|d| send_at >= d) {
        shared.time_up.store(true, Ordering::Relaxed);
        return None;
    }
    // Latency runs from the intended send time when the request is late because the
    // worker was busy (coordinated-omission correction), but from the actual send when
    // the worker was waiting for its time: then only the timer (1 ms granularity in
    // tokio) made it late, which is the generator's doing, not the server's.
    let (measure_from, sent_at) = if send_at > now {
        tokio::select! {
            () = tokio::time::sleep_until(send_at) => {}
            _ = cancel.wait_for(|&c| c) => return None,
        }
        let woke = self::now();
        (woke, woke)
    } else {
        (send_at, now)
    };
    Some(Claimed {
        number,
        measure_from,
        sent_at,
        paced: intended.is_some(),
    })
}

/// Makes the call `claimed` and records it, unless the run's end cuts it off: Ctrl-C
/// (`CANCELLED`), or `--duration-stop` close (`CANCELLED`) or ignore (not counted).
async fn call_and_record<T: Target>(
    index: usize,
    target: &T,
    messages: &Arc<Messages>,
    shared: &Shared,
    claimed: Claimed,
) {
    let mut cancel = shared.monitor.cancel.subscribe();
    let stop_at = shared.stop_in_flight.map(|(at, _)| at);
    let call = CallFacts {
        request_number: claimed.number,
        worker: index,
    };
    let (result, moved) = tokio::select! {
        biased;
        outcome = crate::target::CALL_STARTED.scope(claimed.sent_at, target.call(call, messages)) => outcome,
        _ = cancel.wait_for(|&c| c) => {
            (Err(CallError::new(Code::Cancelled, "run cancelled")), (0, 0))
        }
        () = until(stop_at), if stop_at.is_some() => {
            shared.time_up.store(true, Ordering::Relaxed);
            if shared.stop_in_flight.is_some_and(|(_, mode)| mode == DurationStop::Ignore) {
                // Not counted: as if it had never been sent.
                shared.sent.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            let why = "the run's duration (-z) ended with the call in flight (--duration-stop close)";
            (Err(CallError::new(Code::Cancelled, why)), (0, 0))
        }
    };
    shared.record(index, claimed.measure_from, &result, moved);
}
