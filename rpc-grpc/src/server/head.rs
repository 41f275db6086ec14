//! A gRPC request's HTTP/2 head, read and checked before its call starts. Sans-IO: the
//! head's parts in, the call's settings or the refusal to answer out.

use std::time::Duration;

use http::request::Parts;
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::{Metadata, MethodKinds, Status, MAX_METADATA_LEN};

use crate::compress::Encoding;
use crate::text;

/// What a request's head says, checked: its call may start.
#[derive(Debug)]
pub(super) struct RequestHead {
    /// How the client compressed its messages.
    pub(super) request_encoding: Option<Encoding>,
    /// How the responses are compressed: as configured, if the client reads that.
    pub(super) response_encoding: Option<Encoding>,
    /// `grpc-timeout`.
    pub(super) timeout: Option<Duration>,
    /// The custom metadata, within the limit.
    pub(super) metadata: Metadata,
    pub(super) method_id: u32,
    pub(super) kind: MethodKind,
}

/// Why a request is refused before its call starts.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Not gRPC (a content type other than `application/grpc[+...|;...]`, or not a
    /// POST): HTTP's answer, 415, as gRPC's spec asks.
    NotGrpc,
    /// A `grpc-encoding` this server does not read: `UNIMPLEMENTED`, with the encodings
    /// it accepts.
    Encoding(Status),
    /// Any other refusal: a status in a trailers-only response.
    Status(Status),
}

/// Reads the head of a request to this server, whose methods are `methods` (none yet:
/// every path is unknown) and which compresses responses with `send_compression`.
pub(super) fn read_head(
    parts: &Parts,
    send_compression: Option<Encoding>,
    methods: Option<&dyn MethodKinds>,
) -> Result<RequestHead, Refusal> {
    let grpc = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v == "application/grpc"
                || v.starts_with("application/grpc+")
                || v.starts_with("application/grpc;")
        });
    if !grpc || parts.method != http::Method::POST {
        return Err(Refusal::NotGrpc);
    }
    let request_encoding = Encoding::of_headers(&parts.headers)
        .map_err(|why| Refusal::Encoding(Status::unimplemented(why)))?;
    let response_encoding = send_compression.filter(|e| e.accepted_by(&parts.headers));
    let timeout = match parts.headers.get("grpc-timeout") {
        None => None,
        Some(value) => Some(
            text::parse_timeout(value.as_bytes())
                .ok_or_else(|| Refusal::Status(Status::internal("malformed grpc-timeout")))?,
        ),
    };
    let metadata = text::metadata_from(&parts.headers);
    if metadata.check().is_err() || metadata.encoded_len() > MAX_METADATA_LEN {
        let status = Status::resource_exhausted("request metadata over the limit");
        return Err(Refusal::Status(status));
    }
    let path = parts.uri.path();
    // By the full path: a path whose hash collides with a method's id is not that method.
    let Some((method_id, kind)) = methods.and_then(|m| m.method(path)) else {
        let status = Status::unimplemented(format!("unknown method {path}"));
        return Err(Refusal::Status(status));
    };
    Ok(RequestHead {
        request_encoding,
        response_encoding,
        timeout,
        metadata,
        method_id,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmarpc_core::Code;

    /// Serves `/echo.Echo/Echo` (unary, id 7) only.
    struct Echo;

    impl MethodKinds for Echo {
        fn kind(&self, method_id: u32) -> Option<MethodKind> {
            (method_id == 7).then_some(MethodKind::Unary)
        }

        fn method(&self, path: &str) -> Option<(u32, MethodKind)> {
            (path == "/echo.Echo/Echo").then_some((7, MethodKind::Unary))
        }
    }

    fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn read(parts: &Parts) -> Result<RequestHead, Refusal> {
        read_head(parts, Some(Encoding::Gzip), Some(&Echo))
    }

    fn status_code(refused: Result<RequestHead, Refusal>) -> Code {
        match refused {
            Err(Refusal::Status(status)) => status.code(),
            other => panic!("not a status: {other:?}"),
        }
    }

    #[test]
    fn a_grpc_post_to_a_served_path_starts_its_call() {
        let parts = head(
            "POST",
            "/echo.Echo/Echo",
            &[
                ("content-type", "application/grpc+proto"),
                ("grpc-timeout", "250m"),
                ("grpc-encoding", "gzip"),
                ("grpc-accept-encoding", "identity, gzip"),
                ("x-user", "alice"),
            ],
        );
        let head = read(&parts).expect("starts");
        assert_eq!((head.method_id, head.kind), (7, MethodKind::Unary));
        assert_eq!(head.timeout, Some(Duration::from_millis(250)));
        assert_eq!(head.request_encoding, Some(Encoding::Gzip));
        assert_eq!(head.response_encoding, Some(Encoding::Gzip));
        assert_eq!(head.metadata.get("x-user"), Some("alice"));
    }

    #[test]
    fn responses_are_compressed_only_for_a_client_that_reads_it() {
        let parts = head(
            "POST",
            "/echo.Echo/Echo",
            &[("content-type", "application/grpc")],
        );
        let head = read(&parts).expect("starts");
        assert_eq!(head.response_encoding, None);
        assert_eq!(head.request_encoding, None);
        assert_eq!(head.timeout, None);
    }

    #[test]
    fn what_is_not_grpc_gets_http_415() {
        for (method, content_type) in [
            ("POST", "application/json"),
            ("POST", "application/grpcx"),
            ("GET", "application/grpc"),
        ] {
            let parts = head(method, "/echo.Echo/Echo", &[("content-type", content_type)]);
            assert!(
                matches!(read(&parts), Err(Refusal::NotGrpc)),
                "{method} {content_type}"
            );
        }
        let parts = head("POST", "/echo.Echo/Echo", &[]);
        assert!(
            matches!(read(&parts), Err(Refusal::NotGrpc)),
            "no content type"
        );
    }

    #[test]
    fn an_unknown_encoding_is_unimplemented_with_the_accepted_ones() {
        let parts = head(
            "POST",
            "/echo.Echo/Echo",
            &[
                ("content-type", "application/grpc"),
                ("grpc-encoding", "br"),
            ],
        );
        match read(&parts) {
            Err(Refusal::Encoding(status)) => assert_eq!(status.code(), Code::Unimplemented),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_malformed_timeout_oversized_metadata_and_unknown_paths_are_refused() {
        let grpc = ("content-type", "application/grpc");
        let parts = head("POST", "/echo.Echo/Echo", &[grpc, ("grpc-timeout", "12x")]);
        assert_eq!(status_code(read(&parts)), Code::Internal);
        let big = "v".repeat(MAX_METADATA_LEN + 1);
        let parts = head("POST", "/echo.Echo/Echo", &[grpc, ("x-big", &big)]);
        assert_eq!(status_code(read(&parts)), Code::ResourceExhausted);
        let parts = head("POST", "/echo.Echo/Other", &[grpc]);
        assert_eq!(status_code(read(&parts)), Code::Unimplemented);
        // Before the server told its methods, every path is unknown.
        let parts = head("POST", "/echo.Echo/Echo", &[grpc]);
        assert_eq!(
            status_code(read_head(&parts, None, None)),
            Code::Unimplemented
        );
    }
}
