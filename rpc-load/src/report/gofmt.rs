//! Numbers and durations written as Go writes them, for the formats whose text ghz's Go
//! code defines (InfluxDB lines, Prometheus text): `strconv.FormatFloat(f, 'g', -1, 64)`
//! (also `fmt`'s `%v`), and `time.Duration.String`.

use std::time::Duration;

/// `f` as Go's `%v` (and `strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits
/// that read back as `f`, in exponent form when the exponent is below -4 or 6 and over
/// (`2e+09`, `1.5e+07`, `2000`, `0.25`, `1e-05`).
pub(super) fn float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} always writes an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} writes an integer exponent");
    if (-4..6).contains(&exponent) {
        return format!("{f}");
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// `d` as Go's `time.Duration.String`: `0s`, `100ns`, `1.5µs`, `250ms`, `5s`, `1m30s`,
/// `1h0m0.5s`.
pub(super) fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000_000_000 {
        let (unit, per) = match ns {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", fraction(ns, per));
    }
    let seconds = ns / 1_000_000_000;
    let (hours, minutes) = (seconds / 3600, seconds % 3600 / 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&fraction(ns % 60_000_000_000, 1_000_000_000));
    out.push('s');
    out
}

/// `value / per` with its decimals, trailing zeros trimmed.
fn fraction(value: u128, per: u128) -> String {
    let (whole, rest) = (value / per, value % per);
    if rest == 0 {
        return whole.to_string();
    }
    let width = per.ilog10() as usize;
    let decimals = format!("{rest:0width$}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

/// `value` as Go's `json.Marshal` writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped
/// as `\u003c` ... (so that ghz's double-encoded influx tags come out the same).
pub(super) fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|_| "null".into())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_go_prints_them() {
        let cases = [
            (2e9, "2e+09"),
            (1e7, "1e+07"),
            (1.5e7, "1.5e+07"),
            (2000.0, "2000"),
            (200.0, "200"),
            (999_999.0, "999999"),
            (1e6, "1e+06"),
            (0.01, "0.01"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (20.0, "20"),
            (0.5, "0.5"),
            (123_456_789.0, "1.23456789e+08"),
            (0.0, "0"),
        ];
        for (f, text) in cases {
            assert_eq!(float(f), text, "{f}");
        }
    }

    #[test]
    fn durations_as_go_prints_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(100), "100ns"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_millis(3_600_500), "1h0m0.5s"),
        ];
        for (d, text) in cases {
            assert_eq!(duration(d), text, "{d:?}");
        }
    }

    #[test]
    fn json_escapes_as_go() {
        assert_eq!(json(&"a<b>&c"), r#""a\u003cb\u003e\u0026c""#);
    }
}
