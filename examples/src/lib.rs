//! Example services of the RPC framework, shared by the example binaries and the
//! end-to-end tests: an echo service and an in-memory key-value store.
//!
//! # Layout
//! - [`echo`], [`kv`], [`grpc_testing`]: code generated from `proto/echo.proto`,
//!   `proto/kv.proto` and `proto/grpc/testing/`.
//! - [`interop`]: the interop test service and cases (`interop-server`, `interop-client`).
//! - [`chat`]: generated from `proto/chat.proto`.
//! - [`gateway`], [`GatewayService`]: the front end of the two-service example
//!   (`gateway-server`, in front of `kv-server`; `deploy/kubernetes/`).
//! - [`EchoService`], [`KvStore`], [`ChatRoom`]: the servers' implementations (the kv
//!   store's `Watch` streams changes; a chat member is a bidirectional stream).
//! - [`transport`]: turning `--addr URL` into a listener or a channel, and
//!   [`transport::example_server`], a service with health and reflection.
//! - [`helloworld`], [`routeguide`], [`wrapped`], [`image`] and [`ghz`]: the services
//!   ghz's documentation calls in its examples, and their server (`greeter-server`).
//! - [`FILE_DESCRIPTOR_SET`]: the examples' descriptors, for reflection.

/// Generated from `proto/echo.proto`.
#[allow(missing_docs)]
pub mod echo {
    rdmarpc_core::include_proto!("echo");
}

/// Generated from `proto/kv.proto`.
#[allow(missing_docs)]
pub mod kv {
    rdmarpc_core::include_proto!("kv");
}

/// Generated from `proto/chat.proto`.
#[allow(missing_docs)]
pub mod chat {
    rdmarpc_core::include_proto!("chat");
}

/// Generated from `proto/gateway.proto`: the front end of the two-service example.
#[allow(missing_docs)]
pub mod gateway {
    rdmarpc_core::include_proto!("gateway");
}

/// Generated from `proto/grpc/testing/*.proto`: the gRPC interop test services.
#[allow(missing_docs)]
pub mod grpc_testing {
    rdmarpc_core::include_proto!("grpc.testing");
}

/// Generated from `proto/greeter.proto`: ghz's `helloworld.Greeter`.
#[allow(missing_docs)]
pub mod helloworld {
    rdmarpc_core::include_proto!("helloworld");
}

/// Generated from `proto/route_guide.proto`: gRPC's `routeguide.RouteGuide`.
#[allow(missing_docs)]
pub mod routeguide {
    rdmarpc_core::include_proto!("routeguide");
}

/// Generated from `proto/wrapped.proto`: a service of a well-known type.
#[allow(missing_docs)]
pub mod wrapped {
    rdmarpc_core::include_proto!("wrapped");
}

/// Generated from `proto/bytes.proto` (package `bytes`): a service with a bytes field.
#[allow(missing_docs)]
pub mod image {
    rdmarpc_core::include_proto!("bytes");
}

/// The encoded `FileDescriptorSet` of every example's `.proto` files (imports included),
/// which the example servers' reflection service serves.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/examples_descriptor_set.bin"));

mod chat_room;
mod echo_service;
mod gateway_service;
pub mod ghz;
pub mod interop;
mod kv_store;
pub mod transport;

pub use chat_room::{ChatRoom, CHAT_BACKLOG, MAX_NAME, MAX_POST, NAME_KEY};
pub use echo_service::{echo_each, repeat, EchoService};
pub use gateway_service::GatewayService;
pub use kv_store::{KvStore, KV_MAX_MESSAGE_SIZE, WATCH_BACKLOG, WATCH_VALUE_MAX};

/// Sets up logging to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
