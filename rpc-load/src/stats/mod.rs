//! [`Stats`]: what a run measured. Latencies of successful calls go into an HDR
//! histogram (nanoseconds, 3 significant digits); every call also counts towards its
//! status code, its error message (if any), and a timeline of fixed-width intervals.
//!
//! Workers record into a few shards (one `Stats` each) that are merged after the run, so
//! recording never contends on one lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use rdmarpc_core::Code;

/// Distinct error messages kept; further ones are counted under [`OTHER_ERRORS`].
pub const MAX_DISTINCT_ERRORS: usize = 256;

/// The error-distribution key of errors past [`MAX_DISTINCT_ERRORS`] distinct ones.
pub const OTHER_ERRORS: &str = "(other errors)";

/// Highest latency the histogram is sized for up front; larger ones resize it.
const HISTOGRAM_MAX_NS: u64 = 60_000_000_000;

/// How a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// The gRPC status code.
    pub code: Code,
    /// The status message.
    pub message: String,
}

impl CallError {
    /// An error with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> CallError {
        CallError {
            code,
            message: message.into(),
        }
    }

    /// How ghz (grpc-go) prints an error: `rpc error: code = NotFound desc = ...`.
    pub fn to_ghz_string(&self) -> String {
        format!(
            "rpc error: code = {} desc = {}",
            code_name(self.code),
            self.message
        )
    }
}

/// The name grpc-go gives a status code (`OK`, `NotFound`, `DeadlineExceeded`, ...): the
/// names ghz reports carry in `statusCodeDistribution`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
        _ => "Unknown",
    }
}

/// One interval of the timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interval {
    /// Calls that completed successfully in the interval.
    pub ok: u64,
    /// Calls that failed in the interval.
    pub errors: u64,
    /// Sum of the latencies of all calls completed in the interval, in nanoseconds.
    pub latency_sum_ns: u64,
    /// Largest latency of a call completed in the interval, in nanoseconds.
    pub latency_max_ns: u64,
    /// Calls per latency bucket, four buckets per doubling ([`log_bucket`]); empty while
    /// the interval has none. For percentiles over time, within a bucket's width (19 %).
    pub log_buckets: Vec<u32>,
}

/// Buckets of [`Interval::log_buckets`]: four per doubling, up to 2^42 ns (73 minutes).
pub const LOG_BUCKETS: usize = 4 * 42;

/// The most intervals a timeline has: past them, adjacent intervals merge in pairs and
/// the interval's width doubles (a day at 100 ms would be 864,000 intervals, each up to
/// 672 bytes of buckets, per shard).
pub const MAX_INTERVALS: usize = 4096;

/// The bucket of a latency of `ns`: `floor(4 * log2(ns))`, clamped.
pub fn log_bucket(ns: u64) -> usize {
    ((4.0 * (ns.max(1) as f64).log2()) as usize).min(LOG_BUCKETS - 1)
}

impl Interval {
    /// Adds `other`'s calls to this interval's.
    fn add(&mut self, other: &Interval) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.latency_sum_ns = self.latency_sum_ns.saturating_add(other.latency_sum_ns);
        self.latency_max_ns = self.latency_max_ns.max(other.latency_max_ns);
        if !other.log_buckets.is_empty() {
            if self.log_buckets.is_empty() {
                self.log_buckets = vec![0; LOG_BUCKETS];
            }
            for (m, t) in self.log_buckets.iter_mut().zip(&other.log_buckets) {
                *m = m.saturating_add(*t);
            }
        }
    }

    /// The latency at `percentile` (0-100) of the calls completed in the interval: the
    /// geometric middle of its bucket; `None` without calls.
    pub fn percentile(&self, percentile: f64) -> Option<u64> {
        let total: u64 = self.log_buckets.iter().map(|&n| u64::from(n)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((percentile / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, &n) in self.log_buckets.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                return Some(2f64.powf((bucket as f64 + 0.5) / 4.0) as u64);
            }
        }
        None
    }
}

/// The measurements of a run (or of one shard of it).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Latencies of successful calls, in nanoseconds.
    ok_latency: Histogram<u64>,
    ok: u64,
    errors: u64,
    /// Sum over all calls, successful or not (ghz's `average` includes errors).
    latency_sum_ns: u128,
    /// Exact extremes of successful calls (the histogram's are rounded).
    fastest_ns: u64,
    slowest_ns: u64,
    /// Calls per status code, indexed by the code's numeric value.
    status: [u64; 17],
    /// Calls per error message; the keys are shared with the details' errors.
    error_messages: HashMap<Arc<str>, u64>,
    interval: Duration,
    timeline: Vec<Interval>,
    /// Messages sent and received on streams.
    stream_sent: u64,
    stream_received: u64,
    /// `--count-errors`: failed calls' latencies count in the histogram, the percentiles
    /// and the extremes too.
    count_errors: bool,
    /// One record per call, for the formats that list calls (ghz's `details`); `None`
    /// otherwise.
    details: Option<Kept>,
}

/// The calls a [`Stats`] keeps one by one, the run's start by the wall clock, and the
/// room shared by the shards of the run.
#[derive(Debug, Clone)]
struct Kept {
    calls: Vec<Detail>,
    start: SystemTime,
    room: DetailRoom,
}

/// The room for details shared by every shard of a run: a call is kept if it is one of
/// the first [`MAX_DETAILS`] recorded, whichever shard records it (ghz keeps the first
/// million results, in completion order).
#[derive(Debug, Clone)]
pub struct DetailRoom {
    taken: Arc<AtomicUsize>,
    cap: usize,
}

impl Default for DetailRoom {
    fn default() -> DetailRoom {
        DetailRoom::with_cap(MAX_DETAILS)
    }
}

impl DetailRoom {
    /// Room for `cap` details in all.
    pub fn with_cap(cap: usize) -> DetailRoom {
        DetailRoom {
            taken: Arc::new(AtomicUsize::new(0)),
            cap,
        }
    }

    /// Takes a place; `false` once all `cap` are taken.
    fn take(&self) -> bool {
        // The load first: past the cap, the counter stops growing.
        self.taken.load(Ordering::Relaxed) < self.cap
            && self.taken.fetch_add(1, Ordering::Relaxed) < self.cap
    }
}

/// The most calls recorded one by one (ghz's own bound, its `maxResult`); later calls
/// are only aggregated. At about 50 bytes a call (errors are shared, not copied), a
/// million details take about 50 MB.
pub const MAX_DETAILS: usize = 1_000_000;

/// One call, as ghz's `details` list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    /// When it completed, since the start of the run.
    pub at: Duration,
    /// Its latency.
    pub latency: Duration,
    /// Its status code.
    pub code: Code,
    /// Its error, ghz-formatted (`rpc error: code = ... desc = ...`), shared with the
    /// error distribution (past [`MAX_DISTINCT_ERRORS`] distinct errors, the text is
    /// [`OTHER_ERRORS`]); `None` if OK.
    pub error: Option<Arc<str>>,
}

impl Stats {
    /// Empty stats whose timeline has intervals of `interval` (non-zero).
    pub fn new(interval: Duration) -> Stats {
        let mut ok_latency =
            Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3).expect("valid histogram bounds");
        ok_latency.auto(true);
        Stats {
            ok_latency,
            ok: 0,
            errors: 0,
            latency_sum_ns: 0,
            fastest_ns: u64::MAX,
            slowest_ns: 0,
            status: [0; 17],
            error_messages: HashMap::new(),
            interval: interval.max(Duration::from_millis(1)),
            timeline: Vec::new(),
            stream_sent: 0,
            stream_received: 0,
            count_errors: false,
            details: None,
        }
    }

    /// Empty stats that also keep every call of a run that started at `start` by the
    /// wall clock, if given, while `room` (shared by the run's shards) has room.
    pub fn keeping_details(mut self, start: Option<SystemTime>, room: &DetailRoom) -> Stats {
        self.details = start.map(|start| Kept {
            calls: Vec::new(),
            start,
            room: room.clone(),
        });
        self
    }

    /// The calls recorded one by one, in completion order; empty unless kept.
    pub fn details(&self) -> &[Detail] {
        self.details
            .as_ref()
            .map_or(&[], |kept| kept.calls.as_slice())
    }

    /// Takes the calls recorded one by one out of these stats (leaving none).
    pub fn take_details(&mut self) -> Vec<Detail> {
        self.details
            .as_mut()
            .map_or_else(Vec::new, |kept| std::mem::take(&mut kept.calls))
    }

    /// When the run started by the wall clock, if details are kept (a detail's
    /// timestamp is this plus its [`Detail::at`]).
    pub fn details_start(&self) -> Option<SystemTime> {
        self.details.as_ref().map(|kept| kept.start)
    }

    /// Empty stats that count failed calls' latencies as successful ones' (ghz's
    /// `--count-errors`).
    pub fn counting_errors(mut self, count: bool) -> Stats {
        self.count_errors = count;
        self
    }

    /// Records the messages one call sent and received on its streams.
    pub fn record_stream(&mut self, sent: u64, received: u64) {
        self.stream_sent += sent;
        self.stream_received += received;
    }

    /// Messages sent on request streams, and received on response streams.
    pub fn stream_messages(&self) -> (u64, u64) {
        (self.stream_sent, self.stream_received)
    }

    /// Records a call that took `latency` and completed `at` after the start of the run.
    pub fn record(&mut self, latency: Duration, at: Duration, result: &Result<(), CallError>) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.latency_sum_ns += u128::from(ns);
        let mut index = at.as_nanos() / self.interval.as_nanos();
        while index >= MAX_INTERVALS as u128 {
            self.coarsen();
            index = at.as_nanos() / self.interval.as_nanos();
        }
        let index = index as usize;
        if self.timeline.len() <= index {
            self.timeline.resize(index + 1, Interval::default());
        }
        let slot = &mut self.timeline[index];
        slot.latency_sum_ns = slot.latency_sum_ns.saturating_add(ns);
        slot.latency_max_ns = slot.latency_max_ns.max(ns);
        if slot.log_buckets.is_empty() {
            slot.log_buckets = vec![0; LOG_BUCKETS];
        }
        slot.log_buckets[log_bucket(ns)] += 1;
        match result {
            Ok(()) => {
                self.ok += 1;
                slot.ok += 1;
                self.status[Code::Ok as usize] += 1;
                self.fastest_ns = self.fastest_ns.min(ns);
                self.slowest_ns = self.slowest_ns.max(ns);
                // Cannot fail: auto-resize is on and `ns` >= 1.
                let _ = self.ok_latency.record(ns);
                self.keep_detail(at, latency, Code::Ok, None);
            }
            Err(error) => {
                self.errors += 1;
                slot.errors += 1;
                self.status[(error.code as usize).min(16)] += 1;
                let key = self.count_error(&error.to_ghz_string(), 1);
                self.keep_detail(at, latency, error.code, Some(key));
                if self.count_errors {
                    self.fastest_ns = self.fastest_ns.min(ns);
                    self.slowest_ns = self.slowest_ns.max(ns);
                    let _ = self.ok_latency.record(ns);
                }
            }
        }
    }

    /// Keeps a call's detail, if details are kept and the run has room.
    fn keep_detail(
        &mut self,
        at: Duration,
        latency: Duration,
        code: Code,
        error: Option<Arc<str>>,
    ) {
        if let Some(kept) = &mut self.details {
            if kept.room.take() {
                kept.calls.push(Detail {
                    at,
                    latency,
                    code,
                    error,
                });
            }
        }
    }

    /// Counts `n` calls that failed with `key`; returns the key as stored (shared), or
    /// [`OTHER_ERRORS`] past [`MAX_DISTINCT_ERRORS`] distinct ones.
    fn count_error(&mut self, key: &str, n: u64) -> Arc<str> {
        let key = if self.error_messages.contains_key(key)
            || self.error_messages.len() < MAX_DISTINCT_ERRORS
        {
            key
        } else {
            OTHER_ERRORS
        };
        let stored = match self.error_messages.get_key_value(key) {
            Some((stored, _)) => stored.clone(),
            None => Arc::from(key),
        };
        *self.error_messages.entry(stored.clone()).or_default() += n;
        stored
    }

    /// Adds `other`'s measurements (same interval width) to these; its details (shards of
    /// one run share their room, so they fit) move into these, in completion order.
    pub fn merge(&mut self, other: &mut Stats) {
        if let (Some(mine), Some(theirs)) = (&mut self.details, &mut other.details) {
            mine.calls.append(&mut theirs.calls);
            mine.calls.sort_by_key(|d| d.at);
        }
        self.stream_sent += other.stream_sent;
        self.stream_received += other.stream_received;
        self.ok += other.ok;
        self.errors += other.errors;
        self.latency_sum_ns += other.latency_sum_ns;
        self.fastest_ns = self.fastest_ns.min(other.fastest_ns);
        self.slowest_ns = self.slowest_ns.max(other.slowest_ns);
        let _ = self.ok_latency.add(&other.ok_latency);
        for (mine, theirs) in self.status.iter_mut().zip(other.status) {
            *mine += theirs;
        }
        for (key, n) in &other.error_messages {
            self.count_error(key, *n);
        }
        // Either may have widened its intervals (both from the same width, by doubling).
        while self.interval < other.interval {
            self.coarsen();
        }
        while other.interval < self.interval {
            other.coarsen();
        }
        if self.timeline.len() < other.timeline.len() {
            self.timeline
                .resize(other.timeline.len(), Interval::default());
        }
        for (mine, theirs) in self.timeline.iter_mut().zip(&other.timeline) {
            mine.add(theirs);
        }
    }

    /// Doubles the timeline's interval, merging adjacent intervals in pairs.
    fn coarsen(&mut self) {
        self.interval = self.interval.saturating_mul(2);
        let fine = std::mem::take(&mut self.timeline);
        self.timeline = fine
            .chunks(2)
            .map(|pair| {
                let mut merged = pair[0].clone();
                if let Some(second) = pair.get(1) {
                    merged.add(second);
                }
                merged
            })
            .collect();
    }

    /// Calls recorded, successful or not.
    pub fn count(&self) -> u64 {
        self.ok + self.errors
    }

    /// Successful calls.
    pub fn ok(&self) -> u64 {
        self.ok
    }

    /// Failed calls.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Calls in the latency figures (histogram, percentiles, extremes): the successful
    /// ones, and with `--count-errors` the failed ones too.
    pub fn counted(&self) -> u64 {
        match self.count_errors {
            true => self.ok + self.errors,
            false => self.ok,
        }
    }

    /// Mean latency of all calls, successful or not (as ghz computes it); zero if none.
    pub fn average(&self) -> Duration {
        match self.count() {
            0 => Duration::ZERO,
            n => nanos(u64::try_from(self.latency_sum_ns / u128::from(n)).unwrap_or(u64::MAX)),
        }
    }

    /// Exact lowest latency of a [counted](Stats::counted) call; `None` if none.
    pub fn fastest(&self) -> Option<Duration> {
        (self.counted() > 0).then(|| nanos(self.fastest_ns))
    }

    /// Exact highest latency of a [counted](Stats::counted) call; `None` if none.
    pub fn slowest(&self) -> Option<Duration> {
        (self.counted() > 0).then(|| nanos(self.slowest_ns))
    }

    /// The latency below which `percent` % of [counted](Stats::counted) calls fall (to
    /// the histogram's 3 significant digits, never beyond the exact extremes); `None` if
    /// none.
    pub fn percentile(&self, percent: f64) -> Option<Duration> {
        (self.counted() > 0).then(|| {
            let value = self.ok_latency.value_at_quantile(percent / 100.0);
            nanos(value.clamp(self.fastest_ns, self.slowest_ns))
        })
    }

    /// The histogram of [counted](Stats::counted) calls' latencies, in nanoseconds.
    pub fn latency_histogram(&self) -> &Histogram<u64> {
        &self.ok_latency
    }

    /// Calls per status code, in code order, codes with no call left out.
    pub fn status_counts(&self) -> Vec<(Code, u64)> {
        (0u8..=16)
            .filter(|&c| self.status[c as usize] > 0)
            .map(|c| (Code::from_u8(c), self.status[c as usize]))
            .collect()
    }

    /// Calls per error message (ghz's format), most frequent first.
    pub fn error_counts(&self) -> Vec<(String, u64)> {
        let mut errors: Vec<(String, u64)> = self
            .error_messages
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        errors.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        errors
    }

    /// The width of one timeline interval: the one given, doubled as often as needed to
    /// keep the timeline within [`MAX_INTERVALS`].
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The timeline: interval `i` covers completions in `[i*interval, (i+1)*interval)`.
    pub fn timeline(&self) -> &[Interval] {
        &self.timeline
    }
}

fn nanos(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

#[cfg(test)]
mod tests;
