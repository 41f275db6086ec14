//! ghz's human-readable summary (`-O summary`).

use std::fmt::Write;

use super::Report;

/// Width of the longest histogram bar, in characters.
const BAR_WIDTH: u64 = 40;

pub(super) fn render(r: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_summary(&mut out, r);
    out
}

fn write_summary(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "Summary:")?;
    if let Some(name) = &r.name {
        writeln!(out, "  Name:\t\t{name}")?;
    }
    writeln!(out, "  Count:\t{}", r.count)?;
    writeln!(out, "  Total:\t{}", format_ns(r.total))?;
    writeln!(out, "  Slowest:\t{}", format_ns(r.slowest))?;
    writeln!(out, "  Fastest:\t{}", format_ns(r.fastest))?;
    writeln!(out, "  Average:\t{}", format_ns(r.average))?;
    writeln!(out, "  Requests/sec:\t{:.2}", r.rps)?;
    writeln!(out, "  Transport:\t{}", r.transport)?;
    if let Some(m) = &r.stream_messages {
        writeln!(
            out,
            "  Stream msgs:\t{} received ({:.2}/s), {} sent ({:.2}/s)",
            m.received, m.received_per_second, m.sent, m.sent_per_second
        )?;
    }
    writeln!(out, "  End reason:\t{}", r.end_reason)?;
    if r.warmup.calls > 0 {
        writeln!(
            out,
            "  Warm-up:\t{} calls ({} errors), not counted",
            r.warmup.calls, r.warmup.errors
        )?;
    }

    if !r.histogram.is_empty() {
        writeln!(out)?;
        writeln!(out, "Response time histogram:")?;
        let max = r
            .histogram
            .iter()
            .map(|b| b.count)
            .max()
            .unwrap_or(0)
            .max(1);
        for bucket in &r.histogram {
            let bar = "∎".repeat((bucket.count * BAR_WIDTH / max) as usize);
            let mark = format_ns((bucket.mark * 1e9).round() as u64);
            writeln!(out, "  {mark:>10} [{}]\t|{bar}", bucket.count)?;
        }
    }

    if !r.latency_distribution.is_empty() {
        writeln!(out)?;
        writeln!(out, "Latency distribution:")?;
        for p in &r.latency_distribution {
            writeln!(out, "  {} % in {} ", p.percentage, format_ns(p.latency))?;
        }
        for p in &r.tail_latency_distribution {
            writeln!(out, "  {} % in {} ", p.percentage, format_ns(p.latency))?;
        }
    }

    writeln!(out)?;
    writeln!(out, "Status code distribution:")?;
    for (code, n) in &r.status_code_distribution {
        writeln!(out, "  {:<20} {n} responses", format!("[{code}]"))?;
    }

    if !r.error_distribution.is_empty() {
        writeln!(out)?;
        writeln!(out, "Error distribution:")?;
        let mut errors: Vec<_> = r.error_distribution.iter().collect();
        errors.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        for (error, n) in errors {
            writeln!(out, "  {:<8} {error}", format!("[{n}]"))?;
        }
    }
    writeln!(out)
}

/// A duration in nanoseconds with a unit that keeps 3 to 5 significant digits:
/// `850 ns`, `31.25 µs`, `4.07 ms`, `2.50 s`.
///
/// ```
/// # use rdmarpc_load::report::format_ns;
/// assert_eq!(format_ns(31_250), "31.25 µs");
/// assert_eq!(format_ns(4_070_000), "4.07 ms");
/// ```
pub fn format_ns(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} µs", ns_f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", ns_f / 1e6)
    } else {
        format!("{:.2} s", ns_f / 1e9)
    }
}
