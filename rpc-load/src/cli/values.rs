//! Parsers of flag values as ghz (Go) reads them: durations (`time.ParseDuration`),
//! booleans (`strconv.ParseBool`) and byte sizes (go-humanize's `ParseBytes`).

use std::time::Duration;

/// Parses a duration as Go's `time.ParseDuration` does: one or more number-and-unit
/// pairs (`500ms`, `1.5s`, `1m30s`, `2h45m`; units `ns`, `us`, `µs`, `ms`, `s`, `m`,
/// `h`). Also a bare number, taken as seconds (`20`), which Go refuses but earlier
/// rpc-load versions took.
///
/// ```
/// use std::time::Duration;
/// use rdmarpc_load::cli::parse_duration;
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
/// assert!(parse_duration("fast").is_err());
/// assert!(parse_duration("-1s").is_err());
/// assert!(parse_duration("2562048h").is_err());
/// ```
///
/// # Errors
/// A string of another form, a negative duration, or one over Go's largest (2^63 - 1
/// ns, about 292 years), as `time.ParseDuration` refuses it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a duration like 500ms, 10s, 1m30s or 2h");
    if text.starts_with('-') {
        return Err(format!("{text:?}: a duration cannot be negative"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(bad());
    }
    let mut seconds = 0.0;
    let mut pairs = 0;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        seconds += match unit {
            "" if pairs == 0 && after.is_empty() => value,
            "s" => value,
            "ms" => value / 1e3,
            "us" | "µs" | "μs" => value / 1e6,
            "ns" => value / 1e9,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            "" => return Err(bad()),
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {text:?} (ns, us, ms, s, m, h)"
                ))
            }
        };
        pairs += 1;
        rest = after;
    }
    let duration = Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))?;
    if duration > MAX_DURATION {
        return Err(format!(
            "{text:?} is over the largest duration, 2562047h47m16.854775807s"
        ));
    }
    Ok(duration)
}

/// Go's largest duration: 2^63 - 1 ns.
const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Parses a boolean as Go's `strconv.ParseBool` does: `1`, `t`, `T`, `TRUE`, `true`,
/// `True`, `0`, `f`, `F`, `FALSE`, `false`, `False` (what kingpin accepts in
/// `--insecure=false`).
///
/// # Errors
/// Any other text.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("{other:?} is not a boolean (true or false)")),
    }
}

/// Parses a byte size as go-humanize's `ParseBytes` (which ghz uses for
/// `--max-recv-message-size`): a number (decimals and thousands commas allowed), then
/// optionally spaces and a unit, any case: `b`, SI `kb`/`k`, `mb`/`m`, `gb`/`g`, `tb`,
/// `pb`, `eb` (powers of 1000) or IEC `kib`/`ki`, `mib`/`mi`, `gib`/`gi`, `tib`, `pib`,
/// `eib` (powers of 1024).
///
/// ```
/// use rdmarpc_load::cli::parse_bytes;
/// assert_eq!(parse_bytes("4MB"), Ok(4_000_000));
/// assert_eq!(parse_bytes("42 MiB"), Ok(42 << 20));
/// assert_eq!(parse_bytes("1,024"), Ok(1024));
/// assert_eq!(parse_bytes("1.5kib"), Ok(1536));
/// assert!(parse_bytes("1024nb").is_err());
/// ```
///
/// # Errors
/// Not a number, an unknown unit, or a size past `u64`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let digits = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(text.len());
    let number: f64 = text[..digits]
        .replace(',', "")
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 4MB, 512KiB or 1048576"))?;
    let unit = text[digits..].trim().to_ascii_lowercase();
    let power = |base: f64, exp: i32| base.powi(exp);
    let factor = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => power(1000.0, 1),
        "m" | "mb" => power(1000.0, 2),
        "g" | "gb" => power(1000.0, 3),
        "t" | "tb" => power(1000.0, 4),
        "p" | "pb" => power(1000.0, 5),
        "e" | "eb" => power(1000.0, 6),
        "ki" | "kib" => power(1024.0, 1),
        "mi" | "mib" => power(1024.0, 2),
        "gi" | "gib" => power(1024.0, 3),
        "ti" | "tib" => power(1024.0, 4),
        "pi" | "pib" => power(1024.0, 5),
        "ei" | "eib" => power(1024.0, 6),
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    let bytes = number * factor;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("{text:?} is too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("300ms"), Ok(ms(300)));
        assert_eq!(parse_duration("2h45m"), Ok(Duration::from_secs(9900)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1µs"), Ok(Duration::from_micros(1)));
        for bad in ["", "s", "1x", "1s5", "ms", "1..5s", "-5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // Go's bounds: 2^63 - 1 ns and no more.
        assert_eq!(
            parse_duration("2562047h"),
            Ok(Duration::from_secs(2_562_047 * 3600))
        );
        for over in ["2562048h", "2562047788015216h", "9223372037s"] {
            let e = parse_duration(over).unwrap_err();
            assert!(e.contains("largest duration"), "{e}");
        }
        assert!(parse_duration("99999999999999999999999h").is_err());
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse_bool("True"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("yes").is_err());
    }

    #[test]
    fn humanize_sizes() {
        assert_eq!(parse_bytes("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("1gib"), Ok(1 << 30));
        assert_eq!(parse_bytes("2000mib"), Ok(2000 << 20));
        assert_eq!(parse_bytes("42"), Ok(42));
        assert_eq!(parse_bytes("5 k"), Ok(5000));
        for bad in ["", "MB", "1024nb", "2000nib", "99999999999eb"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
