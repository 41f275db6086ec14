//! Flags that say how much load, and when: ghz's "Run", "Concurrency" and "Other"
//! flags (rate, schedules, workers, count and durations), and the plan they make.

use std::time::Duration;

use anyhow::{bail, ensure, Context};
use clap::{ArgAction, Args as ClapArgs, ValueEnum};
use serde::Serialize;

use super::values::{parse_bool, parse_duration};
use crate::runner::{DurationStop, LoadPlan};
use crate::schedule::{Ramp, Schedule};

/// The most workers: `-c`, or what a concurrency schedule may reach (and so the most
/// `--connections`).
pub const MAX_WORKERS: usize = 100_000;

/// The most calls in flight at once with `--async` (`--max-in-flight`'s default).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 10_000;

/// The largest `--max-in-flight`: what a semaphore holds.
pub const MAX_IN_FLIGHT: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// ghz's `-n` when neither it nor `-z` is given.
pub const DEFAULT_TOTAL: u64 = 200;

/// The rate, the workers, and when the run ends.
#[derive(ClapArgs, Debug, Clone)]
pub struct LoadFlags {
    /// Requests per second (RPS) rate limit for the const load schedule; 0: no limit.
    #[arg(short = 'r', long, value_name = "RPS", default_value_t = 0)]
    pub rps: u64,
    /// The load schedule: const (-r), step or line (--load-*).
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
    /// Make requests asynchronously: a worker sends its next request when it is due
    /// without waiting for the previous one's response (with no rate, as fast as it can),
    /// up to --max-in-flight calls in flight in all.
    #[arg(long = "async", value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub async_calls: bool,
    /// With --async, the most calls in flight at once; a due request waits for room
    /// (rpc-load's bound; ghz has none).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Number of request workers to run concurrently for the const concurrency schedule.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub concurrency: usize,
    /// How the number of active workers evolves: const (-c), step or line
    /// (--concurrency-*); -c is then ignored.
    #[arg(long, value_enum, default_value_t = LoadSchedule::Const)]
    pub concurrency_schedule: LoadSchedule,
    /// Workers active at the start of a step or line concurrency schedule (at least
    /// one is always active).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub concurrency_start: u64,
    /// Workers at which a step or line concurrency schedule stops changing; 0 for none
    /// (then --concurrency-max-duration or -z bounds it).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub concurrency_end: u64,
    /// Change of the active workers: per step (step) or per second (line); negative to
    /// decrease.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub concurrency_step: i64,
    /// Length of one step of a step concurrency schedule, e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub concurrency_step_duration: Option<Duration>,
    /// After this long, a step or line concurrency schedule holds the workers it reached.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub concurrency_max_duration: Option<Duration>,
    /// Number of requests to run (default 200; ignored with -z).
    #[arg(short = 'n', long, value_name = "N")]
    pub total: Option<u64>,
    /// Timeout for each request, e.g. 20s; 0 for none.
    #[arg(short = 't', long, value_name = "DURATION", default_value = "20s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Duration of the run, e.g. 10s, 3m: requests are sent until it has passed (-n is
    /// then ignored).
    #[arg(short = 'z', long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Maximum duration of the run with -n respected: it ends after -n requests or this
    /// long, whichever comes first (takes precedence over -z).
    #[arg(short = 'x', long, value_name = "DURATION", value_parser = parse_x)]
    pub max_duration: Option<Duration>,
    /// What happens to calls in flight when the duration ends: close (cancel them,
    /// counted as CANCELLED), wait (for their replies, up to -t) or ignore (cancel them,
    /// not counted).
    #[arg(long, value_enum, default_value_t = DurationStop::Close)]
    pub duration_stop: DurationStop,
    /// Calls made before the measured run, unpaced, and not counted (rpc-load's
    /// addition; see also --skipFirst).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u64,
}

/// `-x` as ghz reads it: a duration. `-x close|wait|ignore` was rpc-load's short form of
/// `--duration-stop`; say so.
fn parse_x(text: &str) -> Result<Duration, String> {
    if matches!(text, "close" | "wait" | "ignore") {
        return Err(format!(
            "-x is --max-duration (a duration), as in ghz; for what happens to calls in flight use --duration-stop {text}"
        ));
    }
    parse_duration(text)
}

/// `--load-schedule`, `--concurrency-schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LoadSchedule {
    /// Constant: -r for the rate, -c for the workers.
    Const,
    /// Changes by the step every step duration.
    Step,
    /// Changes continuously by the step per second.
    Line,
}

impl LoadSchedule {
    /// `const`, `step` or `line`.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadSchedule::Const => "const",
            LoadSchedule::Step => "step",
            LoadSchedule::Line => "line",
        }
    }
}

impl LoadFlags {
    /// The per-call timeout, `None` for `-t 0`.
    pub fn call_timeout(&self) -> Option<Duration> {
        (!self.timeout.is_zero()).then_some(self.timeout)
    }

    /// How long the run lasts at most (`-x`, else `-z`), and how many requests it makes
    /// (`-n`, default 200; none with `-z` alone).
    ///
    /// # Errors
    /// A zero `-z` or `-x`.
    pub fn bounds(&self) -> anyhow::Result<(Option<u64>, Option<Duration>)> {
        let zero = |d: Option<Duration>| d.is_some_and(|d| d.is_zero());
        ensure!(
            !zero(self.duration) && !zero(self.max_duration),
            "-z and -x must be positive"
        );
        Ok(match (self.max_duration, self.duration) {
            (Some(x), _) => (Some(self.total.unwrap_or(DEFAULT_TOTAL)), Some(x)),
            (None, Some(z)) => (None, Some(z)),
            (None, None) => (Some(self.total.unwrap_or(DEFAULT_TOTAL)), None),
        })
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
            max_duration: self.load_max_duration.filter(|d| !d.is_zero()),
        };
        match self.load_schedule {
            LoadSchedule::Const if self.rps > 0 => Schedule::constant(self.rps as f64),
            LoadSchedule::Const => Ok(Schedule::unpaced()),
            LoadSchedule::Step => {
                ensure!(
                    self.load_step_duration.is_some_and(|d| !d.is_zero()),
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
        // At least one worker is active: a start of 0 (ghz's default) begins with one.
        let start = self.concurrency_start.max(1);
        let ramp = Ramp {
            start: start as f64,
            step: self.concurrency_step as f64,
            end: self.concurrency_end as f64,
            step_duration: self.concurrency_step_duration.unwrap_or_default(),
            max_duration: self.concurrency_max_duration.filter(|d| !d.is_zero()),
        };
        let schedule = match self.concurrency_schedule {
            LoadSchedule::Const => return Ok(None),
            LoadSchedule::Step => {
                ensure!(
                    self.concurrency_step_duration.is_some_and(|d| !d.is_zero()),
                    "--concurrency-schedule step needs --concurrency-step-duration"
                );
                Schedule::step(ramp).context("concurrency schedule")?
            }
            LoadSchedule::Line => Schedule::line(ramp).context("concurrency schedule")?,
        };
        let horizon = ramp.max_duration.or(self.max_duration).or(self.duration);
        let most = if self.concurrency_end > 0 {
            start.max(self.concurrency_end) as f64
        } else if let Some(d) = horizon {
            schedule.rate_at(d).unwrap_or(0.0).max(start as f64)
        } else {
            bail!("a step or line concurrency schedule needs --concurrency-end, --concurrency-max-duration or -z");
        };
        ensure!(
            most <= MAX_WORKERS as f64,
            "the concurrency schedule reaches {most} workers, more than {MAX_WORKERS}"
        );
        Ok(Some((schedule, most.ceil() as usize)))
    }

    /// The run the flags describe: `-c`, `-n`/`-z`/`-x`, schedules, warm-up; `connections`
    /// must not exceed the workers, and `details` says whether every call is kept.
    ///
    /// # Errors
    /// Zero or more than [`MAX_WORKERS`] workers, more connections than workers, or a
    /// bad schedule.
    pub fn plan(
        &self,
        connections: usize,
        count_errors: bool,
        details: bool,
        skip_first: u64,
    ) -> anyhow::Result<LoadPlan> {
        let workers = self.concurrency_schedule()?;
        let concurrency = workers.as_ref().map_or(self.concurrency, |(_, n)| *n);
        ensure!(
            (1..=MAX_WORKERS).contains(&concurrency),
            "-c must be between 1 and {MAX_WORKERS}"
        );
        ensure!(
            (1..=concurrency).contains(&connections),
            "--connections must be between 1 and the number of workers ({concurrency})",
        );
        ensure!(
            !self.async_calls || (1..=MAX_IN_FLIGHT).contains(&self.max_in_flight),
            "--max-in-flight must be between 1 and {MAX_IN_FLIGHT}"
        );
        let (total, duration) = self.bounds()?;
        if let Some(n) = total {
            ensure!(
                skip_first <= n,
                "--skipFirst {skip_first} skips more requests than the {n} run"
            );
        }
        // About 300 points for a chart of a -z run, and never finer than 100 ms.
        let interval = duration
            .map_or(Duration::from_millis(100), |d| d / 300)
            .max(Duration::from_millis(100));
        Ok(LoadPlan {
            concurrency,
            workers: workers.map(|(schedule, _)| schedule),
            total,
            duration,
            schedule: self.schedule()?,
            warmup: self.warmup,
            interval,
            duration_stop: self.duration_stop,
            count_errors,
            details,
            skip_first,
            max_in_flight: self.async_calls.then_some(self.max_in_flight),
            connections,
        })
    }
}
