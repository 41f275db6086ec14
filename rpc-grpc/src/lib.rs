//! gRPC over HTTP/2 as a transport of `rpc-core`.
//!
//! A server that finds the HTTP/2 connection preface on its port (see
//! [`PREFACE`]) wraps the socket in a [`GrpcConnection`]: every gRPC call of the HTTP/2
//! connection becomes a call of the framework's own frames (request, stream messages,
//! window updates, status), so the services registered once are reached by gRPC clients
//! too, through the same admission, limits, deadlines and flow control as any other
//! client. Each direction of a call keeps to both sides' rules: HTTP/2 flow control
//! towards the gRPC peer, the server's stream windows towards the server.

mod deframe;
mod server;
mod text;

pub use server::{GrpcConfig, GrpcConnection};

/// The first bytes a gRPC (HTTP/2) client sends: the HTTP/2 connection preface.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
