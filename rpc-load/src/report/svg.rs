//! Minimal inline SVG charts for the HTML report: no script, no network fetch.

use std::fmt::Write;

/// Size of a chart's drawing, in SVG units (pixels at 100 % zoom).
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 260.0;
/// Margins around the plot area: left (y labels), right, top, bottom (x labels).
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 45.0;

/// One line of a line chart.
pub(super) struct Series<'a> {
    pub(super) name: &'a str,
    pub(super) color: &'a str,
    pub(super) points: Vec<(f64, f64)>,
}

/// A bar chart of `bars` (x label, value), labelling about eight of the bars.
pub(super) fn bar_chart(bars: &[(String, f64)], x_title: &str, y_title: &str) -> String {
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let (y_ticks, y_max) = ticks(max);
    let mut svg = open(x_title, y_title);
    let plot_h = HEIGHT - TOP - BOTTOM;
    axes(
        &mut svg,
        &y_ticks,
        &|v| HEIGHT - BOTTOM - v / y_max * plot_h,
        &|v| format!("{v}"),
    );
    let plot_w = WIDTH - LEFT - RIGHT;
    let slot = plot_w / bars.len().max(1) as f64;
    let label_every = (bars.len() / 8).max(1);
    for (i, (label, value)) in bars.iter().enumerate() {
        let h = value / y_max * (HEIGHT - TOP - BOTTOM);
        let x = LEFT + slot * i as f64;
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4e79a7"><title>{} : {}</title></rect>"##,
            x + 1.0,
            HEIGHT - BOTTOM - h,
            (slot - 2.0).max(1.0),
            h,
            escape(label),
            value
        );
        if i % label_every == 0 {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"#,
                x + slot / 2.0,
                HEIGHT - BOTTOM + 14.0,
                escape(label)
            );
        }
    }
    svg + "</svg>"
}

/// A line chart of `series` over a shared x axis (seconds), y ticks labelled by
/// `y_format`.
pub(super) fn line_chart(
    series: &[Series<'_>],
    x_title: &str,
    y_title: &str,
    y_format: &dyn Fn(f64) -> String,
) -> String {
    chart(series, x_title, y_title, y_format, false)
}

/// [`line_chart`] with a logarithmic y axis (values must be positive): lines that differ
/// by orders of magnitude (a median and a 99th percentile) both stay readable.
pub(super) fn log_line_chart(
    series: &[Series<'_>],
    x_title: &str,
    y_title: &str,
    y_format: &dyn Fn(f64) -> String,
) -> String {
    chart(series, x_title, y_title, y_format, true)
}

fn chart(
    series: &[Series<'_>],
    x_title: &str,
    y_title: &str,
    y_format: &dyn Fn(f64) -> String,
    log_y: bool,
) -> String {
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let plot_w = WIDTH - LEFT - RIGHT;
    let (y_ticks, to_y) = y_scale(series, log_y);
    let (x_ticks, x_max) = ticks(x_max);
    let mut svg = open(x_title, y_title);
    axes(&mut svg, &y_ticks, &*to_y, y_format);
    for t in &x_ticks {
        let x = LEFT + t / x_max * plot_w;
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{t}</text>"#,
            HEIGHT - BOTTOM + 14.0
        );
    }
    for (n, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", LEFT + x / x_max * plot_w, to_y(*y)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            s.color,
            points.join(" ")
        );
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" fill="{}">{}</text>"#,
            LEFT + 10.0 + 150.0 * n as f64,
            TOP + 12.0,
            s.color,
            escape(s.name)
        );
    }
    svg + "</svg>"
}

/// The y axis' ticks and the map from a value to its y coordinate: logarithmic (1, 2 and 5
/// per decade when there are few decades) when `log_y` and some value is positive.
fn y_scale(series: &[Series<'_>], log_y: bool) -> (Vec<f64>, Box<dyn Fn(f64) -> f64>) {
    let y_max_data = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y_min_data = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    if log_y && y_min_data.is_finite() {
        let lo = y_min_data.log10().floor();
        let hi = y_max_data.log10().ceil().max(lo + 1.0);
        let ticks = (lo as i32..=hi as i32)
            .flat_map(|e| {
                let p = 10f64.powi(e);
                // 1, 2 and 5 per decade when there are few decades.
                if hi - lo <= 3.0 {
                    vec![p, 2.0 * p, 5.0 * p]
                } else {
                    vec![p]
                }
            })
            .filter(|t| t.log10() <= hi + 1e-9)
            .collect();
        let to_y = move |v: f64| {
            let v = v.max(10f64.powf(lo));
            HEIGHT - BOTTOM - (v.log10() - lo) / (hi - lo) * plot_h
        };
        (ticks, Box::new(to_y))
    } else {
        let (ticks, y_max) = ticks(y_max_data);
        (
            ticks,
            Box::new(move |v: f64| HEIGHT - BOTTOM - v / y_max * plot_h),
        )
    }
}

fn open(x_title: &str, y_title: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif"><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text><text x="12" y="{:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 12 {:.1})">{}</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        HEIGHT - 8.0,
        escape(x_title),
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        escape(y_title)
    )
}

fn axes(
    svg: &mut String,
    y_ticks: &[f64],
    to_y: &dyn Fn(f64) -> f64,
    y_format: &dyn Fn(f64) -> String,
) {
    for t in y_ticks {
        let y = to_y(*t);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 3.0,
            escape(&y_format(*t))
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT,
        HEIGHT - BOTTOM,
        HEIGHT - BOTTOM
    );
}

/// Round tick values from 0 covering `max` (steps of 1, 2 or 5 times a power of ten),
/// and the axis maximum (the last tick).
fn ticks(max: f64) -> (Vec<f64>, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (vec![0.0, 1.0], 1.0);
    }
    let rough = max / 5.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    let count = (max / step).ceil() as usize;
    let ticks: Vec<f64> = (0..=count).map(|i| round(i as f64 * step)).collect();
    let top = *ticks.last().unwrap_or(&1.0);
    (ticks, top.max(f64::MIN_POSITIVE))
}

/// `v` without floating-point noise in its printed form (0.30000000000000004 -> 0.3).
fn round(v: f64) -> f64 {
    (v * 1e9).round() / 1e9
}

/// Escapes text for HTML and SVG.
pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
