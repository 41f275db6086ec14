//! [`AnyConnection`] and [`AnyListener`]: the transport chosen at run time from a URL
//! (`tcp://`, `rdma://`, `auto://`, `grpc://`, with or without TLS), statically
//! dispatched, so generated clients and servers run unchanged over any of them.

use std::sync::Arc;

use rdmarpc_core::{Connection, Endpoint, TransportError, TransportKind};
#[cfg(feature = "rdma")]
use rdmarpc_transport_rdma::{RdmaConnection, RdmaCounters};
use rdmarpc_transport_tcp::TcpConnection;

use crate::bufs::{MessageBuf, RecvBuf, SendBuf};

mod choice;
mod connect;
mod listener;
mod settings;

#[cfg(feature = "rdma")]
#[path = "glue_rdma.rs"]
mod glue;
#[cfg(not(feature = "rdma"))]
#[path = "glue_plain.rs"]
mod glue;
#[cfg(feature = "rdma")]
mod rdma;
#[cfg(not(feature = "rdma"))]
#[path = "no_rdma.rs"]
mod rdma;

pub use self::connect::connect;
pub use self::listener::AnyListener;
pub use self::settings::TransportSettings;

/// Whether this host has an RDMA device this process can use (always `false` without
/// the `rdma` feature).
pub fn rdma_available() -> bool {
    #[cfg(feature = "rdma")]
    return rdmarpc_transport_rdma::rdma_available();
    #[cfg(not(feature = "rdma"))]
    return false;
}

/// Why `endpoint` (`rdma://`) cannot be served or dialled here.
fn no_rdma(endpoint: &Endpoint) -> TransportError {
    let why = if cfg!(feature = "rdma") {
        "this host has no RDMA device (ibv_get_device_list found none)"
    } else {
        "this program was built without RDMA (the `rdma` feature of rdmarpc-transport)"
    };
    TransportError::Other(format!("{endpoint}: {why}; use tcp:// or auto://"))
}

/// A connection over whichever transport was negotiated.
#[derive(Debug)]
#[non_exhaustive]
// One per peer and long-lived: the size of the TCP variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum AnyConnection {
    /// TCP.
    Tcp(TcpConnection),
    /// RDMA.
    #[cfg(feature = "rdma")]
    Rdma(RdmaConnection),
    /// gRPC over HTTP/2: a standard gRPC client's connection (server side), or a
    /// connection to a gRPC server (`grpc://`, `grpcs://`).
    Grpc(rdmarpc_grpc::GrpcConnection),
}

impl AnyConnection {
    /// The transport in use: [`TransportKind::Tcp`], [`TransportKind::Rdma`] or
    /// [`TransportKind::Grpc`].
    pub fn transport(&self) -> TransportKind {
        match self {
            AnyConnection::Tcp(_) => TransportKind::Tcp,
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(_) => TransportKind::Rdma,
            AnyConnection::Grpc(_) => TransportKind::Grpc,
        }
    }

    /// A buffer of `len` bytes for a large message field: registered memory of the RDMA
    /// connection (sent from where it lies, see `RdmaConnection::message_buf`), or heap
    /// memory over TCP (where a large field is written from where it lies anyway).
    pub fn message_buf(&self, len: usize) -> MessageBuf {
        match self {
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.message_buf(len),
            AnyConnection::Tcp(_) | AnyConnection::Grpc(_) => MessageBuf::heap(len),
        }
    }

    /// RDMA counters, when on RDMA.
    #[cfg(feature = "rdma")]
    pub fn rdma_counters(&self) -> Option<RdmaCounters> {
        match self {
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => Some(c.counters()),
            AnyConnection::Tcp(_) | AnyConnection::Grpc(_) => None,
        }
    }
}

impl Connection for AnyConnection {
    type SendBuf = SendBuf;
    type RecvBuf = RecvBuf;

    async fn alloc(&self, len: usize) -> Result<SendBuf, TransportError> {
        match self {
            // The frame is built only once the send queue has room for it (in builds with
            // the `rdma` feature; see `glue`).
            AnyConnection::Tcp(c) => glue::tcp_alloc(c, len).await,
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.alloc(len).await,
            AnyConnection::Grpc(c) => {
                c.alloc(len).await?;
                Ok(glue::heap(len))
            }
        }
    }

    async fn send(&self, frame: SendBuf) -> Result<(), TransportError> {
        match self {
            AnyConnection::Tcp(c) => match glue::heap_bytes(frame)? {
                (bytes, Some(reservation)) => c.send_reserved(bytes, reservation).await,
                (bytes, None) => c.send(bytes).await,
            },
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.send(frame).await,
            AnyConnection::Grpc(c) => {
                let (frame, _) = glue::heap_bytes(frame)?;
                c.send(frame).await
            }
        }
    }

    async fn recv(&self) -> Result<Option<RecvBuf>, TransportError> {
        match self {
            AnyConnection::Tcp(c) => Ok(c.recv().await?.map(glue::received)),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.recv().await,
            AnyConnection::Grpc(c) => Ok(c.recv().await?.map(glue::received)),
        }
    }

    fn close(&self) {
        match self {
            AnyConnection::Tcp(c) => c.close(),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.close(),
            AnyConnection::Grpc(c) => c.close(),
        }
    }

    async fn shutdown(&self) {
        match self {
            AnyConnection::Tcp(c) => c.shutdown().await,
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.close(),
            AnyConnection::Grpc(c) => c.shutdown().await,
        }
    }

    fn keep(&self, frame: RecvBuf) -> Result<bytes::Bytes, RecvBuf> {
        match self {
            AnyConnection::Tcp(c) => c.keep(glue::received_bytes(frame)?).map_err(glue::received),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.keep(frame),
            // Frames a gRPC call was translated into: the application may keep large ones.
            AnyConnection::Grpc(_) => match glue::received_bytes(frame)? {
                bytes if bytes.len() >= rdmarpc_core::memory::KEEP_MIN => Ok(bytes),
                bytes => Err(glue::received(bytes)),
            },
        }
    }

    fn max_frames_per_buffer(&self) -> usize {
        match self {
            AnyConnection::Tcp(c) => c.max_frames_per_buffer(),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.max_frames_per_buffer(),
            AnyConnection::Grpc(c) => c.max_frames_per_buffer(),
        }
    }

    fn gather_min(&self) -> Option<usize> {
        match self {
            AnyConnection::Tcp(c) => c.gather_min(),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.gather_min(),
            AnyConnection::Grpc(c) => c.gather_min(),
        }
    }

    async fn send_gathered(
        &self,
        head: SendBuf,
        tail: Vec<bytes::Bytes>,
    ) -> Result<(), TransportError> {
        // The head's reservation made room for the head alone: the whole frame reserves
        // again (the head's is given back first, so that it never waits for itself).
        match self {
            AnyConnection::Tcp(c) => {
                let (head, reservation) = glue::heap_bytes(head)?;
                drop(reservation);
                c.send_gathered(head, tail).await
            }
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.send_gathered(head, tail).await,
            AnyConnection::Grpc(c) => {
                let (head, _) = glue::heap_bytes(head)?;
                c.send_gathered(head, tail).await
            }
        }
    }

    fn recv_ready(&self, out: &mut Vec<RecvBuf>, max: usize) {
        match self {
            AnyConnection::Tcp(c) => c.recv_ready_each(max.saturating_sub(out.len()), |b| {
                out.push(glue::received(b))
            }),
            AnyConnection::Grpc(c) => {
                let mut frames = Vec::new();
                c.recv_ready(&mut frames, max.saturating_sub(out.len()));
                out.extend(frames.into_iter().map(glue::received));
            }
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.recv_ready(out, max),
        }
    }

    fn recv_ready_run(&self, out: &mut Vec<RecvBuf>, max: usize) -> Option<bytes::Bytes> {
        match self {
            AnyConnection::Tcp(c) => c.recv_ready_run_each(max.saturating_sub(out.len()), |b| {
                out.push(glue::received(b))
            }),
            _ => {
                self.recv_ready(out, max);
                None
            }
        }
    }

    fn push_to(&self, sink: std::sync::Arc<dyn rdmarpc_core::FrameSink<RecvBuf>>) -> bool {
        let _ = &sink; // used by RDMA only
        match self {
            AnyConnection::Tcp(_) | AnyConnection::Grpc(_) => false,
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.push_to(sink),
        }
    }

    fn peer(&self) -> String {
        match self {
            AnyConnection::Tcp(c) => c.peer(),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.peer(),
            AnyConnection::Grpc(c) => c.peer(),
        }
    }

    fn charges_requests(&self) -> bool {
        match self {
            AnyConnection::Grpc(c) => c.charges_requests(),
            _ => false,
        }
    }

    fn serving(
        &self,
        methods: std::sync::Arc<dyn rdmarpc_core::MethodKinds>,
        account: &rdmarpc_core::account::Account,
    ) {
        match self {
            AnyConnection::Tcp(c) => c.serving(methods, account),
            AnyConnection::Grpc(c) => c.serving(methods, account),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.serving(methods, account),
        }
    }

    fn calling(&self, method: &rdmarpc_core::codegen::MethodDescriptor) {
        match self {
            AnyConnection::Tcp(_) => {}
            AnyConnection::Grpc(c) => c.calling(method),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.calling(method),
        }
    }

    fn spin_until(&self, done: &mut dyn FnMut() -> bool, others: &dyn Fn() -> bool) -> bool {
        let _ = (&done, others); // used by RDMA only
        match self {
            AnyConnection::Tcp(_) | AnyConnection::Grpc(_) => false,
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.spin_until(done, others),
        }
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            AnyConnection::Tcp(c) => c.peer_addr(),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.peer_addr(),
            AnyConnection::Grpc(c) => c.peer_addr(),
        }
    }

    fn peer_certificates(&self) -> Option<Arc<[bytes::Bytes]>> {
        match self {
            AnyConnection::Tcp(c) => c.peer_certificates(),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.peer_certificates(),
            AnyConnection::Grpc(c) => c.peer_certificates(),
        }
    }
}
