//! The transport chosen at run time, by URL and configuration, never by code.
//!
//! - [`connect`] dials `tcp://`, `rdma://`, `auto://` (RDMA where both ends have a
//!   device, else TCP on the same socket), `grpc://` (HTTP/2 to any gRPC server), each
//!   optionally under TLS (`tcp+tls://`, `rdma+tls://`, `auto+tls://`, `grpcs://`), and
//!   gives an [`AnyConnection`] for `rdmarpc_core::Channel`.
//! - [`AnyListener`] accepts every kind of client on one TCP port: this framework's TCP
//!   frames, RDMA handshakes (served with RDMA where this host has a device, else
//!   answered with a TCP fallback) and standard gRPC clients (the HTTP/2 preface).
//! - [`TransportSettings`] holds every transport's settings; [`FileConfig`] fills them
//!   (and `rdmarpc_core`'s server and client settings) from a TOML file or `RPC_*`
//!   environment variables.
//! - [`publish_rdma_metrics`], [`spawn_rdma_metrics`]: the RDMA counters as metrics.
//!
//! # Feature flags
//! `rdma` (on by default): RDMA through `rdmarpc-transport-rdma`, which needs libibverbs and
//! librdmacm (and libclang to build). Without it the crate builds on any OS with
//! TCP, gRPC and TLS: `rdma://` is refused with a clear error, `auto://` is TCP, and a
//! listener answers RDMA clients' handshakes with a fallback to TCP on the same socket.
//! A `[rdma]` table in a configuration file is still accepted (and ignored, with a
//! warning), so one file serves both builds.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod any;
mod bufs;
mod error;
mod file;
mod handshakes;
mod metrics;

pub use any::{connect, rdma_available, AnyConnection, AnyListener, TransportSettings};
pub use bufs::MessageBuf;
pub use error::ConfigError;
pub use file::{
    ClientSection, FileConfig, GrpcSection, RdmaSection, ServerSection, TcpSection, TlsSection,
};
pub use metrics::{publish_rdma_metrics, spawn_rdma_metrics};
#[cfg(feature = "rdma")]
pub use rdmarpc_transport_rdma::{
    process_counters, ProcessCounters, RdmaConfig, RdmaConnection, RdmaCounters,
};
pub use rdmarpc_transport_tcp::{ClientAuth, TcpConfig, TlsConfig};
