//! The command line, modelled on ghz's flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use clap::{Parser, ValueEnum};
use serde::Serialize;

use crate::runner::{DurationStop, LoadPlan};
use crate::schedule::{Ramp, Schedule};

/// The most workers a concurrency schedule may reach.
pub const MAX_WORKERS: usize = 100_000;

/// `rpc-load`: load-tests a method (unary or streaming) of an rdmarpc-core service (`tcp://`,
/// `rdma://`, `auto://`) or of a gRPC server (`grpc://`), from its .proto at run time.
#[derive(Parser, Debug, Clone)]
#[command(name = "rpc-load", version, about, long_about = None)]
pub struct Args {
    /// Address: tcp://HOST:PORT, rdma://HOST:PORT, auto://HOST:PORT (each also +tls, e.g.
    /// tcp+tls://), or a gRPC server: grpc://HOST:PORT, grpcs://HOST:PORT.
    #[arg(value_name = "ADDR")]
    pub address: Option<String>,
    /// The address, as a flag (instead of the positional ADDR).
    #[arg(long = "addr", value_name = "URL", conflicts_with = "address")]
    pub addr: Option<String>,
    /// The .proto file declaring the service.
    #[arg(long, value_name = "FILE")]
    pub proto: PathBuf,
    /// Import paths of the .proto (repeat or separate with commas); the .proto's own
    /// directory is always searched too.
    #[arg(
        short = 'I',
        long = "import-paths",
        short_alias = 'i',
        value_name = "DIR",
        value_delimiter = ','
    )]
    pub import_paths: Vec<PathBuf>,
    /// The method: package.Service/Method (or package.Service.Method).
    #[arg(long, value_name = "METHOD")]
    pub call: String,
    /// Request data as JSON, or @FILE. A JSON array gives several messages, used
    /// round-robin (a client stream sends them in order). `{{.RequestNumber}}`,
    /// `{{.WorkerID}}`, `{{.Timestamp}}`, `{{newUUID}}`, `{{randomString N}}`,
    /// `{{randomInt MIN MAX}}` and ghz's other actions are rendered for every call.
    #[arg(short = 'd', long, value_name = "JSON", conflicts_with = "binary_file")]
    pub data: Option<String>,
    /// Request data as one serialized protobuf message in FILE.
    #[arg(
        short = 'b',
        long = "binary-file",
        short_alias = 'B',
        value_name = "FILE"
    )]
    pub binary_file: Option<PathBuf>,
    /// Fill a payload of this many bytes into the request (see --payload-field).
    #[arg(long, value_name = "BYTES")]
    pub payload_size: Option<usize>,
    /// The bytes or string field --payload-size fills; default: the first bytes field.
    #[arg(long, value_name = "FIELD", requires = "payload_size")]
    pub payload_field: Option<String>,
    /// Request metadata as a JSON object of strings, or @FILE.
    #[arg(short = 'm', long, value_name = "JSON")]
    pub metadata: Option<String>,
    /// Number of workers, each with one call in flight.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub concurrency: usize,
    /// Number of requests to send (default 200 when no --duration is given).
    #[arg(short = 'n', long, value_name = "N")]
    pub total: Option<u64>,
    /// Send requests for this long, e.g. 10s, 1m; ends the run even before --total.
    #[arg(short = 'z', long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Rate limit in requests per second for the const schedule; 0 = unlimited.
    #[arg(short = 'r', long, value_name = "RPS", default_value_t = 0)]
    pub rps: u64,
    /// Connections to spread the workers over (with several endpoints: balanced channels,
    /// each with a connection per endpoint).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// How a list of endpoints (tcp://h1:p1,h2:p2) or a DNS name (dns:///name:port) is
    /// balanced: p2c (power of two choices on calls in flight) or round-robin. tonic's
    /// balanced channel (--grpc-client tonic) has p2c only.
    #[arg(long, value_enum, default_value_t = LbStrategy::P2c)]
    pub lb_strategy: LbStrategy,
    /// The client behind grpc:// addresses: this framework's `Channel` over its gRPC
    /// transport (`rpc`, what generated clients use), or tonic's client (`tonic`, for
    /// comparison; plaintext only).
    #[arg(long, value_enum, default_value_t = GrpcClient::Rpc)]
    pub grpc_client: GrpcClient,
    /// Per-call timeout, e.g. 20s; 0 for none.
    #[arg(short = 't', long, value_name = "DURATION", default_value = "20s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Connect timeout.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Calls made before the measured run, unpaced, and not counted.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u64,
    /// How the rate evolves: const (-r), step or line (--load-*).
    #[arg(long, value_enum, default_value_t = LoadSchedule::Const)]
    pub load_schedule: LoadSchedule,
    /// Starting rate of a step or line schedule, requests per second.
    #[arg(long, value_name = "RPS", default_value_t = 0)]
    pub load_start: u64,
    /// Rate change: per step (step) or per second (line); negative to decrease.
    #[arg(
        long,
        value_name = "RPS",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub load_step: i64,
    /// Rate at which a step or line schedule stops changing; 0 for none.
    #[arg(long, value_name = "RPS", default_value_t = 0)]
    pub load_end: u64,
    /// Length of one step of a step schedule, e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub load_step_duration: Option<Duration>,
    /// After this long, a step or line schedule holds the rate it reached.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub load_max_duration: Option<Duration>,
    /// How the number of active workers evolves: const (-c), step or line
    /// (--concurrency-*); -c is then ignored.
    #[arg(long, value_enum, default_value_t = LoadSchedule::Const)]
    pub concurrency_schedule: LoadSchedule,
    /// Workers active at the start of a step or line concurrency schedule.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub concurrency_start: u64,
    /// Change of the active workers: per step (step) or per second (line); negative to
    /// decrease.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub concurrency_step: i64,
    /// Workers at which a step or line concurrency schedule stops changing; 0 for none
    /// (then --concurrency-max-duration bounds it).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub concurrency_end: u64,
    /// Length of one step of a step concurrency schedule, e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub concurrency_step_duration: Option<Duration>,
    /// After this long, a step or line concurrency schedule holds the workers it reached.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub concurrency_max_duration: Option<Duration>,
    /// Output format.
    #[arg(short = 'O', long, value_enum, default_value_t = Format::Summary)]
    pub format: Format,
    /// Write the report to FILE instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Threads of the load generator's runtime; default: all CPUs it may use.
    #[arg(long, value_name = "N")]
    pub cpus: Option<usize>,
    /// Largest message sent or received, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub max_message_size: usize,
    /// A name for the run, copied into the report.
    #[arg(long)]
    pub name: Option<String>,
    /// Streaming calls: time between two sends on a request stream, e.g. 10ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stream_interval: Option<Duration>,
    /// Streaming calls: how long each call sends (client and bidirectional streams) or
    /// reads (server streams, then cancelled), e.g. 2s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stream_call_duration: Option<Duration>,
    /// Streaming calls: how many messages each call sends (the -d array cycled or cut)
    /// or reads (server streams, then cancelled).
    #[arg(long, value_name = "N")]
    pub stream_call_count: Option<u64>,
    /// What happens to calls in flight when -z ends: close (cancel them, counted as
    /// CANCELLED), wait (for their replies, up to -t) or ignore (cancel them, not counted).
    #[arg(short = 'x', long, value_enum, default_value_t = DurationStop::Close)]
    pub duration_stop: DurationStop,
    /// Count failed calls' latencies in the histogram, percentiles, fastest and slowest
    /// (by default only successful calls count there, as in ghz).
    #[arg(long)]
    pub count_errors: bool,
    /// Streaming calls: render the `-d` template anew for every message sent (not once
    /// per call).
    #[arg(long)]
    pub stream_dynamic_messages: bool,
}

/// `--load-schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LoadSchedule {
    /// Constant rate (-r), or unpaced without -r.
    Const,
    /// The rate changes by --load-step every --load-step-duration.
    Step,
    /// The rate changes continuously by --load-step per second.
    Line,
}

/// `--lb-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum LbStrategy {
    /// Power of two choices on calls in flight.
    P2c,
    /// Each endpoint in turn.
    RoundRobin,
}

impl From<LbStrategy> for rdmarpc_core::LbStrategy {
    fn from(strategy: LbStrategy) -> Self {
        match strategy {
            LbStrategy::P2c => rdmarpc_core::LbStrategy::PowerOfTwoChoices,
            LbStrategy::RoundRobin => rdmarpc_core::LbStrategy::RoundRobin,
        }
    }
}

/// `--grpc-client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum GrpcClient {
    /// This framework's channel over its gRPC client transport.
    Rpc,
    /// tonic's client.
    Tonic,
}

/// `-O`: how the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum Format {
    /// ghz's human-readable summary.
    Summary,
    /// ghz-compatible JSON (compact).
    Json,
    /// The same JSON, indented.
    Pretty,
    /// ghz's per-call listing: `duration (ms),status,error`, one row per call.
    Csv,
    /// One header line and one line of figures (for tables of several runs).
    CsvSummary,
    /// One self-contained HTML page with charts.
    Html,
}

impl Args {
    /// The address URL, from the positional argument or `--addr`.
    ///
    /// # Errors
    /// If neither is given.
    pub fn address(&self) -> anyhow::Result<&str> {
        self.address
            .as_deref()
            .or(self.addr.as_deref())
            .context("no address: give ADDR or --addr URL (tcp://, rdma://, auto://, grpc://)")
    }

    /// The `--stream-*` options.
    pub fn stream_options(&self) -> crate::streams::StreamOptions {
        crate::streams::StreamOptions {
            interval: self.stream_interval.filter(|d| !d.is_zero()),
            call_duration: self.stream_call_duration.filter(|d| !d.is_zero()),
            call_count: self.stream_call_count.filter(|&n| n > 0),
        }
    }

    /// The per-call timeout, `None` for `-t 0`.
    pub fn call_timeout(&self) -> Option<Duration> {
        (!self.timeout.is_zero()).then_some(self.timeout)
    }

    /// The load schedule the flags describe.
    ///
    /// # Errors
    /// Inconsistent `-r`/`--load-*` flags.
    pub fn schedule(&self) -> anyhow::Result<Schedule> {
        let ramp = Ramp {
            start: self.load_start as f64,
            step: self.load_step as f64,
            end: self.load_end as f64,
            step_duration: self.load_step_duration.unwrap_or_default(),
            max_duration: self.load_max_duration,
        };
        match self.load_schedule {
            LoadSchedule::Const if self.rps > 0 => Schedule::constant(self.rps as f64),
            LoadSchedule::Const => Ok(Schedule::unpaced()),
            LoadSchedule::Step => {
                ensure!(
                    self.load_step_duration.is_some(),
                    "--load-schedule step needs --load-step-duration"
                );
                Schedule::step(ramp)
            }
            LoadSchedule::Line => Schedule::line(ramp),
        }
    }

    /// The concurrency schedule the flags describe (`None` for const: `-c` workers), and
    /// the most workers it ever has active.
    ///
    /// # Errors
    /// Inconsistent `--concurrency-*` flags, or a schedule without a bound.
    pub fn concurrency_schedule(&self) -> anyhow::Result<Option<(Schedule, usize)>> {
        let ramp = Ramp {
            start: self.concurrency_start as f64,
            step: self.concurrency_step as f64,
            end: self.concurrency_end as f64,
            step_duration: self.concurrency_step_duration.unwrap_or_default(),
            max_duration: self.concurrency_max_duration,
        };
        let schedule = match self.concurrency_schedule {
            LoadSchedule::Const => return Ok(None),
            LoadSchedule::Step => {
                ensure!(
                    self.concurrency_step_duration.is_some(),
                    "--concurrency-schedule step needs --concurrency-step-duration"
                );
                Schedule::step(ramp).context("concurrency schedule")?
            }
            LoadSchedule::Line => Schedule::line(ramp).context("concurrency schedule")?,
        };
        let most = if self.concurrency_end > 0 {
            self.concurrency_start.max(self.concurrency_end) as f64
        } else if let Some(d) = self.concurrency_max_duration {
            schedule
                .rate_at(d)
                .unwrap_or(0.0)
                .max(self.concurrency_start as f64)
        } else {
            bail!("a step or line concurrency schedule needs --concurrency-end or --concurrency-max-duration");
        };
        ensure!(
            most <= MAX_WORKERS as f64,
            "the concurrency schedule reaches {most} workers, more than {MAX_WORKERS}"
        );
        Ok(Some((schedule, most.ceil() as usize)))
    }

    /// The run the flags describe: `-c`, `-n`/`-z`, schedule, warm-up.
    ///
    /// # Errors
    /// Zero concurrency, more connections than workers, or a bad schedule.
    pub fn plan(&self) -> anyhow::Result<LoadPlan> {
        let workers = self.concurrency_schedule()?;
        let concurrency = workers.as_ref().map_or(self.concurrency, |(_, n)| *n);
        ensure!(concurrency >= 1, "-c must be at least 1");
        ensure!(
            (1..=concurrency).contains(&self.connections),
            "--connections must be between 1 and the number of workers ({concurrency})",
        );
        if self.duration.is_some_and(|d| d.is_zero()) {
            bail!("-z must be positive");
        }
        let total = match (self.total, self.duration) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(200),
        };
        // About 300 points for a chart of a -z run, and never finer than 100 ms.
        let interval = self
            .duration
            .map_or(Duration::from_millis(100), |d| d / 300)
            .max(Duration::from_millis(100));
        Ok(LoadPlan {
            concurrency,
            workers: workers.map(|(schedule, _)| schedule),
            total,
            duration: self.duration,
            schedule: self.schedule()?,
            warmup: self.warmup,
            interval,
            duration_stop: self.duration_stop,
            count_errors: self.count_errors,
            details: self.format == Format::Csv,
        })
    }
}

/// Parses a duration like `500ms`, `10s`, `1.5m`, `2h`, `250us`, `100ns`; a bare number
/// is seconds.
///
/// ```
/// use std::time::Duration;
/// use rdmarpc_load::cli::parse_duration;
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
/// assert!(parse_duration("fast").is_err());
/// ```
///
/// # Errors
/// A string of another form, or a negative duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 10s or 1m"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (ns, us, ms, s, m, h)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}
