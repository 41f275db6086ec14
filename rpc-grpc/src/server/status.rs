//! gRPC statuses in HTTP/2: refusals before a call starts, and status headers.

use bytes::Bytes;
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use rdmarpc_core::{Code, Status};

use crate::text;

pub(super) fn stalled() -> Status {
    Status::cancelled("the request body stalled")
}

/// Answers a call the server never saw, with only trailers.
pub(super) fn refuse(respond: &mut SendResponse<Bytes>, status: &Status) {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    status_headers(headers, status.code(), status.message());
    text::append_metadata(headers, &status.to_metadata());
    let _ = respond.send_response(response, true);
}

pub(super) fn status_headers(headers: &mut HeaderMap, code: Code, message: &str) {
    headers.insert("grpc-status", HeaderValue::from(code as u8 as u32));
    if !message.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&text::percent_encode(message)) {
            headers.insert("grpc-message", value);
        }
    }
}
