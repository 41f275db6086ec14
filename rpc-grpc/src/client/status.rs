//! gRPC statuses from HTTP/2: response headers and trailers, HTTP statuses, stream
//! resets; and the framework's status frames, timeouts and metadata limits.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use rdmarpc_core::wire::{Flags, FrameKind, Header};
use rdmarpc_core::{Code, Metadata, Status, MAX_METADATA_LEN};

use crate::frames::frame;
use crate::text;

/// Fails the call, not the connection, when `metadata` cannot be a frame's metadata
/// block: HTTP/2 takes header lists up to the metadata limit plus 16 KiB (a server's
/// pseudo-headers and gRPC's own), and a block over the limit would be a frame the
/// channel treats as malformed, failing every call on the connection.
pub(super) fn within_limit(metadata: &Metadata, what: &str) -> Result<(), (Status, Flags)> {
    let len = metadata.encoded_len();
    if len > MAX_METADATA_LEN {
        return Err((
            Status::resource_exhausted(format!(
                "{what} of {len} bytes exceed the metadata limit of {MAX_METADATA_LEN}"
            )),
            Flags::default(),
        ));
    }
    Ok(())
}

/// A failed `Response` frame with `status` (its message as payload).
pub(super) fn status_frame(
    call_id: u64,
    status: &Status,
    flags: Flags,
    metadata: &Metadata,
) -> Bytes {
    let mut header = Header::new(FrameKind::Response, call_id);
    header.flags = Flags::END_STREAM | flags;
    header.status = status.code() as u8;
    frame(header, metadata, status.message().as_bytes())
}

/// A `grpc-timeout` value for `timeout` (at most 8 digits, the finest unit that fits).
pub(super) fn format_timeout(timeout: Duration) -> String {
    let micros = timeout.as_micros();
    if micros < 100_000_000 {
        return format!("{}u", micros.max(1));
    }
    let millis = timeout.as_millis();
    if millis < 100_000_000 {
        return format!("{millis}m");
    }
    format!("{}S", timeout.as_secs().min(99_999_999))
}

/// The gRPC status of an HTTP response that is not gRPC (gRPC's HTTP-to-gRPC mapping).
pub(super) fn http_status(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("HTTP status {status} from a gRPC server"))
}

/// The status a reset stream (or a failed connection) ends a call with.
pub(super) fn reset_status(e: &h2::Error) -> (Status, Flags) {
    match e.reason() {
        Some(h2::Reason::REFUSED_STREAM) => (
            Status::unavailable("the server refused the stream (REFUSED_STREAM)"),
            Flags::REFUSED,
        ),
        Some(h2::Reason::CANCEL) => (
            Status::cancelled("the server cancelled the call"),
            Flags::default(),
        ),
        Some(h2::Reason::ENHANCE_YOUR_CALM) => (
            Status::resource_exhausted("the server asked to slow down (ENHANCE_YOUR_CALM)"),
            Flags::default(),
        ),
        Some(h2::Reason::INADEQUATE_SECURITY) => (
            Status::new(Code::PermissionDenied, "HTTP/2: inadequate security"),
            Flags::default(),
        ),
        _ if e.is_go_away() || e.is_io() => (
            Status::unavailable(format!("connection: {e}")),
            Flags::default(),
        ),
        _ => (Status::internal(format!("HTTP/2: {e}")), Flags::default()),
    }
}

/// `grpc-status`, `grpc-message` and the application's metadata of a response's headers
/// or trailers.
pub(super) fn status_of(headers: &HeaderMap) -> Option<Status> {
    let code = headers.get("grpc-status")?;
    let code = code
        .to_str()
        .ok()
        .and_then(|c| c.parse::<u8>().ok())
        .map_or(Code::Unknown, Code::from_u8);
    let message = headers
        .get("grpc-message")
        .map(|m| text::percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Status::new(code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_written_in_eight_digits_at_most() {
        assert_eq!(format_timeout(Duration::from_millis(250)), "250000u");
        assert_eq!(format_timeout(Duration::from_secs(1000)), "1000000m");
        assert_eq!(format_timeout(Duration::from_secs(10_000_000)), "10000000S");
        assert_eq!(format_timeout(Duration::from_nanos(1)), "1u");
        for t in [
            Duration::from_micros(7),
            Duration::from_secs(100_000),
            Duration::from_secs(1 << 40),
        ] {
            let text = format_timeout(t);
            assert!(text.len() <= 9, "{text}");
            assert!(text::parse_timeout(text.as_bytes()).is_some(), "{text}");
        }
    }

    #[test]
    fn http_statuses_map_as_grpc_says() {
        assert_eq!(
            http_status(http::StatusCode::NOT_FOUND).code(),
            Code::Unimplemented
        );
        assert_eq!(
            http_status(http::StatusCode::SERVICE_UNAVAILABLE).code(),
            Code::Unavailable
        );
        assert_eq!(
            http_status(http::StatusCode::UNAUTHORIZED).code(),
            Code::Unauthenticated
        );
        assert_eq!(
            http_status(http::StatusCode::IM_A_TEAPOT).code(),
            Code::Unknown
        );
    }
}
