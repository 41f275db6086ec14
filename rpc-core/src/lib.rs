//! The transport-agnostic runtime of the RDMA-backed RPC framework.
//!
//! Services are defined in `.proto` files and compiled by `rdmarpc-codegen` into clients
//! (`FooClient<C>`, over a [`Channel`]) and server traits (`Foo`, adapted by `FooServer`
//! into a [`Service`](codegen::Service) that a [`Server`] routes to). Transports implement
//! the small [`Connection`] trait; generated code never names one.
//!
//! # Layout
//! - [`wire`]: the frame header codec and frame parsing (pure, no I/O).
//! - [`Connection`], [`Listener`]: the transport contract (`transport.rs`).
//! - [`Channel`]: client side, concurrent calls over one connection (`client/`).
//! - [`Server`]: routing, concurrency limit, cancellation, graceful shutdown (`server/`).
//! - [`Status`], [`Code`], [`Request`], [`Response`], [`Metadata`]: what calls carry.
//! - [`Endpoint`]: `tcp://`, `rdma://`, `auto://` URLs.
//! - [`Payload`]: received message bytes, borrowed or kept (`payload.rs`).
//! - [`Streaming`]: the received side of a streaming call, flow-controlled (`stream.rs`).
//! - [`memory`]: an in-memory transport for tests.
//! - [`codegen`]: what generated code uses.
//! - [`account`]: the resource model every surface charges (connection -> peer -> server).
//! - [`layer`]: tower layers around a server's calls and a channel's unary calls.
//! - [`trace`]: a span per call and W3C trace context in metadata.
//!
//! # Feature Flags
//! - `otel` (off): the spans of [`trace`] join OpenTelemetry traces through
//!   tracing-opentelemetry: the caller's trace id and parent span reach the exporter, and
//!   outgoing calls carry the exported ids.
//! - `unstable-fuzzing` (off): the entry points of this project's fuzz targets; no part of
//!   the API and outside SemVer.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod account;
mod client;
pub mod clock;
pub mod codegen;
mod config;
mod control;
mod endpoint;
#[cfg(feature = "unstable-fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod interceptor;
pub mod layer;
pub mod memory;
mod metadata;
pub mod metered;
mod outbound;
mod payload;
mod request;
mod server;
mod service;
mod status;
mod stream;
pub mod trace;
mod transport;
mod violation;
pub mod wire;

pub use client::{Channel, EndpointStatus, MAX_REDIAL_BACKOFF, REDIAL_BACKOFF};
pub use config::{
    BalanceConfig, ClientConfig, LbStrategy, RetryPolicy, ServerConfig, DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_STREAM_WINDOW,
};
pub use endpoint::{Endpoint, ParseEndpointError, TransportKind};
pub use interceptor::{InterceptedService, Interceptor};
pub use metadata::{BinaryMetadataError, Metadata, MAX_METADATA_LEN};
pub use metered::MeteredService;
pub use payload::Payload;
pub use request::{IntoRequest, Peer, Request, Response};
pub use server::{RegisterError, Server, ServerBuilder};
pub use status::{Code, Status, STATUS_DETAILS_KEY};
pub use stream::{IntoStreamingRequest, Streaming};
pub use transport::{Connection, Dial, FrameSink, Listener, MethodKinds, TransportError};

/// A boxed stream of messages, as a streaming handler may answer (`type FooStream =
/// BoxStream<FooReply>;`).
pub type BoxStream<T> =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The crate's result type: errors are [`Status`].
pub type Result<T, E = Status> = std::result::Result<T, E>;

/// Includes the code `rdmarpc-codegen` generated for proto package `$package` (from
/// `OUT_DIR`).
#[macro_export]
macro_rules! include_proto {
    ($package:tt) => {
        include!(concat!(env!("OUT_DIR"), concat!("/", $package, ".rs")));
    };
}
