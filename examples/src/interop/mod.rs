//! The gRPC interop test service (`grpc.testing.TestService`) and the interop cases,
//! after the gRPC interop test specification (doc/interop-test-descriptions.md of
//! grpc/grpc): the framework's own conformance suite, run by `interop-client` against
//! `interop-server` on every transport.
//!
//! Metadata values are text on this framework's wire, so the binary value the
//! `custom_metadata` case sends under `x-grpc-test-echo-trailing-bin` (0xababab) travels
//! as its base64 text `q6ur`, which is how gRPC carries it over HTTP/2.

mod cases;
mod service;

pub use self::cases::{request_channel, run_case, CaseError, InteropClients, CASES};
pub use self::service::{
    InteropProbe, InteropService, ECHO_INITIAL, ECHO_TRAILING, MAX_HALF_DUPLEX_RESPONSES,
    MAX_PAYLOAD,
};
