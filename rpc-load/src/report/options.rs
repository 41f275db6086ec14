//! [`ReportOptions`]: the run's options as the report records them (ghz's `options`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cli::{Args, LoadSchedule};

/// The options of a run, under ghz's names (kebab-case ones included) where ghz has the
/// option. Durations are in nanoseconds.
#[derive(Debug, Clone, Serialize)]
pub struct ReportOptions {
    /// The address URL.
    pub host: String,
    /// The .proto file.
    pub proto: String,
    /// Import paths.
    #[serde(rename = "import-paths")]
    pub import_paths: Vec<String>,
    /// The method, `package.Service/Method`.
    pub call: String,
    /// `-n`, when the run was bounded by a count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// `-c`.
    pub concurrency: usize,
    /// `--connections`.
    pub connections: usize,
    /// `-r`, requests per second (0: unlimited).
    pub rps: u64,
    /// `-z`, ns (0: none).
    pub duration: u64,
    /// `-t`, ns (0: none).
    pub timeout: u64,
    /// `--connect-timeout`, ns.
    #[serde(rename = "dial-timeout")]
    pub dial_timeout: u64,
    /// `-d`, as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Whether the data came from `-b`.
    pub binary: bool,
    /// `-m`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Threads of the load generator.
    #[serde(rename = "CPUs")]
    pub cpus: usize,
    /// `--name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `--load-schedule`.
    #[serde(rename = "load-schedule")]
    pub load_schedule: LoadSchedule,
    /// `--load-start`.
    #[serde(rename = "load-start")]
    pub load_start: u64,
    /// `--load-step`.
    #[serde(rename = "load-step")]
    pub load_step: i64,
    /// `--load-end`.
    #[serde(rename = "load-end")]
    pub load_end: u64,
    /// `--load-step-duration`, ns.
    #[serde(rename = "load-step-duration")]
    pub load_step_duration: u64,
    /// `--load-max-duration`, ns.
    #[serde(rename = "load-max-duration")]
    pub load_max_duration: u64,
    /// `--warmup`.
    pub warmup: u64,
    /// `--payload-size`, bytes.
    #[serde(rename = "payload-size", skip_serializing_if = "Option::is_none")]
    pub payload_size: Option<usize>,
    /// The field `--payload-size` filled.
    #[serde(rename = "payload-field", skip_serializing_if = "Option::is_none")]
    pub payload_field: Option<String>,
    /// `--max-message-size`, bytes.
    #[serde(rename = "max-message-size")]
    pub max_message_size: usize,
    /// `--concurrency-schedule`.
    #[serde(rename = "concurrency-schedule")]
    pub concurrency_schedule: LoadSchedule,
    /// `--concurrency-start`.
    #[serde(rename = "concurrency-start")]
    pub concurrency_start: u64,
    /// `--concurrency-step`.
    #[serde(rename = "concurrency-step")]
    pub concurrency_step: i64,
    /// `--concurrency-end`.
    #[serde(rename = "concurrency-end")]
    pub concurrency_end: u64,
    /// `--concurrency-step-duration`, ns.
    #[serde(rename = "concurrency-step-duration")]
    pub concurrency_step_duration: u64,
    /// `--concurrency-max-duration`, ns.
    #[serde(rename = "concurrency-max-duration")]
    pub concurrency_max_duration: u64,
    /// `-x`.
    #[serde(rename = "duration-stop")]
    pub duration_stop: crate::runner::DurationStop,
    /// `--count-errors`.
    #[serde(rename = "count-errors")]
    pub count_errors: bool,
    /// `--stream-interval`, ns (0: none).
    #[serde(rename = "stream-interval")]
    pub stream_interval: u64,
    /// `--stream-call-duration`, ns (0: none).
    #[serde(rename = "stream-call-duration")]
    pub stream_call_duration: u64,
    /// `--stream-call-count` (0: none).
    #[serde(rename = "stream-call-count")]
    pub stream_call_count: u64,
    /// `--stream-dynamic-messages`.
    #[serde(rename = "stream-dynamic-messages")]
    pub stream_dynamic_messages: bool,
}

impl ReportOptions {
    /// The options of `args`, with the resolved method name, the effective total, the
    /// field the payload went into, the metadata and the runtime's threads.
    pub fn new(
        args: &Args,
        call: String,
        total: Option<u64>,
        payload_field: Option<String>,
        metadata: &[(String, String)],
        cpus: usize,
    ) -> ReportOptions {
        let ns = |d: std::time::Duration| d.as_nanos() as u64;
        let data = args.data.as_deref().and_then(|d| {
            crate::data::read_data_arg(d)
                .ok()
                .and_then(|json| serde_json::from_str(&json).ok())
        });
        ReportOptions {
            host: args.address().unwrap_or_default().to_owned(),
            proto: args.proto.display().to_string(),
            import_paths: args
                .import_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            call,
            total,
            concurrency: args.concurrency,
            connections: args.connections,
            rps: args.rps,
            duration: args.duration.map_or(0, ns),
            timeout: ns(args.timeout),
            dial_timeout: ns(args.connect_timeout),
            data,
            binary: args.binary_file.is_some(),
            metadata: metadata.iter().cloned().collect(),
            cpus,
            name: args.name.clone(),
            load_schedule: args.load_schedule,
            load_start: args.load_start,
            load_step: args.load_step,
            load_end: args.load_end,
            load_step_duration: args.load_step_duration.map_or(0, ns),
            load_max_duration: args.load_max_duration.map_or(0, ns),
            warmup: args.warmup,
            concurrency_schedule: args.concurrency_schedule,
            concurrency_start: args.concurrency_start,
            concurrency_step: args.concurrency_step,
            concurrency_end: args.concurrency_end,
            concurrency_step_duration: args.concurrency_step_duration.map_or(0, ns),
            concurrency_max_duration: args.concurrency_max_duration.map_or(0, ns),
            duration_stop: args.duration_stop,
            count_errors: args.count_errors,
            stream_interval: args.stream_interval.map_or(0, ns),
            stream_call_duration: args.stream_call_duration.map_or(0, ns),
            stream_call_count: args.stream_call_count.unwrap_or(0),
            stream_dynamic_messages: args.stream_dynamic_messages,
            payload_size: args.payload_size,
            payload_field,
            max_message_size: args.max_message_size,
        }
    }
}
