//! gRPC's header texts: `grpc-timeout`, the percent-encoded `grpc-message`, metadata.

use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use rdmarpc_core::Metadata;

/// A `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m, u, n).
pub(crate) fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit[0] {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `grpc-message`: bytes outside printable ASCII, and `%`, as `%XX`.
pub(crate) fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `grpc-message` as sent: `%XX` decoded, invalid UTF-8 replaced (a malformed escape
/// stays as it is, as the spec asks).
pub(crate) fn percent_decode(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            value[i],
            value.get(i + 1).copied().and_then(hex),
            value.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Request headers that are HTTP/2's or gRPC's own, not the application's metadata.
fn reserved(name: &str) -> bool {
    matches!(
        name,
        "content-type"
            | "te"
            | "grpc-timeout"
            | "grpc-encoding"
            | "grpc-accept-encoding"
            | "content-length"
            | "connection"
            | "host"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The application's metadata among request headers (values that are not text are
/// skipped; `-bin` values stay base64 text, as this framework's metadata carries them).
pub(crate) fn metadata_from(headers: &HeaderMap) -> Metadata {
    let mut metadata = Metadata::new();
    for (name, value) in headers {
        let name = name.as_str();
        if reserved(name) || name.starts_with("grpc-") && !name.ends_with("-bin") {
            continue;
        }
        if let Ok(value) = value.to_str() {
            metadata.append(name, value);
        }
    }
    metadata
}

/// Appends `metadata` to response headers or trailers (entries that are not valid
/// HTTP header names or values are skipped).
pub(crate) fn append_metadata(headers: &mut HeaderMap, metadata: &Metadata) {
    for (name, value) in metadata.iter() {
        // HTTP/2's and gRPC's own names: never the application's to send.
        if reserved(name) || name.starts_with("grpc-") && !name.ends_with("-bin") {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_and_messages_follow_the_spec() {
        assert_eq!(parse_timeout(b"100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"m", b"123456789S", b"10x", b"-1S", b"1.5S"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
        assert_eq!(percent_encode("ok 100%"), "ok 100%25");
        assert_eq!(percent_encode("\t\n\u{1}"), "%09%0A%01");
        assert_eq!(percent_encode("é"), "%C3%A9");
        for message in ["ok 100%", "\t\n\u{1}", "é ✓", ""] {
            assert_eq!(percent_decode(percent_encode(message).as_bytes()), message);
        }
        assert_eq!(percent_decode(b"50%zz%4"), "50%zz%4");
    }

    #[test]
    fn reserved_headers_are_not_metadata() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", "1S"),
            ("grpc-accept-encoding", "gzip"),
            ("user-agent", "grpc-go/1.0"),
            ("x-token", "abc"),
            ("x-trace-bin", "AAEC"),
        ] {
            headers.append(k, HeaderValue::from_static(v));
        }
        let m = metadata_from(&headers);
        let keys: Vec<_> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["user-agent", "x-token", "x-trace-bin"]);
    }
}
