//! `-O html`: one self-contained page (inline CSS and SVG, no script, nothing fetched)
//! with the figures, the latency histogram, and latency and throughput over time.

use std::fmt::Write;

use super::svg::{bar_chart, escape, line_chart, log_line_chart, Series};
use super::{format_ns, Report};

pub(super) fn render(r: &Report) -> String {
    let mut page = String::new();
    // Writing to a String cannot fail.
    let _ = write_page(&mut page, r);
    page
}

fn write_page(out: &mut String, r: &Report) -> std::fmt::Result {
    head(out, r)?;
    summary(out, r)?;
    latency_table(out, r)?;
    histogram(out, r)?;
    timelines(out, r)?;
    statuses(out, r)?;
    run_table(out, r)
}

/// The page's head and title line.
fn head(out: &mut String, r: &Report) -> std::fmt::Result {
    let title = format!(
        "rpc-load: {} on {}",
        r.options.call,
        r.name.as_deref().unwrap_or(&r.options.host)
    );
    write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{t}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; max-width: 820px; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 10px; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
h2 {{ margin-top: 1.5em; border-bottom: 1px solid #ccc; }}
</style></head><body>
<h1>{t}</h1>
<p>{date} &middot; end reason: {end} &middot; transport: <b>{transport}</b></p>
"#,
        t = escape(&title),
        date = escape(&r.date),
        end = r.end_reason,
        transport = escape(&r.transport),
    )?;
    Ok(())
}

/// The summary table.
fn summary(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "<h2>Summary</h2><table>")?;
    let rows = [
        ("Count", r.count.to_string()),
        ("Successful", r.ok.to_string()),
        ("Errors", r.errors.to_string()),
        ("Total", format_ns(r.total)),
        ("Requests/sec", format!("{:.2}", r.rps)),
        ("Average", format_ns(r.average)),
        ("Fastest", format_ns(r.fastest)),
        ("Slowest", format_ns(r.slowest)),
    ];
    for (k, v) in rows {
        writeln!(
            out,
            r#"<tr><th>{k}</th><td class="n">{}</td></tr>"#,
            escape(&v)
        )?;
    }
    writeln!(out, "</table>")?;
    Ok(())
}

/// The latency distribution's percentiles.
fn latency_table(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(
        out,
        "<h2>Latency distribution</h2><table><tr><th>percentile</th><th>latency</th></tr>"
    )?;
    let tail = r
        .tail_latency_distribution
        .iter()
        .map(|p| (p.percentage, p.latency));
    let points = r
        .latency_distribution
        .iter()
        .map(|p| (f64::from(p.percentage), p.latency))
        .chain(tail);
    for (p, latency) in points {
        writeln!(
            out,
            r#"<tr><td>p{p}</td><td class="n">{}</td></tr>"#,
            format_ns(latency)
        )?;
    }
    writeln!(out, "</table>")?;
    Ok(())
}

/// The latency histogram, if there is one.
fn histogram(out: &mut String, r: &Report) -> std::fmt::Result {
    if !r.fine_histogram.is_empty() {
        writeln!(
            out,
            "<h2>Latency histogram</h2><p>Logarithmic buckets from the fastest to the \
             slowest call: each bucket's bound is a constant factor above the previous one.</p>"
        )?;
        let bars: Vec<(String, f64)> = r
            .fine_histogram
            .iter()
            .map(|b| (format_ns((b.mark * 1e9).round() as u64), b.count as f64))
            .collect();
        writeln!(
            out,
            "{}",
            bar_chart(&bars, "latency (upper bound of bucket)", "calls")
        )?;
    }
    Ok(())
}

/// Latency and throughput over time, if the run kept a timeline.
fn timelines(out: &mut String, r: &Report) -> std::fmt::Result {
    if !r.timeline.is_empty() {
        let at = |start: u64| start as f64 / 1e9;
        writeln!(
            out,
            "<h2>Latency over time</h2><p>Median and 99th percentile of the calls completed \
             in each interval, on a logarithmic scale.</p>"
        )?;
        // Intervals without calls have no percentiles: left out, not drawn as zero.
        let series = |name, color, pick: fn(&super::TimelinePoint) -> u64| Series {
            name,
            color,
            points: r
                .timeline
                .iter()
                .filter(|p| pick(p) > 0)
                .map(|p| (at(p.start), pick(p) as f64))
                .collect(),
        };
        let p50 = series("p50", "#4e79a7", |p| p.p50);
        let p99 = series("p99", "#e15759", |p| p.p99);
        let ns = |v: f64| format_ns(v as u64);
        writeln!(
            out,
            "{}",
            log_line_chart(&[p50, p99], "time (s)", "latency (log scale)", &ns)
        )?;

        writeln!(out, "<h2>Throughput over time</h2>")?;
        let rps = Series {
            name: "completed calls/s",
            color: "#59a14f",
            points: r.timeline.iter().map(|p| (at(p.start), p.rps)).collect(),
        };
        let width = (r.timeline_interval as f64 / 1e9).max(1e-3);
        let errors = Series {
            name: "errors/s",
            color: "#e15759",
            points: r
                .timeline
                .iter()
                .map(|p| (at(p.start), p.errors as f64 / width))
                .collect(),
        };
        let plain = |v: f64| format!("{v}");
        writeln!(
            out,
            "{}",
            line_chart(&[rps, errors], "time (s)", "calls/s", &plain)
        )?;
    }
    Ok(())
}

/// Status codes, and errors if there were any.
fn statuses(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "<h2>Status codes</h2><table>")?;
    for (code, n) in &r.status_code_distribution {
        writeln!(
            out,
            r#"<tr><td>{}</td><td class="n">{n}</td></tr>"#,
            escape(code)
        )?;
    }
    writeln!(out, "</table>")?;
    if !r.error_distribution.is_empty() {
        writeln!(out, "<h2>Errors</h2><table>")?;
        for (error, n) in &r.error_distribution {
            writeln!(
                out,
                r#"<tr><td class="n">{n}</td><td>{}</td></tr>"#,
                escape(error)
            )?;
        }
        writeln!(out, "</table>")?;
    }
    Ok(())
}

/// How the run was made; the end of the page.
fn run_table(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "<h2>Run</h2><table>")?;
    let o = &r.options;
    let rows = [
        ("address", o.host.clone()),
        ("proto", o.proto.clone()),
        ("concurrency", o.concurrency.to_string()),
        ("connections", o.connections.to_string()),
        ("rate limit (rps)", o.rps.to_string()),
        (
            "load schedule",
            format!("{:?}", o.load_schedule).to_lowercase(),
        ),
        ("warm-up calls", r.warmup.calls.to_string()),
        (
            "machine",
            format!("{} ({} cores)", r.machine.cpu_model, r.machine.cores),
        ),
        (
            "client CPU",
            format!("{:.2} s", r.client_cpu.total_seconds()),
        ),
    ];
    for (k, v) in rows {
        writeln!(out, "<tr><th>{k}</th><td>{}</td></tr>", escape(&v))?;
    }
    writeln!(out, "</table></body></html>")
}
