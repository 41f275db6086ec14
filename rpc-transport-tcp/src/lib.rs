//! TCP transport for `rdmarpc-core`.
//!
//! Frames of the shared wire format (see `rdmarpc_core::wire`) over tokio TCP with
//! `TCP_NODELAY`. Sends of concurrent calls are queued to one writer task per connection,
//! which coalesces whatever is queued into as few `write` system calls as it can. The
//! reader checks every header before allocating: a frame over the configured maximum is
//! skipped byte by byte (never buffered) and reported to the runtime, which answers it
//! with `RESOURCE_EXHAUSTED`; a malformed byte stream closes that one connection.
//!
//! # Layout
//! - [`TcpConnection`]: one connection (`connection.rs`); reading in `reader.rs`, the I/O
//!   shell of the sans-IO frame decoder `decoder.rs` (large frames into recycled buffers
//!   of their own, `recycle.rs`), the coalescing and
//!   gathering writer in `writer.rs`.
//! - [`TcpListener`]: accepts connections for `rdmarpc_core::Server` (`listener.rs`).
//! - [`TcpConfig`]: settings (`config.rs`).
//! - [`Socket`]: a TCP stream, plain or under TLS (`socket.rs`): what a connection, the
//!   RDMA side channel and the gRPC server run over.
//! - [`TlsConfig`]: TLS with rustls (`tls.rs`): certificates and keys from PEM files,
//!   mutual TLS, [`TlsAcceptor`] and [`TlsConnector`];
//!   [`TcpConnection::connect_tls`] dials a `tcp+tls://` connection.
//!
//! # Feature Flags
//! None is part of the API: `unstable-fuzzing` (off) exposes the entry points of this
//! project's fuzz targets, outside SemVer.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod closing;
mod config;
mod connection;
// `pub` items: the fuzz targets reach them through `fuzzing` (feature `unstable-fuzzing`).
#[cfg_attr(not(feature = "unstable-fuzzing"), allow(unreachable_pub))]
mod decoder;
mod listener;
mod outgoing;
pub mod rdma_hello;
mod reader;
mod recycle;
mod socket;
mod tls;
mod writer;

/// The sans-IO frame decoder (`decoder.rs`), for the fuzz targets only (the `rpc-fuzz`
/// crate in `fuzz/`). Hidden from the docs and not part of the crate's API; nothing else
/// may use it.
#[cfg(feature = "unstable-fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::decoder::{Allowance, FrameDecoder, Room, KEEP_MIN, READ_CHUNK};
}

pub use config::TcpConfig;
pub use connection::TcpConnection;
pub use listener::{accept_socket, take_backlog, TcpListener};
pub use outgoing::SendReservation;
pub use socket::{Socket, TlsStream};
pub use tls::{ClientAuth, TlsAcceptor, TlsConfig, TlsConnector, TlsError, ALPN_FRAMES, ALPN_H2};
