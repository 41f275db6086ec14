//! [`Report`]: the figures of a run, under ghz's field names and units, and its
//! renderings (`-O summary|json|pretty|csv|html`).
//!
//! As in ghz: `count` includes failed calls, `rps` is `count / total`, `average` is over
//! all calls, while `fastest`, `slowest`, `histogram` and `latencyDistribution` cover
//! successful calls only (with `--count-errors`, failed ones too). Durations are integer nanoseconds except the histogram's
//! `mark`, which is in seconds. Beyond ghz's fields the JSON carries the transport
//! actually used, the machine, the client's CPU time, the warm-up and the timeline.
//! `latencyDistribution` keeps ghz's integer percentages (so that ghz readers parse it);
//! p99.9 and p99.99 are in `tailLatencyDistribution`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::machine::{rfc3339, CpuTime, Machine};
use crate::runner::RunOutcome;
use crate::stats::{code_name, Stats};

mod csv;
mod details;
mod gofmt;
mod html;
mod influx;
mod options;
mod prometheus;
mod summary;
mod svg;

pub use summary::format_ns;

pub use details::Details;
pub use options::ReportOptions;

/// The percentiles of `latencyDistribution`, as ghz's.
pub const PERCENTILES: [u32; 7] = [10, 25, 50, 75, 90, 95, 99];

/// The percentiles of `tailLatencyDistribution`.
pub const TAIL_PERCENTILES: [f64; 2] = [99.9, 99.99];

/// Buckets of ghz's `histogram`: marks at ten equal steps from fastest to slowest.
const GHZ_HISTOGRAM_BUCKETS: usize = 10;

/// Buckets of the HTML report's finer histogram.
const FINE_HISTOGRAM_BUCKETS: usize = 40;

/// One point of `latencyDistribution`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyPoint<P> {
    /// The percentile, e.g. 50.
    pub percentage: P,
    /// The latency at that percentile, in nanoseconds.
    pub latency: u64,
}

/// One bucket of `histogram`: successful calls with a latency up to `mark` (and above
/// the previous bucket's mark).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    /// Upper bound of the bucket, in seconds.
    pub mark: f64,
    /// Calls in the bucket.
    pub count: u64,
    /// `count` as a fraction of all successful calls.
    pub frequency: f64,
}

/// One interval of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelinePoint {
    /// Start of the interval, in nanoseconds since the start of the run.
    pub start: u64,
    /// Completed calls per second in the interval.
    pub rps: f64,
    /// Failed calls in the interval.
    pub errors: u64,
    /// Mean latency of calls completed in the interval, in nanoseconds (0 if none).
    pub average: u64,
    /// Highest latency of a call completed in the interval, in nanoseconds.
    pub slowest: u64,
    /// Median latency of the calls completed in the interval (within 19 %), ns.
    pub p50: u64,
    /// 99th percentile of the same, ns.
    pub p99: u64,
}

/// Calls of the warm-up, which are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Warmup {
    /// Warm-up calls made.
    pub calls: u64,
    /// Warm-up calls that failed.
    pub errors: u64,
}

/// Messages moved on the streams of a run.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamMessages {
    /// Sent on request streams.
    pub sent: u64,
    /// Received on response streams.
    pub received: u64,
    /// Received per second of the run.
    pub received_per_second: f64,
    /// Sent per second of the run.
    pub sent_per_second: f64,
}

/// The report of a run. Serialized, it is ghz's JSON report plus the fields above.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `--name`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `normal`, `timeout` (the duration passed) or `cancel`.
    pub end_reason: &'static str,
    /// The options of the run.
    pub options: ReportOptions,
    /// When the report was made, RFC 3339.
    pub date: String,
    /// The same, as a time (not serialized).
    #[serde(skip)]
    pub date_time: SystemTime,
    /// Calls counted (successful or not).
    pub count: u64,
    /// Duration of the measured run, ns.
    pub total: u64,
    /// Mean latency of all calls, ns.
    pub average: u64,
    /// Lowest latency of a successful call, ns.
    pub fastest: u64,
    /// Highest latency of a successful call, ns.
    pub slowest: u64,
    /// Calls per second: `count / total`.
    pub rps: f64,
    /// Failed calls per error message.
    pub error_distribution: BTreeMap<String, u64>,
    /// Calls per status code (grpc-go names: `OK`, `NotFound`, ...).
    pub status_code_distribution: BTreeMap<String, u64>,
    /// p10 ... p99 of successful calls.
    pub latency_distribution: Vec<LatencyPoint<u32>>,
    /// p99.9 and p99.99 of successful calls.
    pub tail_latency_distribution: Vec<LatencyPoint<f64>>,
    /// ghz's 11-bucket histogram of successful calls.
    pub histogram: Vec<Bucket>,
    /// Every call (for the formats that list calls, up to a million; empty otherwise):
    /// `timestamp` (RFC 3339), `latency` (ns), `error`, `status`.
    pub details: Details,
    /// `--tags`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Requests sent; always `count` (sent = replies + errors).
    pub sent: u64,
    /// Successful calls.
    pub ok: u64,
    /// Failed calls.
    pub errors: u64,
    /// The transport the calls actually used: `tcp`, `rdma` or `grpc`.
    pub transport: String,
    /// Messages moved on streams (absent for unary methods).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_messages: Option<StreamMessages>,
    /// Where the load generator ran.
    pub machine: Machine,
    /// CPU time of the load generator process (including start-up and warm-up).
    pub client_cpu: CpuTime,
    /// The warm-up.
    pub warmup: Warmup,
    /// Width of one timeline interval, ns.
    pub timeline_interval: u64,
    /// Completions over time.
    pub timeline: Vec<TimelinePoint>,
    /// Finer histogram for the HTML report (not serialized).
    #[serde(skip)]
    pub fine_histogram: Vec<Bucket>,
}

impl Report {
    /// The report of `outcome` (whose details it takes over, not copies).
    pub fn new(
        mut outcome: RunOutcome,
        options: ReportOptions,
        tags: BTreeMap<String, String>,
        transport: String,
    ) -> Report {
        let calls = outcome.stats.take_details();
        let stats = &outcome.stats;
        let now = SystemTime::now();
        let ns = |d: Option<Duration>| d.map_or(0, |d| d.as_nanos() as u64);
        let total = outcome.total_time;
        let rps = if total.is_zero() {
            0.0
        } else {
            stats.count() as f64 / total.as_secs_f64()
        };
        Report {
            name: options.name.clone(),
            end_reason: outcome.end_reason.as_str(),
            options,
            date: rfc3339(now),
            date_time: now,
            count: stats.count(),
            total: total.as_nanos() as u64,
            average: stats.average().as_nanos() as u64,
            fastest: ns(stats.fastest()),
            slowest: ns(stats.slowest()),
            rps,
            error_distribution: stats.error_counts().into_iter().collect(),
            status_code_distribution: stats
                .status_counts()
                .into_iter()
                .map(|(code, n)| (code_name(code).to_owned(), n))
                .collect(),
            latency_distribution: percentiles(stats, PERCENTILES.map(f64::from))
                .into_iter()
                .zip(PERCENTILES)
                .map(|(p, percentage)| LatencyPoint {
                    percentage,
                    latency: p.latency,
                })
                .collect(),
            tail_latency_distribution: percentiles(stats, TAIL_PERCENTILES),
            histogram: histogram(stats, GHZ_HISTOGRAM_BUCKETS),
            details: Details {
                calls,
                start: stats.details_start(),
            },
            tags,
            sent: outcome.sent,
            ok: stats.ok(),
            errors: stats.errors(),
            transport,
            stream_messages: {
                let (sent, received) = stats.stream_messages();
                let per_second = |n: u64| {
                    if total.is_zero() {
                        0.0
                    } else {
                        n as f64 / total.as_secs_f64()
                    }
                };
                (sent + received > 0).then(|| StreamMessages {
                    sent,
                    received,
                    received_per_second: per_second(received),
                    sent_per_second: per_second(sent),
                })
            },
            machine: Machine::detect(),
            client_cpu: CpuTime::of_self(),
            warmup: Warmup {
                calls: outcome.warmup_calls,
                errors: outcome.warmup_errors,
            },
            timeline_interval: stats.interval().as_nanos() as u64,
            timeline: timeline(stats, total),
            fine_histogram: log_histogram(stats, FINE_HISTOGRAM_BUCKETS),
        }
    }

    /// The latency at `percentage` from the distributions, if reported.
    pub fn latency_at(&self, percentage: f64) -> Option<u64> {
        self.latency_distribution
            .iter()
            .find(|p| f64::from(p.percentage) == percentage)
            .map(|p| p.latency)
            .or_else(|| {
                self.tail_latency_distribution
                    .iter()
                    .find(|p| p.percentage == percentage)
                    .map(|p| p.latency)
            })
    }

    /// ghz's human-readable summary.
    pub fn to_summary(&self) -> String {
        summary::render(self)
    }

    /// Writes the JSON report into `out` (indented when `pretty`), and a line break.
    ///
    /// # Errors
    /// The writer's.
    pub fn write_json(&self, out: &mut impl std::io::Write, pretty: bool) -> std::io::Result<()> {
        if pretty {
            serde_json::to_writer_pretty(&mut *out, self)?;
        } else {
            serde_json::to_writer(&mut *out, self)?;
        }
        out.write_all(b"\n")
    }

    /// The JSON report; indented when `pretty`.
    pub fn to_json(&self, pretty: bool) -> String {
        let json = if pretty {
            serde_json::to_string_pretty(self)
        } else {
            serde_json::to_string(self)
        };
        json.expect("a report always serializes") + "\n"
    }

    /// ghz's per-call listing, `duration (ms),status,error`.
    pub fn to_csv_details(&self) -> String {
        text_of(|out| self.write_csv_details(out))
    }

    /// Writes [`Report::to_csv_details`] into `out`, row by row.
    ///
    /// # Errors
    /// The writer's.
    pub fn write_csv_details(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        csv::write_details(self, out)
    }

    /// `-O csv-summary`: one header line and one line of figures.
    pub fn to_csv(&self) -> String {
        csv::render(self)
    }

    /// A self-contained HTML page with the figures and charts.
    pub fn to_html(&self) -> String {
        html::render(self)
    }

    /// ghz's `influx-summary`: one InfluxDB line, measurement `ghz_run`.
    pub fn to_influx_summary(&self) -> String {
        influx::summary(self)
    }

    /// ghz's `influx-details`: one InfluxDB line per call, measurement `ghz_detail`.
    pub fn to_influx_details(&self) -> String {
        text_of(|out| self.write_influx_details(out))
    }

    /// Writes [`Report::to_influx_details`] into `out`, line by line.
    ///
    /// # Errors
    /// The writer's.
    pub fn write_influx_details(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        influx::write_details(self, out)
    }

    /// ghz's `prometheus`: the summary as Prometheus' text exposition format.
    pub fn to_prometheus(&self) -> String {
        prometheus::render(self)
    }
}

/// What `write` writes, as text (it writes UTF-8).
fn text_of(write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut out).expect("writing into memory does not fail");
    String::from_utf8_lossy(&out).into_owned()
}

/// The latencies at `percents` of the successful calls; empty if none succeeded.
fn percentiles<const N: usize>(stats: &Stats, percents: [f64; N]) -> Vec<LatencyPoint<f64>> {
    percents
        .into_iter()
        .filter_map(|p| {
            stats.percentile(p).map(|latency| LatencyPoint {
                percentage: p,
                latency: latency.as_nanos() as u64,
            })
        })
        .collect()
}

/// `buckets + 1` marks from fastest to slowest in equal steps (ghz's layout); each call
/// counts in the first bucket whose mark is at or above its latency.
fn histogram(stats: &Stats, buckets: usize) -> Vec<Bucket> {
    bucketed(stats, |low, high| {
        let step = (high - low) / buckets as f64;
        (0..=buckets).map(|i| low + step * i as f64).collect()
    })
}

/// A histogram of successful calls on `buckets` logarithmic buckets from the fastest to
/// the slowest call (each bucket's upper bound a constant factor above the previous
/// one): a long tail gets buckets of its own instead of one bar holding nearly every
/// call.
fn log_histogram(stats: &Stats, buckets: usize) -> Vec<Bucket> {
    bucketed(stats, |low, high| {
        let factor = (high / low).powf(1.0 / buckets as f64);
        (1..=buckets).map(|i| low * factor.powi(i as i32)).collect()
    })
}

/// Successful calls counted into buckets whose upper marks `marks(fastest, slowest)`
/// gives (in ns, rising; the last is set to the slowest exactly).
fn bucketed(stats: &Stats, marks: impl FnOnce(f64, f64) -> Vec<f64>) -> Vec<Bucket> {
    let (Some(fastest), Some(slowest)) = (stats.fastest(), stats.slowest()) else {
        return Vec::new();
    };
    let (low, high) = (fastest.as_nanos() as f64, slowest.as_nanos() as f64);
    let mut marks = marks(low, high);
    if let Some(last) = marks.last_mut() {
        *last = high;
    }
    let mut counts = vec![0u64; marks.len()];
    for value in stats.latency_histogram().iter_recorded() {
        // The histogram's value is rounded to 3 digits: clamp it to the exact extremes.
        let v = (value.value_iterated_to() as f64).clamp(low, high);
        let i = marks.partition_point(|&m| m < v).min(marks.len() - 1);
        counts[i] += value.count_at_value();
    }
    // The calls the histogram holds: with --count-errors, failed ones too.
    let counted = stats.counted().max(1) as f64;
    marks
        .into_iter()
        .zip(counts)
        .map(|(mark, count)| Bucket {
            mark: mark / 1e9,
            count,
            frequency: count as f64 / counted,
        })
        .collect()
}

/// The timeline; the last interval ends with the run, so its rate is over its real width.
fn timeline(stats: &Stats, total: Duration) -> Vec<TimelinePoint> {
    let width = stats.interval();
    stats
        .timeline()
        .iter()
        .enumerate()
        .map(|(i, interval)| {
            let calls = interval.ok + interval.errors;
            let start = width * i as u32;
            let seconds = total
                .saturating_sub(start)
                .min(width)
                .max(Duration::from_millis(1))
                .as_secs_f64();
            TimelinePoint {
                start: start.as_nanos() as u64,
                rps: calls as f64 / seconds,
                errors: interval.errors,
                average: interval.latency_sum_ns.checked_div(calls).unwrap_or(0),
                slowest: interval.latency_max_ns,
                p50: interval.percentile(50.0).unwrap_or(0),
                p99: interval.percentile(99.0).unwrap_or(0),
            }
        })
        .collect()
}
