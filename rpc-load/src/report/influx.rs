//! `-O influx-summary` and `-O influx-details`: InfluxDB line protocol, line for line
//! as ghz writes it (its `printer/influx.go`): measurement `ghz_run` (one line, no line
//! break after it) or `ghz_detail` (one line per call), the run's options as tags, the
//! figures as fields, and a timestamp in ns.

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use super::{gofmt, Report};
use crate::cli::LoadSchedule;
use crate::stats::code_name;

pub(super) fn summary(r: &Report) -> String {
    let errors: u64 = r.error_distribution.values().sum();
    let mut tags = tags(r);
    let _ = write!(tags, ",errors={errors},has_errors={}", errors > 0);
    let mut fields = format!(
        "count={},total={},average={},fastest={},slowest={},rps={:.2}",
        r.count, r.total, r.average, r.fastest, r.slowest, r.rps
    );
    for point in &r.latency_distribution {
        match point.percentage {
            50 => {
                let _ = write!(fields, ",median={}", point.latency);
            }
            95 => {
                let _ = write!(fields, ",p95={}", point.latency);
            }
            _ => {}
        }
    }
    let _ = write!(fields, ",errors={errors}");
    format!("ghz_run,{tags} {fields} {}", unix_nanos(r.date_time))
}

/// Writes one line per call into `out`, the tags rendered once.
pub(super) fn write_details(r: &Report, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let tags = tags(r);
    for detail in &r.details.calls {
        let error = detail.error.as_deref().unwrap_or("");
        writeln!(
            out,
            "ghz_detail,{tags},hasError={} latency={},error=\"{}\",status=\"{}\" {}",
            !error.is_empty(),
            detail.latency.as_nanos(),
            clean(error),
            code_name(detail.code),
            unix_nanos(r.details.timestamp(detail)),
        )?;
    }
    Ok(())
}

/// The tags common to both measurements.
fn tags(r: &Report) -> String {
    let o = &r.options;
    let mut s = Vec::new();
    if let Some(name) = r.name.as_deref().filter(|n| !n.trim().is_empty()) {
        s.push(format!("name=\"{}\"", clean(name.trim())));
    }
    if !o.proto.is_empty() {
        s.push(format!("proto=\"{}\"", o.proto));
    } else if !o.protoset.is_empty() {
        s.push(format!("Protoset=\"{}\"", o.protoset));
    }
    s.push(format!("call=\"{}\"", o.call));
    s.push(format!("host=\"{}\"", o.host));
    s.push(format!("n={}", o.total.unwrap_or(0)));
    let go = |ns: u64| gofmt::duration(Duration::from_nanos(ns));
    if o.concurrency_schedule == LoadSchedule::Const {
        s.push(format!("c={}", o.concurrency));
    } else {
        s.push(format!(
            "concurrency-schedule={}",
            o.concurrency_schedule.as_str()
        ));
        s.push(format!("concurrency-start={}", o.concurrency_start));
        s.push(format!("concurrency-end={}", o.concurrency_end));
        s.push(format!("concurrency-step={}", o.concurrency_step));
        s.push(format!(
            "concurrency-step-duration={}",
            go(o.concurrency_step_duration)
        ));
        s.push(format!(
            "concurrency-max-duration={}",
            go(o.concurrency_max_duration)
        ));
    }
    if o.load_schedule == LoadSchedule::Const {
        s.push(format!("rps={}", o.rps));
    } else {
        s.push(format!("load-schedule={}", o.load_schedule.as_str()));
        s.push(format!("load-start={}", o.load_start));
        s.push(format!("load-end={}", o.load_end));
        s.push(format!("load-step={}", o.load_step));
        s.push(format!("load-step-duration={}", go(o.load_step_duration)));
        s.push(format!("load-max-duration={}", go(o.load_max_duration)));
    }
    let seconds = |ns: u64| gofmt::float(ns as f64 / 1e9);
    s.push(format!("z={}", o.duration));
    s.push(format!("timeout={}", seconds(o.timeout)));
    s.push(format!("dial_timeout={}", seconds(o.dial_timeout)));
    s.push(format!("keepalive={}", seconds(o.keepalive)));
    // Values are JSON, then that JSON as a JSON string, as ghz double-encodes them.
    let twice = |json: String| clean(&gofmt::json(&json));
    s.push(format!("data={}", twice(gofmt::json(&o.data))));
    let metadata = match o.metadata.is_empty() {
        true => "\"\"".to_owned(),
        false => twice(gofmt::json(&o.metadata)),
    };
    s.push(format!("metadata={metadata}"));
    let tags = match r.tags.is_empty() {
        true => "\"\"".to_owned(),
        false => twice(gofmt::json(&r.tags)),
    };
    s.push(format!("tags={tags}"));
    s.join(",")
}

/// ghz's `cleanInfluxString`: spaces, commas and equals signs escaped.
fn clean(text: &str) -> String {
    text.replace(' ', "\\ ")
        .replace(',', "\\,")
        .replace('=', "\\=")
}

fn unix_nanos(time: std::time::SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}
