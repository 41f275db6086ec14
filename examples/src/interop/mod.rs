//! The gRPC interop test service (`grpc.testing.TestService`) and this framework's
//! client of it for the interop cases (the `interop-cases` crate, after the gRPC interop
//! test specification, doc/interop-test-descriptions.md of grpc/grpc): the framework's
//! own conformance suite, run by `interop-client` against `interop-server` on every
//! transport, and by tonic's client (`grpc-interop`) against the same cases.
//!
//! Metadata values are text on this framework's wire, so the binary value the
//! `custom_metadata` case sends under `x-grpc-test-echo-trailing-bin` (0xababab) travels
//! as its base64 text `q6ur`, which is how gRPC carries it over HTTP/2.

mod clients;
mod service;

pub use self::clients::{InteropClients, RpcDuplex};
pub use self::service::{
    InteropProbe, InteropService, ECHO_INITIAL, ECHO_TRAILING, MAX_HALF_DUPLEX_RESPONSES,
    MAX_PAYLOAD,
};
pub use interop_cases::{request_channel, run_case, CASES};
