//! [`ReportOptions`]: the run's options as the report records them (ghz's `options`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cli::{Args, LoadSchedule};

fn is_false(b: &bool) -> bool {
    !b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The options of a run, under ghz's names (kebab-case ones included) where ghz has the
/// option. Durations are in nanoseconds.
#[derive(Debug, Clone, Serialize)]
pub struct ReportOptions {
    /// The address URL.
    pub host: String,
    /// The .proto file (empty with a protoset or reflection).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub proto: String,
    /// `--protoset`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub protoset: String,
    /// Import paths.
    #[serde(rename = "import-paths")]
    pub import_paths: Vec<String>,
    /// The method, `package.Service/Method`.
    pub call: String,
    /// `-e`.
    #[serde(rename = "enable-compression", skip_serializing_if = "is_false")]
    pub enable_compression: bool,
    /// `--cacert`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cacert: String,
    /// `--cert`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cert: String,
    /// `--key`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `--cname`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cname: String,
    /// `--skipTLS`.
    #[serde(rename = "skipTLS", skip_serializing_if = "is_false")]
    pub skip_tls: bool,
    /// `--insecure`.
    pub insecure: bool,
    /// `--authority`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub authority: String,
    /// `--async`.
    #[serde(rename = "async", skip_serializing_if = "is_false")]
    pub async_calls: bool,
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
    /// `--keepalive`, ns (0: none).
    pub keepalive: u64,
    /// `--skipFirst`.
    #[serde(rename = "skipFirst", skip_serializing_if = "is_zero")]
    pub skip_first: u64,
    /// The request data (`-d`, `-D`), as JSON.
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
    /// The largest message received, bytes (`--max-recv-message-size`, or
    /// `--max-message-size`).
    #[serde(rename = "max-recv-message-size")]
    pub max_recv_message_size: usize,
    /// The largest message sent, bytes.
    #[serde(rename = "max-send-message-size")]
    pub max_send_message_size: usize,
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
    /// `--duration-stop`.
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
    /// `--stream-ping-pong` (rpc-load's).
    #[serde(rename = "stream-ping-pong")]
    pub stream_ping_pong: bool,
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
        let path = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let (load, data, security) = (&args.load, &args.data, &args.security);
        let (max_recv, max_send) = args.connection.message_limits();
        ReportOptions {
            host: args.address().unwrap_or_default().to_owned(),
            proto: path(&args.proto.proto),
            protoset: path(&args.proto.protoset),
            import_paths: args
                .proto
                .import_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            call,
            enable_compression: args.connection.enable_compression,
            cacert: path(&security.cacert),
            cert: path(&security.cert),
            key: path(&security.key),
            cname: security.cname.clone().unwrap_or_default(),
            skip_tls: security.skip_tls,
            insecure: security.insecure,
            authority: security.authority.clone().unwrap_or_default(),
            async_calls: load.async_calls,
            total,
            concurrency: load.concurrency,
            connections: args.connection.connections,
            rps: load.rps,
            duration: load.max_duration.or(load.duration).map_or(0, ns),
            timeout: ns(load.timeout),
            dial_timeout: ns(args.connection.connect_timeout),
            keepalive: args.connection.keepalive.map_or(0, ns),
            skip_first: args.output.skip_first,
            // The data as read for the run (`-d @` reads standard input once): set by the
            // caller, which has it.
            data: None,
            binary: data.binary || data.binary_file.is_some(),
            metadata: metadata.iter().cloned().collect(),
            cpus,
            name: args.output.name.clone(),
            load_schedule: load.load_schedule,
            load_start: load.load_start,
            load_step: load.load_step,
            load_end: load.load_end,
            load_step_duration: load.load_step_duration.map_or(0, ns),
            load_max_duration: load.load_max_duration.map_or(0, ns),
            warmup: load.warmup,
            concurrency_schedule: load.concurrency_schedule,
            concurrency_start: load.concurrency_start,
            concurrency_step: load.concurrency_step,
            concurrency_end: load.concurrency_end,
            concurrency_step_duration: load.concurrency_step_duration.map_or(0, ns),
            concurrency_max_duration: load.concurrency_max_duration.map_or(0, ns),
            duration_stop: load.duration_stop,
            count_errors: args.output.count_errors,
            stream_interval: data.stream_interval.map_or(0, ns),
            stream_call_duration: data.stream_call_duration.map_or(0, ns),
            stream_call_count: data.stream_call_count.unwrap_or(0),
            stream_dynamic_messages: data.stream_dynamic_messages,
            stream_ping_pong: data.stream_ping_pong,
            payload_size: data.payload_size,
            payload_field,
            max_recv_message_size: max_recv,
            max_send_message_size: max_send,
        }
    }
}
