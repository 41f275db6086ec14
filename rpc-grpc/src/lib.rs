//! gRPC over HTTP/2 as a transport of `rdmarpc-core`, both ways.
//!
//! **Server side.** A server that finds the HTTP/2 connection preface on its port (see
//! [`PREFACE`]) wraps the socket in a [`GrpcConnection`] ([`GrpcConnection::accept`]):
//! every gRPC call of the HTTP/2 connection becomes a call of the framework's own frames
//! (request, stream messages, window updates, status), so the services registered once
//! are reached by gRPC clients too, through the same admission, limits, deadlines and
//! flow control as any other client. Each direction of a call keeps to both sides' rules:
//! HTTP/2 flow control towards the gRPC peer, the server's stream windows towards the
//! server.
//!
//! **Client side.** [`GrpcConnection::connect`] runs HTTP/2 to any gRPC server
//! (`grpc://`, and `grpcs://` over TLS): a `Channel` over it, and so every generated
//! client, calls that server; the channel's frames become gRPC calls and the responses
//! come back as frames.
//!
//! # Layout
//! - `server.rs`: the server side; `client.rs`: the client side.
//! - `deframe.rs`: gRPC's length-prefixed messages; `compress.rs`: gzip and zstd;
//!   `text.rs`: its header texts.
//! - `progress.rs`: the server connection's write-progress and keepalive watchdog;
//!   `calm.rs`: its rapid-reset budget.
//!
//! # Feature Flags
//! None is part of the API: `unstable-fuzzing` (off) exposes the entry points of this
//! project's fuzz targets, outside SemVer.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rdmarpc_core::codegen::MethodDescriptor;
use rdmarpc_core::{Connection, MethodKinds, TransportError};
use tokio::io::{AsyncRead, AsyncWrite};

mod calm;
mod client;
mod compress;
mod config;
mod deframe;
mod frames;
#[cfg(any(test, feature = "unstable-fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod inplace;
mod linger;
mod progress;
mod server;
mod text;

pub use compress::Encoding;
pub use config::GrpcConfig;

use client::ClientConnection;
use server::ServerConnection;

/// The first bytes a gRPC (HTTP/2) client sends: the HTTP/2 connection preface.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One HTTP/2 connection carrying gRPC calls, as a [`Connection`] of the framework: the
/// server's side of a gRPC client's connection ([`GrpcConnection::accept`]), or a
/// client's connection to a gRPC server ([`GrpcConnection::connect`]).
#[derive(Debug)]
pub struct GrpcConnection {
    side: Side,
    peer_certificates: Option<Arc<[Bytes]>>,
}

#[derive(Debug)]
enum Side {
    Server(ServerConnection),
    Client(ClientConnection),
}

impl GrpcConnection {
    /// Runs the server side of HTTP/2 on `io`, whose first bytes (the connection
    /// preface) are still to be read from it or were read into `already_read`.
    ///
    /// # Errors
    /// The HTTP/2 handshake failed.
    pub async fn accept<T>(
        io: T,
        already_read: &[u8],
        config: &GrpcConfig,
        peer_addr: Option<SocketAddr>,
    ) -> Result<GrpcConnection, TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        ServerConnection::accept(io, already_read, config, peer_addr)
            .await
            .map(|c| GrpcConnection::new(Side::Server(c)))
    }

    /// Runs the client side of HTTP/2 on `io`, connected (under TLS when `tls`) to the
    /// gRPC server at `authority` (`host:port`, the requests' `:authority`). Responses
    /// larger than [`GrpcConfig::max_message_size`] fail their calls with
    /// `RESOURCE_EXHAUSTED`; [`GrpcConfig::stream_window`] and
    /// [`GrpcConfig::connection_window`] are the HTTP/2 windows this side grants.
    ///
    /// # Errors
    /// An invalid authority, or the HTTP/2 handshake failed.
    pub async fn connect<T>(
        io: T,
        authority: &str,
        tls: bool,
        config: &GrpcConfig,
        peer_addr: Option<SocketAddr>,
    ) -> Result<GrpcConnection, TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        ClientConnection::connect(io, authority, tls, config, peer_addr)
            .await
            .map(|c| GrpcConnection::new(Side::Client(c)))
    }

    fn new(side: Side) -> GrpcConnection {
        GrpcConnection {
            side,
            peer_certificates: None,
        }
    }

    /// Records the certificate chain the peer presented in the TLS handshake under which
    /// this HTTP/2 connection runs ([`Connection::peer_certificates`]).
    pub fn with_peer_certificates(mut self, certificates: Option<Arc<[Bytes]>>) -> Self {
        self.peer_certificates = certificates;
        self
    }

    /// Marks a server-side connection as running under TLS: its peer reads `grpcs://`.
    pub fn under_tls(mut self) -> Self {
        if let Side::Server(c) = &mut self.side {
            if let Some(rest) = c.peer.strip_prefix("grpc://") {
                c.peer = format!("grpcs://{rest}");
            }
        }
        self
    }

    /// Whether this is the client side (a connection to a gRPC server).
    pub fn is_client(&self) -> bool {
        matches!(self.side, Side::Client(_))
    }
}

impl Connection for GrpcConnection {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        match &self.side {
            Side::Server(c) => c.alloc(len).await,
            Side::Client(c) => {
                let max = c.max_frame();
                if len > max {
                    return Err(TransportError::TooLarge { len, max });
                }
                Ok(BytesMut::with_capacity(len))
            }
        }
    }

    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        match &self.side {
            Side::Server(c) => c.send(frame).await,
            Side::Client(c) => c.send(frame.freeze()),
        }
    }

    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        match &self.side {
            Side::Server(c) => c.recv().await,
            Side::Client(c) => c.recv().await,
        }
    }

    fn recv_ready(&self, out: &mut Vec<Bytes>, max: usize) {
        match &self.side {
            Side::Server(c) => c.recv_ready(out, max),
            Side::Client(c) => c.recv_ready(out, max),
        }
    }

    /// Runs of stream messages may come in one buffer: each becomes its own gRPC message.
    fn max_frames_per_buffer(&self) -> usize {
        usize::MAX
    }

    fn close(&self) {
        match &self.side {
            Side::Server(c) => c.close(),
            Side::Client(c) => c.close(),
        }
    }

    async fn shutdown(&self) {
        match &self.side {
            Side::Server(c) => c.shutdown().await,
            Side::Client(c) => c.close(),
        }
    }

    fn charges_requests(&self) -> bool {
        match &self.side {
            Side::Server(c) => c.charges_requests(),
            Side::Client(_) => false,
        }
    }

    fn serving(&self, methods: Arc<dyn MethodKinds>, account: &rdmarpc_core::account::Account) {
        if let Side::Server(c) = &self.side {
            c.serving(methods, account);
        }
    }

    fn calling(&self, method: &MethodDescriptor) {
        if let Side::Client(c) = &self.side {
            c.calling(method);
        }
    }

    fn peer(&self) -> String {
        match &self.side {
            Side::Server(c) => c.peer.clone(),
            Side::Client(c) => c.peer.clone(),
        }
    }

    fn peer_certificates(&self) -> Option<Arc<[Bytes]>> {
        self.peer_certificates.clone()
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        match &self.side {
            Side::Server(c) => c.peer_addr,
            Side::Client(c) => c.peer_addr,
        }
    }
}
