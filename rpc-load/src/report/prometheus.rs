//! `-O prometheus`: the summary in Prometheus' text exposition format, as ghz writes it
//! (its `printer/prometheus.go`): gauges `ghz_run_count`, `_total`, `_average`,
//! `_fastest`, `_slowest`, `_rps`, the histogram `ghz_run_histogram` (ghz's buckets,
//! `le` in seconds, counts per bucket as ghz gives them), the summary `ghz_run_latency`
//! (its percentiles, in ns) and the gauge `ghz_run_errors`; every sample labelled with
//! the run's options. Labels are sorted by name (ghz's order is a Go map's, random).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{gofmt, Report};
use crate::cli::LoadSchedule;

pub(super) fn render(r: &Report) -> String {
    let labels = labels(r);
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, value: f64| {
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{{{labels}}} {}", gofmt::float(value));
    };
    gauge(&mut out, "ghz_run_count", r.count as f64);
    gauge(&mut out, "ghz_run_total", r.total as f64);
    gauge(&mut out, "ghz_run_average", r.average as f64);
    gauge(&mut out, "ghz_run_fastest", r.fastest as f64);
    gauge(&mut out, "ghz_run_slowest", r.slowest as f64);
    gauge(&mut out, "ghz_run_rps", r.rps);
    let sum = gofmt::float(r.total as f64);
    let _ = writeln!(out, "# TYPE ghz_run_histogram histogram");
    for bucket in &r.histogram {
        let le = gofmt::float(bucket.mark);
        let _ = writeln!(
            out,
            "ghz_run_histogram_bucket{{{labels},le=\"{le}\"}} {}",
            bucket.count
        );
    }
    let _ = writeln!(
        out,
        "ghz_run_histogram_bucket{{{labels},le=\"+Inf\"}} {}",
        r.count
    );
    let _ = writeln!(out, "ghz_run_histogram_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "ghz_run_histogram_count{{{labels}}} {}", r.count);
    let _ = writeln!(out, "# TYPE ghz_run_latency summary");
    for point in &r.latency_distribution {
        let quantile = gofmt::float(f64::from(point.percentage) / 100.0);
        let value = gofmt::float(point.latency as f64);
        let _ = writeln!(
            out,
            "ghz_run_latency{{{labels},quantile=\"{quantile}\"}} {value}"
        );
    }
    let _ = writeln!(out, "ghz_run_latency_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "ghz_run_latency_count{{{labels}}} {}", r.count);
    let errors: u64 = r.error_distribution.values().sum();
    gauge(&mut out, "ghz_run_errors", errors as f64);
    out
}

/// The labels of every sample: the report's name and end reason, and ghz's options as
/// strings (durations in ns), `-` in names as `_`, the schedules' settings only for
/// step and line schedules.
fn labels(r: &Report) -> String {
    let o = &r.options;
    let mut map: BTreeMap<&str, String> = BTreeMap::new();
    map.insert("name", r.name.clone().unwrap_or_default());
    map.insert("end_reason", r.end_reason.to_owned());
    let mut optional = |key: &'static str, value: &str| {
        if !value.is_empty() {
            map.insert(key, value.to_owned());
        }
    };
    optional("call", &o.call);
    optional("host", &o.host);
    optional("proto", &o.proto);
    optional("protoset", &o.protoset);
    optional("cacert", &o.cacert);
    optional("cert", &o.cert);
    optional("key", &o.key);
    optional("cname", &o.cname);
    optional("authority", &o.authority);
    if o.enable_compression {
        optional("enable_compression", "true");
    }
    map.insert("import_paths", o.import_paths.join(","));
    map.insert("skipTLS", o.skip_tls.to_string());
    map.insert("insecure", o.insecure.to_string());
    map.insert("async", o.async_calls.to_string());
    map.insert("binary", o.binary.to_string());
    map.insert("count_errors", o.count_errors.to_string());
    map.insert("rps", o.rps.to_string());
    map.insert("concurrency", o.concurrency.to_string());
    map.insert("total", o.total.unwrap_or(0).to_string());
    map.insert("connections", o.connections.to_string());
    map.insert("CPUs", o.cpus.to_string());
    map.insert("skipFirst", o.skip_first.to_string());
    map.insert("duration", o.duration.to_string());
    map.insert("timeout", o.timeout.to_string());
    map.insert("dial_timeout", o.dial_timeout.to_string());
    map.insert("keepalive", o.keepalive.to_string());
    if o.load_schedule != LoadSchedule::Const {
        map.insert("load_schedule", o.load_schedule.as_str().to_owned());
        map.insert("load_start", o.load_start.to_string());
        map.insert("load_end", o.load_end.to_string());
        map.insert("load_step", o.load_step.to_string());
        map.insert("load_step_duration", o.load_step_duration.to_string());
        map.insert("load_max_duration", o.load_max_duration.to_string());
    }
    if o.concurrency_schedule != LoadSchedule::Const {
        map.insert(
            "concurrency_schedule",
            o.concurrency_schedule.as_str().to_owned(),
        );
        map.insert("concurrency_start", o.concurrency_start.to_string());
        map.insert("concurrency_end", o.concurrency_end.to_string());
        map.insert("concurrency_step", o.concurrency_step.to_string());
        map.insert(
            "concurrency_step_duration",
            o.concurrency_step_duration.to_string(),
        );
        map.insert(
            "concurrency_max_duration",
            o.concurrency_max_duration.to_string(),
        );
    }
    map.iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A label value escaped as the text format wants: `\`, `"` and line feeds.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
