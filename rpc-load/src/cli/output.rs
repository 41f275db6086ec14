//! Flags that say what the report holds and where it goes: ghz's "Output", "Meta" and
//! "Debug" flags.

use std::path::PathBuf;

use clap::{ArgAction, Args as ClapArgs, ValueEnum};

use super::values::parse_bool;

/// The report.
#[derive(ClapArgs, Debug, Clone)]
pub struct OutputFlags {
    /// Output path; default: standard output.
    #[arg(short = 'o', long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'O', long, value_enum, default_value_t = Format::Summary)]
    pub format: Format,
    /// Skip the first N results when doing the results tally (they are made, and not
    /// counted).
    #[arg(long = "skipFirst", value_name = "N", default_value_t = 0)]
    pub skip_first: u64,
    /// Count erroneous (non-OK) responses in the latency statistics too (fastest,
    /// slowest, histogram, percentiles).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub count_errors: bool,
    /// User specified name for the test, copied into the report.
    #[arg(long)]
    pub name: Option<String>,
    /// JSON representation of user-defined string tags, copied into the report's `tags`.
    #[arg(long, value_name = "JSON")]
    pub tags: Option<String>,
    /// The path to a debug log file: debug logs of the run, as JSON lines.
    #[arg(long, value_name = "PATH")]
    pub debug: Option<PathBuf>,
}

/// `-O`: how the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum Format {
    /// ghz's human-readable summary.
    Summary,
    /// ghz's per-call listing: `duration (ms),status,error`, one row per call.
    Csv,
    /// ghz's JSON report (compact).
    Json,
    /// The same JSON, indented.
    Pretty,
    /// One self-contained HTML page with charts.
    Html,
    /// The summary as one InfluxDB line (ghz's `ghz_run` measurement).
    InfluxSummary,
    /// One InfluxDB line per call (ghz's `ghz_detail` measurement).
    InfluxDetails,
    /// The summary in Prometheus' text exposition format (ghz's `ghz_run_*` metrics).
    Prometheus,
    /// One header line and one line of figures, for tables of several runs (rpc-load's
    /// addition).
    CsvSummary,
}

impl Format {
    /// Whether the format lists every call (so every call's details are kept).
    pub fn lists_calls(self) -> bool {
        matches!(
            self,
            Format::Csv | Format::Json | Format::Pretty | Format::InfluxDetails
        )
    }
}
