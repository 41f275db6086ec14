//! The gRPC interop test cases (grpc/grpc `doc/interop-test-descriptions.md`), written
//! once against [`Client`]: what each case asks of a client, in the cases' own plain
//! terms (sizes, statuses, echoed metadata). Two clients implement it: this framework's
//! generated client (`examples::interop`, on every transport) and tonic's
//! (`grpc-interop`, a standard gRPC implementation against this framework's server), so
//! that both check the same things.
//!
//! `run_case(&client, "large_unary")` runs one case; [`CASES`] lists them in the
//! specification's order.

use std::future::Future;
use std::time::Duration;

mod cases;
mod requests;

pub use cases::run_case;
pub use requests::{request_channel, Requests};

/// The cases [`run_case`] knows, in the specification's order.
pub const CASES: &[&str] = &[
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "status_code_and_message",
    "special_status_message",
    "custom_metadata",
    "unimplemented_method",
    "unimplemented_service",
    "cancel_after_begin",
    "cancel_after_first_response",
    "timeout_on_sleeping_server",
];

/// The gRPC status codes the cases look for.
pub mod code {
    /// `CANCELLED`.
    pub const CANCELLED: i32 = 1;
    /// `UNKNOWN`: what a server's echoed status code 2 is.
    pub const UNKNOWN: i32 = 2;
    /// `DEADLINE_EXCEEDED`.
    pub const DEADLINE_EXCEEDED: i32 = 4;
    /// `UNIMPLEMENTED`.
    pub const UNIMPLEMENTED: i32 = 12;
}

/// The value the `custom_metadata` case sends under `x-grpc-test-echo-initial`.
pub const ECHO_INITIAL_VALUE: &str = "test_initial_metadata_value";

/// The value the `custom_metadata` case sends under `x-grpc-test-echo-trailing-bin`.
pub const ECHO_TRAILING_VALUE: [u8; 3] = [0xab, 0xab, 0xab];

/// A call that failed: its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The gRPC status code.
    pub code: i32,
    /// The status message.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {} {:?}", self.code, self.message)
    }
}

/// A status the server is asked to answer with (`EchoStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoStatus {
    /// Its code.
    pub code: i32,
    /// Its message.
    pub message: String,
}

/// A `SimpleRequest` for `UnaryCall`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnaryRequest {
    /// Bytes of zeros the response's payload must have.
    pub response_size: i32,
    /// Bytes of zeros in the request's payload.
    pub payload: usize,
    /// The status to answer with instead.
    pub echo_status: Option<EchoStatus>,
    /// Send the echo metadata ([`ECHO_INITIAL_VALUE`], [`ECHO_TRAILING_VALUE`]).
    pub echo_metadata: bool,
}

/// A `StreamingOutputCallRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputRequest {
    /// The sizes of the responses it asks for, one response each.
    pub response_sizes: Vec<i32>,
    /// Bytes of zeros in the request's payload.
    pub payload: usize,
    /// The status to answer with instead.
    pub echo_status: Option<EchoStatus>,
}

/// How a `FullDuplexCall` starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DuplexCall {
    /// Requests sent before the call is opened.
    pub first: Vec<OutputRequest>,
    /// Half-close once they are sent (before the response headers are awaited).
    pub close: bool,
    /// Send the echo metadata.
    pub echo_metadata: bool,
    /// The call's timeout.
    pub timeout: Option<Duration>,
}

/// The echo metadata a response carried back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Echoed {
    /// `x-grpc-test-echo-initial` in the response headers.
    pub initial: Option<String>,
    /// `x-grpc-test-echo-trailing-bin` in the trailers, decoded.
    pub trailing: Option<Vec<u8>>,
}

/// A `UnaryCall`'s response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnaryResponse {
    /// Its payload's body.
    pub payload: Vec<u8>,
    /// The echo metadata it carried back.
    pub echoed: Echoed,
}

/// A `FullDuplexCall` in progress.
pub trait Duplex: Send {
    /// Sends one more request.
    fn send(&mut self, request: OutputRequest) -> impl Future<Output = Result<(), Failure>> + Send;
    /// Half-closes the request stream.
    fn close(&mut self);
    /// The next response's payload size; `None` once the stream ended OK.
    fn next(&mut self) -> impl Future<Output = Result<Option<usize>, Failure>> + Send;
    /// `x-grpc-test-echo-initial` in the response headers.
    fn initial(&self) -> Option<String>;
    /// Reads the remaining responses and the trailers: the echoed trailing value.
    fn trailing(&mut self) -> impl Future<Output = Result<Option<Vec<u8>>, Failure>> + Send;
    /// Cancels the call while its request stream is open (drops the response stream
    /// first), then tries to send `request` (which must not reach the server or fail
    /// the client), and lets the call go.
    fn cancel(self, request: OutputRequest) -> impl Future<Output = ()> + Send;
}

/// What the cases ask of a client of `grpc.testing.TestService` (and of
/// `grpc.testing.UnimplementedService`, which the server does not register).
pub trait Client: Sync {
    /// A `FullDuplexCall` in progress.
    type Duplex: Duplex;
    /// The status (code, message) the client's own timer ends a call with, when it
    /// fires before the server's DEADLINE_EXCEEDED arrives (tonic's: CANCELLED "Timeout
    /// expired"); `None` if the client always reports DEADLINE_EXCEEDED.
    const OWN_DEADLINE: Option<(i32, &'static str)> = None;
    /// `EmptyCall`.
    fn empty_call(&self) -> impl Future<Output = Result<(), Failure>> + Send;
    /// `UnaryCall`.
    fn unary_call(
        &self,
        request: UnaryRequest,
    ) -> impl Future<Output = Result<UnaryResponse, Failure>> + Send;
    /// `StreamingInputCall` with requests of these payload sizes: the aggregated size.
    fn streaming_input_call(
        &self,
        payloads: Vec<usize>,
    ) -> impl Future<Output = Result<i32, Failure>> + Send;
    /// `StreamingInputCall` whose request stream stays open and sends nothing, until
    /// the future is dropped (which cancels the call).
    fn silent_input_call(&self) -> impl Future<Output = Result<i32, Failure>> + Send;
    /// `StreamingOutputCall`: the payload sizes of the responses, once the stream ended.
    fn streaming_output_call(
        &self,
        request: OutputRequest,
    ) -> impl Future<Output = Result<Vec<usize>, Failure>> + Send;
    /// Opens a `FullDuplexCall` (its response headers arrived).
    fn full_duplex_call(
        &self,
        call: DuplexCall,
    ) -> impl Future<Output = Result<Self::Duplex, Failure>> + Send;
    /// `TestService.UnimplementedCall`.
    fn unimplemented_call(&self) -> impl Future<Output = Result<(), Failure>> + Send;
    /// `UnimplementedService.UnimplementedCall`.
    fn unimplemented_service_call(&self) -> impl Future<Output = Result<(), Failure>> + Send;
}
