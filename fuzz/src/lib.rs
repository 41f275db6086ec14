//! Fuzz targets for the decoders of everything a peer sends, and a stable driver for them.
//!
//! Each target is a plain function `fn(&[u8])` that must not panic on any input: a panic
//! is a bug found (a broken invariant is asserted, so a decoder that accepts what it
//! should refuse, or decodes it wrongly, panics too). The same functions run under the
//! stable, deterministic driver (`rpc-fuzz`, the bounded CI run of `scripts/fuzz`) and
//! under cargo-fuzz / libFuzzer for coverage-guided runs (`fuzz/libfuzzer/`). See
//! `fuzz/README.md`.
//!
//! # Layout
//! - [`frame()`], [`metadata()`], [`rdma_control()`], [`handshake()`], [`tcp_stream()`],
//!   [`client_demux()`], [`server_demux()`], [`grpc_response()`], [`grpc_request()`],
//!   [`rdma_session()`], [`grpc_client()`]: the targets, one module each (the two demultiplexers share
//!   `demux`), with the fields the structure-aware mutations rewrite and the seeds the
//!   corpus started from.
//! - [`TARGETS`]: the table the driver runs.
//! - [`mutate`]: byte-level and structure-aware mutations.
//! - [`runner`]: corpus replay, the mutation loop, crash artifacts.
//! - [`rng`]: the deterministic random numbers.
//!
//! # Feature Flags
//! None.
#![forbid(unsafe_code)]

pub mod demux;
pub mod frame;
pub mod grpc_client;
pub mod grpc_request;
pub mod grpc_response;
pub mod handshake;
pub mod metadata;
pub mod mutate;
pub mod rdma_control;
pub mod rdma_session;
pub mod rng;
pub mod runner;
pub mod tcp_stream;

pub use demux::{client_demux, server_demux};
pub use frame::frame;
pub use grpc_client::grpc_client;
pub use grpc_request::grpc_request;
pub use grpc_response::grpc_response;
pub use handshake::handshake;
pub use metadata::metadata;
pub use rdma_control::rdma_control;
pub use rdma_session::rdma_session;
pub use tcp_stream::tcp_stream;

use mutate::Field;

/// A fuzz target: what the driver needs to run it.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Its name: the corpus folder, the artifact folder, the command-line name.
    pub name: &'static str,
    /// The function under test; must not panic.
    pub run: fn(&[u8]),
    /// Where the structure-aware mutations write in an input.
    pub fields: fn(&[u8]) -> Vec<Field>,
    /// The inputs the corpus was seeded with (`rpc-fuzz --write-seeds`).
    pub seeds: fn() -> Vec<(String, Vec<u8>)>,
}

/// Every target, in the order `all` runs them.
pub const TARGETS: [Target; 11] = [
    Target {
        name: "frame",
        run: frame::frame,
        fields: frame::fields,
        seeds: frame::seeds,
    },
    Target {
        name: "metadata",
        run: metadata::metadata,
        fields: metadata::fields,
        seeds: metadata::seeds,
    },
    Target {
        name: "rdma_control",
        run: rdma_control::rdma_control,
        fields: rdma_control::fields,
        seeds: rdma_control::seeds,
    },
    Target {
        name: "handshake",
        run: handshake::handshake,
        fields: handshake::fields,
        seeds: handshake::seeds,
    },
    Target {
        name: "tcp_stream",
        run: tcp_stream::tcp_stream,
        fields: tcp_stream::fields,
        seeds: tcp_stream::seeds,
    },
    Target {
        name: "client_demux",
        run: demux::client_demux,
        fields: demux::fields,
        seeds: demux::client_seeds,
    },
    Target {
        name: "server_demux",
        run: demux::server_demux,
        fields: demux::fields,
        seeds: demux::server_seeds,
    },
    Target {
        name: "grpc_response",
        run: grpc_response::grpc_response,
        fields: grpc_response::fields,
        seeds: grpc_response::seeds,
    },
    Target {
        name: "grpc_request",
        run: grpc_request::grpc_request,
        fields: grpc_request::fields,
        seeds: grpc_request::seeds,
    },
    Target {
        name: "rdma_session",
        run: rdma_session::rdma_session,
        fields: rdma_session::fields,
        seeds: rdma_session::seeds,
    },
    Target {
        name: "grpc_client",
        run: grpc_client::grpc_client,
        fields: grpc_client::fields,
        seeds: grpc_client::seeds,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
