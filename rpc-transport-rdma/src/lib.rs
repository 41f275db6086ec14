//! RDMA transport for `rdmarpc-core` over libibverbs (through `rdma-sys`).
//!
//! Small frames travel by two-sided SEND/RECV through per-connection rings of registered
//! slots; large ones are pulled by the receiver with one-sided RDMA READ from a registered
//! buffer the sender lends for the transfer (rendezvous). Credit-based flow control keeps
//! every SEND matched by a posted RECV, so the QPs run with `rnr_retry = 0`. Connections
//! share completion queues (per device and tokio runtime: one per CPU, then as many as
//! their queues' depths need), each driven by one task that busy-polls while completions
//! come, then sleeps on its completion channel through tokio.
//!
//! Connections are negotiated over a TCP side channel on the server's port, and their
//! queue pairs connected through rdma_cm (InfiniBand, RoCE over IPv4 and IPv6, iWARP),
//! bound to the side channel by a token; a server also accepts plain TCP clients on the
//! same port, and a client asking for `auto://` falls back to TCP over the same socket
//! where either end has no RDMA device.
//!
//! # Layout
//! - Choosing the transport from a URL (`AnyConnection`, `AnyListener`, `connect`) and
//!   the configuration file live in the `rdmarpc-transport` crate, which uses this one
//!   through [`handshake_client`] and [`handshake_server`] on a socket it opened.
//! - [`RdmaConnection`]: one connection (`connection.rs`); what it does with its
//!   completions (`driver.rs`): it pumps the protocol session and, once the runtime asked
//!   for it (`Connection::push_to`), hands each received frame straight to the runtime (a
//!   client's call completes on the completion path); the shared completion queues and
//!   their driver tasks (`completion/`); set-up and handshake (`setup/`,
//!   `handshake.rs`) and the process's rdma_cm service (`cm_service.rs`).
//! - `protocol/`: sans-IO. `session.rs` is the protocol state of one connection (credits,
//!   loans lent and borrowed, READ scheduling, arrival order, pings, liveness, the loan
//!   timeout; close reasons as an enum), tested as a pair over a simulated wire; slot
//!   layout (`message.rs`), credit rules (`credits.rs`) and loan accounting (`loans.rs`).
//! - `pool.rs`: registered rendezvous buffers.
//! - `verbs/`: safe wrappers over libibverbs, the crate's only `unsafe` code.
//! - Settings: [`RdmaConfig`].
//!
//! # Feature Flags
//! None is part of the API: `unstable-test-peer` (off) is a raw, hostile RDMA peer for
//! this project's own tests, and `unstable-fuzzing` (off) the entry points of its fuzz
//! targets; both may change or go in any release.
//!
//! Building needs libibverbs and librdmacm headers and libclang (rdma-sys runs
//! bindgen); running needs libibverbs and a provider, and works without any RDMA device
//! (RDMA is then reported unavailable).

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]

mod cm_service;
mod completion;
mod config;
mod connection;
mod control;
mod counters;
mod device;
mod driver;
mod events;
// Wrappers of the private decoders for the fuzz targets in `fuzz/` only.
// Device, port and address selection, and addressing queue pairs by hand on
// InfiniBand and RoCE: the verbs tests connect their queue pairs this way; the transport
// connects through rdma_cm (`cm_service.rs`, `setup/`).
#[cfg_attr(not(test), allow(dead_code))]
mod fabric;
#[cfg(feature = "unstable-fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod memlock;
/// A hostile raw peer for the project's own tests (feature `unstable-test-peer`): see its
/// module docs.
#[cfg(feature = "unstable-test-peer")]
#[doc(hidden)]
pub mod test_peer {
    pub use crate::verbs::test_peer::{Descriptor, HelloLimits, Message, RawPeer};
}
mod pool;
mod protocol;
mod sending;
mod setup;
// The only module with `unsafe` code (CONTRIBUTING.md rule 4); `forbid` could not be re-allowed here.
#[allow(unsafe_code)]
mod verbs;
mod warn_once;

pub use config::{RdmaConfig, MIN_SLOT_SIZE};
pub use connection::{MessageBuf, RdmaConnection, RecvBuf};
pub use counters::{process_counters, ProcessCounters, RdmaCounters};
pub use rdmarpc_transport_tcp::{ClientAuth, TlsConfig};
pub use setup::{handshake_client, handshake_server, Negotiated};
pub use verbs::{rdma_available, SendBuf};
