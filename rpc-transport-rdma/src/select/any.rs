//! [`AnyConnection`] and [`AnyListener`]: the transport chosen at run time from a URL
//! (`tcp://`, `rdma://`, `auto://`), statically dispatched, so generated clients and
//! servers run unchanged over either.

use std::sync::Arc;
use std::time::Duration;

use rpc_core::{Connection, Endpoint, Listener, TransportError, TransportKind};
use rpc_transport_tcp::{
    Socket, TcpConfig, TcpConnection, TlsAcceptor, TlsConfig, ALPN_FRAMES, ALPN_H2,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

use crate::connection::{RdmaConnection, Received, RecvBuf};
use crate::counters::RdmaCounters;
use crate::handshake::{Mode, HELLO};
use crate::setup::{self, Negotiated};
use crate::verbs::{rdma_available, SendBuf, Target};
use crate::RdmaConfig;

/// Settings of both transports; what a `--config` file or flags fill in.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransportSettings {
    /// TCP settings (also used by `auto://` when it falls back).
    pub tcp: TcpConfig,
    /// RDMA settings.
    pub rdma: RdmaConfig,
    /// gRPC (HTTP/2) settings, for standard gRPC clients on a listener's port.
    pub grpc: rpc_grpc::GrpcConfig,
    /// TLS certificates and keys, for `+tls` endpoints (clients and listeners).
    pub tls: TlsConfig,
    /// On a listener: time allowed from the accept until the connection is established
    /// (protocol detection, and the whole RDMA handshake); a socket that has not sent its
    /// first bytes or finished its handshake by then is closed. Default 10 s.
    pub handshake_timeout: Duration,
    /// On a listener: most connections in protocol detection or handshake at once;
    /// sockets accepted beyond are closed at once (and counted in the log). Default 256.
    pub max_handshakes: usize,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            tcp: TcpConfig::default(),
            rdma: RdmaConfig::default(),
            grpc: rpc_grpc::GrpcConfig::default(),
            tls: TlsConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 256,
        }
    }
}

impl TransportSettings {
    /// Sets the largest message on both transports.
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.tcp.max_message_size(bytes);
        self.rdma.max_message_size(bytes);
        self.grpc.max_message_size(bytes);
        self
    }
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
    Rdma(RdmaConnection),
    /// gRPC over HTTP/2: a standard gRPC client's connection (server side), or a
    /// connection to a gRPC server (`grpc://`, `grpcs://`).
    Grpc(rpc_grpc::GrpcConnection),
}

impl AnyConnection {
    /// The transport in use: [`TransportKind::Tcp`] or [`TransportKind::Rdma`].
    pub fn transport(&self) -> TransportKind {
        match self {
            AnyConnection::Tcp(_) => TransportKind::Tcp,
            AnyConnection::Rdma(_) => TransportKind::Rdma,
            AnyConnection::Grpc(_) => TransportKind::Grpc,
        }
    }

    /// A buffer of `len` bytes for a large message field: registered memory of the RDMA
    /// connection (sent from where it lies, see [`RdmaConnection::message_buf`]), or heap
    /// memory over TCP (where a large field is written from where it lies anyway).
    pub fn message_buf(&self, len: usize) -> crate::MessageBuf {
        match self {
            AnyConnection::Rdma(c) => c.message_buf(len),
            AnyConnection::Tcp(_) | AnyConnection::Grpc(_) => crate::MessageBuf::heap(len),
        }
    }

    /// RDMA counters, when on RDMA.
    pub fn rdma_counters(&self) -> Option<RdmaCounters> {
        match self {
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
            // The frame is built only once the send queue has room for it.
            AnyConnection::Tcp(c) => Ok(SendBuf::bytes(len, c.reserve(len).await?)),
            AnyConnection::Rdma(c) => c.alloc(len).await,
            AnyConnection::Grpc(c) => {
                c.alloc(len).await?;
                Ok(SendBuf::heap(len))
            }
        }
    }

    async fn send(&self, frame: SendBuf) -> Result<(), TransportError> {
        match (self, frame.target) {
            (AnyConnection::Tcp(c), Target::Bytes(bytes)) => match frame.reservation {
                Some(reservation) => c.send_reserved(bytes, reservation).await,
                None => c.send(bytes).await,
            },
            (AnyConnection::Rdma(c), target) => {
                c.send(SendBuf {
                    target,
                    filled: frame.filled,
                    cap: frame.cap,
                    reservation: None,
                })
                .await
            }
            (AnyConnection::Grpc(c), Target::Bytes(bytes)) => c.send(bytes).await,
            (AnyConnection::Tcp(_) | AnyConnection::Grpc(_), Target::Registered(_)) => Err(
                TransportError::Other("an RDMA buffer sent on a TCP connection".into()),
            ),
        }
    }

    async fn recv(&self) -> Result<Option<RecvBuf>, TransportError> {
        match self {
            AnyConnection::Tcp(c) => Ok(c.recv().await?.map(|b| RecvBuf(Received::Bytes(b)))),
            AnyConnection::Rdma(c) => c.recv().await,
            AnyConnection::Grpc(c) => Ok(c.recv().await?.map(|b| RecvBuf(Received::Bytes(b)))),
        }
    }

    fn close(&self) {
        match self {
            AnyConnection::Tcp(c) => c.close(),
            AnyConnection::Rdma(c) => c.close(),
            AnyConnection::Grpc(c) => c.close(),
        }
    }

    async fn shutdown(&self) {
        match self {
            AnyConnection::Tcp(c) => c.shutdown().await,
            AnyConnection::Rdma(c) => c.close(),
            AnyConnection::Grpc(c) => c.shutdown().await,
        }
    }

    fn keep(&self, frame: RecvBuf) -> Result<bytes::Bytes, RecvBuf> {
        match self {
            AnyConnection::Tcp(c) => match frame.into_received() {
                Received::Bytes(bytes) => c.keep(bytes).map_err(|b| RecvBuf(Received::Bytes(b))),
                other => Err(RecvBuf(other)),
            },
            AnyConnection::Rdma(c) => c.keep(frame),
            // Frames a gRPC call was translated into: the application may keep large ones.
            AnyConnection::Grpc(_) => match frame.into_received() {
                Received::Bytes(bytes) if bytes.len() >= rpc_core::memory::KEEP_MIN => Ok(bytes),
                other => Err(RecvBuf(other)),
            },
        }
    }

    fn max_frames_per_buffer(&self) -> usize {
        match self {
            AnyConnection::Tcp(c) => c.max_frames_per_buffer(),
            AnyConnection::Rdma(c) => c.max_frames_per_buffer(),
            AnyConnection::Grpc(c) => c.max_frames_per_buffer(),
        }
    }

    fn gather_min(&self) -> Option<usize> {
        match self {
            AnyConnection::Tcp(c) => c.gather_min(),
            AnyConnection::Rdma(c) => c.gather_min(),
            AnyConnection::Grpc(c) => c.gather_min(),
        }
    }

    async fn send_gathered(
        &self,
        head: SendBuf,
        tail: Vec<bytes::Bytes>,
    ) -> Result<(), TransportError> {
        let SendBuf {
            target,
            filled,
            cap,
            reservation,
        } = head;
        // The head's reservation made room for the head alone: the whole frame reserves
        // again (after this one is given back, so that it never waits for itself).
        drop(reservation);
        match (self, target) {
            (AnyConnection::Tcp(c), Target::Bytes(bytes)) => c.send_gathered(bytes, tail).await,
            (AnyConnection::Rdma(c), target) => {
                let head = SendBuf {
                    target,
                    filled,
                    cap,
                    reservation: None,
                };
                c.send_gathered(head, tail).await
            }
            (AnyConnection::Grpc(c), Target::Bytes(bytes)) => c.send_gathered(bytes, tail).await,
            (AnyConnection::Tcp(_) | AnyConnection::Grpc(_), Target::Registered(_)) => Err(
                TransportError::Other("an RDMA buffer sent on a TCP connection".into()),
            ),
        }
    }

    fn recv_ready(&self, out: &mut Vec<RecvBuf>, max: usize) {
        match self {
            AnyConnection::Tcp(c) => c.recv_ready_each(max.saturating_sub(out.len()), |b| {
                out.push(RecvBuf(Received::Bytes(b)))
            }),
            AnyConnection::Grpc(c) => {
                let mut frames = Vec::new();
                c.recv_ready(&mut frames, max.saturating_sub(out.len()));
                out.extend(frames.into_iter().map(|b| RecvBuf(Received::Bytes(b))));
            }
            AnyConnection::Rdma(_) => {}
        }
    }

    fn push_to(&self, sink: std::sync::Arc<dyn rpc_core::FrameSink<RecvBuf>>) -> bool {
        match self {
            AnyConnection::Tcp(_) | AnyConnection::Grpc(_) => false,
            AnyConnection::Rdma(c) => c.push_to(sink),
        }
    }

    fn peer(&self) -> String {
        match self {
            AnyConnection::Tcp(c) => c.peer(),
            AnyConnection::Rdma(c) => c.peer(),
            AnyConnection::Grpc(c) => c.peer(),
        }
    }

    fn serving(&self, methods: std::sync::Arc<dyn rpc_core::MethodKinds>) {
        if let AnyConnection::Grpc(c) = self {
            c.serving(methods);
        }
    }

    fn calling(&self, method: &rpc_core::codegen::MethodDescriptor) {
        if let AnyConnection::Grpc(c) = self {
            c.calling(method);
        }
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            AnyConnection::Tcp(c) => c.peer_addr(),
            AnyConnection::Rdma(c) => c.peer_addr(),
            AnyConnection::Grpc(c) => c.peer_addr(),
        }
    }

    fn peer_certificates(&self) -> Option<Arc<[bytes::Bytes]>> {
        match self {
            AnyConnection::Tcp(c) => c.peer_certificates(),
            AnyConnection::Rdma(c) => c.peer_certificates(),
            AnyConnection::Grpc(c) => c.peer_certificates(),
        }
    }
}

/// Connects to `endpoint`:
/// - `tcp://`: TCP.
/// - `rdma://`: RDMA, or an error naming why not (no local device, server without RDMA).
/// - `auto://`: RDMA when both ends have a device, otherwise TCP over the same socket;
///   logs one line saying which (at `info`, target `rpc_transport_rdma`).
/// - `grpc://`, `grpcs://`: HTTP/2 to a gRPC server (any implementation), over TLS with
///   ALPN `h2` for `grpcs://`.
///
/// With `+tls` (`tcp+tls://`, ...) the TCP connection, or RDMA's side channel (the
/// handshake, and the channel whose end closes the connection), runs under TLS with
/// [`TransportSettings::tls`]; RDMA's data path itself is not encrypted.
///
/// # Errors
/// Connect or handshake failure; under TLS, a server certificate that does not verify.
pub async fn connect(
    endpoint: &Endpoint,
    settings: &TransportSettings,
) -> Result<AnyConnection, TransportError> {
    let address = endpoint.address.as_str();
    match endpoint.kind {
        TransportKind::Rdma if !rdma_available() => {
            return Err(TransportError::Other(format!(
                "{endpoint}: this host has no RDMA device (ibv_get_device_list found none); use tcp:// or auto://"
            )))
        }
        _ => {}
    }
    let grpc = endpoint.kind == TransportKind::Grpc;
    // The connector first: bad TLS settings fail before a socket is opened.
    let tls = match endpoint.tls {
        true if grpc => Some(settings.tls.connector(&[ALPN_H2])?),
        true => Some(settings.tls.connector(&[ALPN_FRAMES])?),
        false => None,
    };
    let stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let socket = match tls {
        Some(tls) => tls.connect(address, stream).await?,
        None => Socket::Plain(stream),
    };
    match endpoint.kind {
        TransportKind::Grpc => {
            let peer = socket.peer_addr().ok();
            let certificates = socket.peer_certificates().map(Arc::from);
            let conn = rpc_grpc::GrpcConnection::connect(
                socket,
                address,
                endpoint.tls,
                &settings.grpc,
                peer,
            )
            .await?;
            return Ok(AnyConnection::Grpc(
                conn.with_peer_certificates(certificates),
            ));
        }
        TransportKind::Tcp => {
            return Ok(AnyConnection::Tcp(TcpConnection::from_stream(
                socket,
                &settings.tcp,
            )?))
        }
        TransportKind::Auto if !rdma_available() => {
            tracing::info!(%endpoint, "auto: no local RDMA device, using TCP");
            return Ok(AnyConnection::Tcp(TcpConnection::from_stream(
                socket,
                &settings.tcp,
            )?));
        }
        _ => {}
    }
    let mode = if endpoint.kind == TransportKind::Rdma {
        Mode::Rdma
    } else {
        Mode::Auto
    };
    match setup::client(socket, &settings.rdma, mode).await? {
        Negotiated::Rdma(conn) => {
            if mode == Mode::Auto {
                tracing::info!(%endpoint, "auto: using RDMA");
            }
            Ok(AnyConnection::Rdma(conn))
        }
        Negotiated::Tcp(socket, reason) => {
            tracing::info!(%endpoint, "auto: using TCP ({reason})");
            Ok(AnyConnection::Tcp(TcpConnection::from_stream(
                socket,
                &settings.tcp,
            )?))
        }
    }
}

/// Accepts connections of every kind on one TCP port: plain TCP clients, and RDMA
/// handshakes (answered with RDMA when this server serves it, else with a TCP fallback).
#[derive(Debug)]
pub struct AnyListener {
    incoming: mpsc::Receiver<AnyConnection>,
    local: String,
    serves_rdma: bool,
}

impl AnyListener {
    /// Binds `endpoint`. `rdma://` requires a local RDMA device; `auto://` serves RDMA
    /// when one exists; `tcp://` answers RDMA handshakes with a TCP fallback. With `+tls`
    /// every connection must begin with a TLS handshake ([`TransportSettings::tls`]
    /// names the certificate and key, and the CA of clients under mutual TLS); inside
    /// it, the same kinds of connection are told apart as on a plain port.
    ///
    /// # Errors
    /// Bind failure, `rdma://` on a host without RDMA, unusable TLS settings.
    pub async fn bind(
        endpoint: &Endpoint,
        settings: &TransportSettings,
    ) -> Result<AnyListener, TransportError> {
        let serves_rdma = match endpoint.kind {
            TransportKind::Tcp | TransportKind::Grpc => false,
            TransportKind::Rdma if !rdma_available() => {
                return Err(TransportError::Other(format!(
                    "{endpoint}: this host has no RDMA device; use tcp:// or auto://"
                )))
            }
            _ => rdma_available(),
        };
        if let Some(e) = serves_rdma
            .then(|| settings.rdma.validate().err())
            .flatten()
        {
            return Err(TransportError::Other(e));
        }
        let tls = match endpoint.tls {
            true => Some(settings.tls.acceptor(&[ALPN_H2, ALPN_FRAMES])?),
            false => None,
        };
        let listener = tokio::net::TcpListener::bind(endpoint.address.as_str()).await?;
        let local_addr = listener.local_addr()?;
        let local = format!("{}://{local_addr}", endpoint.scheme());
        tracing::info!(%local, rdma = serves_rdma, tls = endpoint.tls, "listening");
        let (tx, incoming) = mpsc::channel(64);
        let settings = Arc::new(settings.clone());
        tokio::spawn(accept_loop(listener, tx, settings, serves_rdma, tls));
        Ok(AnyListener {
            incoming,
            local,
            serves_rdma,
        })
    }

    /// Whether RDMA handshakes are answered with RDMA.
    pub fn serves_rdma(&self) -> bool {
        self.serves_rdma
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.local
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }
}

impl Listener for AnyListener {
    type Conn = AnyConnection;

    async fn accept(&mut self) -> Result<AnyConnection, TransportError> {
        self.incoming.recv().await.ok_or(TransportError::Closed)
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

/// Accepts sockets and establishes connections, each on its own task, at most
/// `max_handshakes` at once and each within `handshake_timeout` (the permit is held until
/// the connection is queued for the server, so connections waiting for room count too).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    tx: mpsc::Sender<AnyConnection>,
    settings: Arc<TransportSettings>,
    serves_rdma: bool,
    tls: Option<TlsAcceptor>,
) {
    let handshakes = Arc::new(Semaphore::new(settings.max_handshakes.max(1)));
    let mut refused = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = tx.closed() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                    refused += 1;
                    if refused.is_power_of_two() {
                        tracing::warn!(%peer, refused, max = settings.max_handshakes, "too many handshakes at once: closing new sockets");
                    }
                    drop(stream);
                    continue;
                };
                let (tx, settings, tls) = (tx.clone(), settings.clone(), tls.clone());
                tokio::spawn(async move {
                    let timeout = settings.handshake_timeout;
                    let classified = tokio::time::timeout(
                        timeout,
                        classify(stream, &settings, serves_rdma, tls.as_ref()),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "not established within {timeout:?} (handshake timeout)"
                        ))
                    });
                    match classified {
                        Ok(Some(conn)) => {
                            let _ = tx.send(conn).await;
                        }
                        Ok(None) => tracing::debug!(%peer, "connection closed before a byte"),
                        Err(e) => tracing::warn!(%peer, "dropping connection: {e}"),
                    }
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// Tells a plain TCP client, an RDMA handshake and a gRPC (HTTP/2) client apart by the
/// first 8 bytes (under TLS, the first 8 bytes inside it).
///
/// # Returns
/// `Ok(None)` for a peer that left without sending a byte (a port probe: health checks,
/// load balancers), which is not worth a warning.
async fn classify(
    stream: TcpStream,
    settings: &TransportSettings,
    serves_rdma: bool,
    tls: Option<&TlsAcceptor>,
) -> Result<Option<AnyConnection>, String> {
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut socket = match tls {
        None => Socket::Plain(stream),
        Some(tls) => {
            let mut first = [0u8; 1];
            match stream.peek(&mut first).await {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(e) => return Err(format!("reading the first byte: {e}")),
            }
            // A TLS record of type handshake (22).
            if first[0] != 0x16 {
                return Err("not a TLS handshake on a TLS port (a plaintext client?)".into());
            }
            tls.accept(stream).await.map_err(|e| e.to_string())?
        }
    };
    let mut first = [0u8; 8];
    let mut got = 0;
    while got < first.len() {
        match socket.read(&mut first[got..]).await {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(format!("connection closed after {got} bytes")),
            Ok(n) => got += n,
            Err(e) => return Err(format!("reading the first bytes: {e}")),
        }
    }
    if first == rpc_grpc::PREFACE[..8] {
        let peer = socket.peer_addr().ok();
        let certificates = socket.peer_certificates().map(Arc::from);
        let tls = socket.is_tls();
        return rpc_grpc::GrpcConnection::accept(socket, &first, &settings.grpc, peer)
            .await
            .map(|c| {
                let c = c.with_peer_certificates(certificates);
                Some(AnyConnection::Grpc(if tls { c.under_tls() } else { c }))
            })
            .map_err(|e| e.to_string());
    }
    if &first != HELLO {
        return TcpConnection::accepted(socket, &settings.tcp, &first)
            .map(|c| Some(AnyConnection::Tcp(c)))
            .map_err(|e| e.to_string());
    }
    let rdma = serves_rdma.then_some(&settings.rdma);
    match setup::server(socket, rdma).await? {
        Ok(conn) => Ok(Some(AnyConnection::Rdma(conn))),
        Err(socket) => TcpConnection::accepted(socket, &settings.tcp, &[])
            .map(|c| Some(AnyConnection::Tcp(c)))
            .map_err(|e| e.to_string()),
    }
}
