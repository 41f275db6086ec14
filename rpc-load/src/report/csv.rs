//! `-O csv`: ghz's per-call listing (`duration (ms),status,error`, one row per call, in
//! completion order); `-O csv-summary`: one header line and one line of figures, so that
//! the lines of several runs concatenate into one table (e.g. for a benchmark script).

use super::{Report, PERCENTILES, TAIL_PERCENTILES};

/// Writes a blank line, the header and one row per call into `out`, as ghz does.
pub(super) fn write_details(r: &Report, out: &mut impl std::io::Write) -> std::io::Result<()> {
    // ghz's template starts with a line break: a blank first line.
    out.write_all(b"\nduration (ms),status,error\n")?;
    for d in &r.details.calls {
        writeln!(
            out,
            "{:.2},{},{}",
            d.latency.as_secs_f64() * 1e3,
            crate::report::code_name(d.code),
            quote(d.error.as_deref().unwrap_or(""))
        )?;
    }
    Ok(())
}

pub(super) fn render(r: &Report) -> String {
    let mut header: Vec<String> = [
        "name",
        "transport",
        "call",
        "concurrency",
        "connections",
        "count",
        "ok",
        "errors",
        "total_ns",
        "rps",
        "average_ns",
        "fastest_ns",
        "slowest_ns",
    ]
    .map(String::from)
    .to_vec();
    let mut row: Vec<String> = vec![
        quote(r.name.as_deref().unwrap_or("")),
        quote(&r.transport),
        quote(&r.options.call),
        r.options.concurrency.to_string(),
        r.options.connections.to_string(),
        r.count.to_string(),
        r.ok.to_string(),
        r.errors.to_string(),
        r.total.to_string(),
        format!("{:.2}", r.rps),
        r.average.to_string(),
        r.fastest.to_string(),
        r.slowest.to_string(),
    ];
    let percentiles = PERCENTILES
        .iter()
        .map(|&p| f64::from(p))
        .chain(TAIL_PERCENTILES);
    for p in percentiles {
        header.push(format!("p{}_ns", p.to_string().replace('.', "_")));
        row.push(
            r.latency_at(p)
                .map_or_else(String::new, |ns| ns.to_string()),
        );
    }
    header.push("client_cpu_s".to_owned());
    row.push(format!("{:.3}", r.client_cpu.total_seconds()));
    format!("{}\n{}\n", header.join(","), row.join(","))
}

/// A CSV field, quoted when it holds a separator, a quote or a line break.
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}
