//! [`AnyConnection`] and [`AnyListener`]: the transport chosen at run time from a URL
//! (`tcp://`, `rdma://`, `auto://`, `grpc://`, with or without TLS), statically
//! dispatched, so generated clients and servers run unchanged over any of them.

use std::sync::Arc;
use std::time::Duration;

use rpc_core::{Connection, Endpoint, Listener, TransportError, TransportKind};
#[cfg(feature = "rdma")]
use rpc_transport_rdma::{RdmaConfig, RdmaConnection, RdmaCounters};
use rpc_transport_tcp::rdma_hello::HELLO;
use rpc_transport_tcp::{
    Socket, TcpConfig, TcpConnection, TlsAcceptor, TlsConfig, ALPN_FRAMES, ALPN_H2,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::bufs::{MessageBuf, RecvBuf, SendBuf};
use crate::handshakes::Handshakes;

/// Whether this host has an RDMA device this process can use (always `false` without
/// the `rdma` feature).
pub fn rdma_available() -> bool {
    #[cfg(feature = "rdma")]
    return rpc_transport_rdma::rdma_available();
    #[cfg(not(feature = "rdma"))]
    return false;
}

/// Why `endpoint` (`rdma://`) cannot be served or dialled here.
fn no_rdma(endpoint: &Endpoint) -> TransportError {
    let why = if cfg!(feature = "rdma") {
        "this host has no RDMA device (ibv_get_device_list found none)"
    } else {
        "this program was built without RDMA (the `rdma` feature of rpc-transport)"
    };
    TransportError::Other(format!("{endpoint}: {why}; use tcp:// or auto://"))
}

/// Settings of both transports; what a `--config` file or flags fill in.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransportSettings {
    /// TCP settings (also used by `auto://` when it falls back).
    pub tcp: TcpConfig,
    /// RDMA settings.
    #[cfg(feature = "rdma")]
    pub rdma: RdmaConfig,
    /// gRPC (HTTP/2) settings, for standard gRPC clients on a listener's port.
    pub grpc: rpc_grpc::GrpcConfig,
    /// TLS certificates and keys, for `+tls` endpoints (clients and listeners).
    pub tls: TlsConfig,
    /// On a listener: time allowed from the accept until the connection is established
    /// (protocol detection, and the whole RDMA handshake); a socket that has not sent its
    /// first bytes or finished its handshake by then is closed. Default 10 s.
    pub handshake_timeout: Duration,
    /// On a listener: most connections in protocol detection or handshake at once
    /// (counting established ones waiting for the server to take them). A socket
    /// accepted beyond displaces the oldest handshake of the peer holding the most (the
    /// new socket's own peer when that is the heaviest): it is aborted and its socket
    /// closed (logged at debug, and counted in a rate-limited warning), so that sockets
    /// left silent never keep a lighter peer out, and never the newest socket of their
    /// own address either. Default 256.
    pub max_handshakes: usize,
    /// On a listener: most handshakes from one peer at once (an IPv4 address, an IPv6
    /// /64: `rpc_core::account::PeerKey`), a share of `max_handshakes`; a peer's socket
    /// beyond displaces that peer's own oldest handshake. Default 64 (a quarter of the
    /// default `max_handshakes`). Trade-off: smaller keeps one address from filling the
    /// table before the global cap is reached, but clients behind one NAT that open more
    /// connections than this at the same instant see their oldest handshakes closed
    /// (and must retry); larger serves such bursts, at the cost of one address holding
    /// more of the table (it is still the first displaced at the global cap).
    pub max_handshakes_per_peer: usize,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            tcp: TcpConfig::default(),
            #[cfg(feature = "rdma")]
            rdma: RdmaConfig::default(),
            grpc: rpc_grpc::GrpcConfig::default(),
            tls: TlsConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 256,
            max_handshakes_per_peer: 64,
        }
    }
}

impl TransportSettings {
    /// Sets the largest message on every transport.
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.tcp.max_message_size(bytes);
        #[cfg(feature = "rdma")]
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
    #[cfg(feature = "rdma")]
    Rdma(RdmaConnection),
    /// gRPC over HTTP/2: a standard gRPC client's connection (server side), or a
    /// connection to a gRPC server (`grpc://`, `grpcs://`).
    Grpc(rpc_grpc::GrpcConnection),
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
                bytes if bytes.len() >= rpc_core::memory::KEEP_MIN => Ok(bytes),
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
            AnyConnection::Rdma(_) => {}
        }
    }

    fn push_to(&self, sink: std::sync::Arc<dyn rpc_core::FrameSink<RecvBuf>>) -> bool {
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
        methods: std::sync::Arc<dyn rpc_core::MethodKinds>,
        account: &rpc_core::account::Account,
    ) {
        match self {
            AnyConnection::Tcp(c) => c.serving(methods, account),
            AnyConnection::Grpc(c) => c.serving(methods, account),
            #[cfg(feature = "rdma")]
            AnyConnection::Rdma(c) => c.serving(methods, account),
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

/// Connects to `endpoint`:
/// - `tcp://`: TCP.
/// - `rdma://`: RDMA, or an error naming why not (no local device, server without RDMA).
/// - `auto://`: RDMA when both ends have a device, otherwise TCP over the same socket;
///   logs one line saying which (at `info`, target `rpc_transport`).
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
    if endpoint.kind == TransportKind::Rdma && !rdma_available() {
        return Err(no_rdma(endpoint));
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
    rdma::connect(socket, endpoint, settings).await
}

/// Accepts connections of every kind on one TCP port: plain TCP clients, and RDMA
/// handshakes (answered with RDMA when this server serves it, else with a TCP fallback).
///
/// Each accepted socket's handshake runs on a task of its own, at most `max_handshakes` at
/// once (`max_handshakes_per_peer` from one peer) and each within `handshake_timeout`
/// (a handshake counts until the connection is queued for the server, so connections
/// waiting for room count too); a socket beyond displaces the oldest handshake of the
/// peer holding the most (see [`TransportSettings::max_handshakes`]).
#[derive(Debug)]
pub struct AnyListener {
    incoming: mpsc::Receiver<AnyConnection>,
    /// `None` once it stopped accepting: the queue ends when the last handshake does.
    tx: Option<mpsc::Sender<AnyConnection>>,
    /// `None` once it stopped accepting.
    listener: Option<tokio::net::TcpListener>,
    handshakes: Arc<parking_lot::Mutex<Running>>,
    displaced: u64,
    settings: Arc<TransportSettings>,
    tls: Option<TlsAcceptor>,
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
            TransportKind::Rdma if !rdma_available() => return Err(no_rdma(endpoint)),
            _ => rdma_available(),
        };
        if serves_rdma {
            rdma::validate(settings)?;
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
        Ok(AnyListener {
            incoming,
            tx: Some(tx),
            listener: Some(listener),
            handshakes: Arc::new(parking_lot::Mutex::new(Running {
                table: Handshakes::new(settings.max_handshakes, settings.max_handshakes_per_peer),
                aborts: std::collections::HashMap::new(),
            })),
            displaced: 0,
            settings: Arc::new(settings.clone()),
            tls,
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

    /// Starts the handshake of an accepted socket on a task of its own, displacing the
    /// oldest handshake of the heaviest peer when a cap is reached.
    fn handshake(&mut self, stream: TcpStream, peer: Option<std::net::SocketAddr>) {
        let Some(tx) = self.tx.clone() else { return };
        let ip = peer.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.ip());
        let key = rpc_core::account::PeerKey::of(ip);
        let admitted = self.handshakes.lock().table.admit(key);
        let peer = peer.map_or_else(|| "?".to_owned(), |p| p.to_string());
        let Some(admitted) = admitted else {
            // Full, and no peer over its fair share: the handshakes in progress finish.
            self.displaced += 1;
            if self.displaced.is_power_of_two() {
                tracing::warn!(%peer, %key, refused = self.displaced, "too many handshakes at once from many peers: closing the new socket");
            }
            return;
        };
        if let Some(old) = admitted.displaced {
            self.displace(old, &peer, key);
        }
        let ended = Ended {
            running: self.handshakes.clone(),
            id: admitted.id,
        };
        let (settings, tls, serves_rdma) =
            (self.settings.clone(), self.tls.clone(), self.serves_rdma);
        let task = tokio::spawn(async move {
            // Ends the handshake in the table however the task ends (done or aborted).
            let _ended = ended;
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
        });
        let mut running = self.handshakes.lock();
        // Unless it already ended.
        if running.table.contains(admitted.id) {
            running.aborts.insert(admitted.id, task.abort_handle());
        }
    }

    /// Aborts handshake `id` (closing its socket), displaced by a new socket from `peer`.
    fn displace(&mut self, id: u64, peer: &str, key: rpc_core::account::PeerKey) {
        let (abort, running, of_peer) = {
            let mut running = self.handshakes.lock();
            let abort = running.aborts.remove(&id);
            (abort, running.table.len(), running.table.of(key))
        };
        if let Some(abort) = abort {
            abort.abort();
        }
        self.displaced += 1;
        let (max, max_per_peer) = (
            self.settings.max_handshakes,
            self.settings.max_handshakes_per_peer,
        );
        tracing::debug!(%peer, %key, running, of_peer, max, max_per_peer, "handshake displaced by a new socket");
        if self.displaced.is_power_of_two() {
            tracing::warn!(%peer, %key, displaced = self.displaced, running, of_peer, max, max_per_peer, "too many handshakes at once: closing the oldest of the peer holding the most");
        }
    }
}

/// The handshakes running: the fair-share table, and the abort handle of each task.
#[derive(Debug)]
struct Running {
    table: Handshakes,
    aborts: std::collections::HashMap<u64, tokio::task::AbortHandle>,
}

/// Ends a handshake in [`Running`] when its task ends, whether done or aborted.
struct Ended {
    running: Arc<parking_lot::Mutex<Running>>,
    id: u64,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        running.table.finish(self.id);
        running.aborts.remove(&self.id);
    }
}

impl Listener for AnyListener {
    type Conn = AnyConnection;

    async fn accept(&mut self) -> Result<AnyConnection, TransportError> {
        loop {
            let accepted = tokio::select! {
                conn = self.incoming.recv() => return conn.ok_or(TransportError::Closed),
                accepted = accept_socket(self.listener.as_ref()) => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    self.handshake(stream, Some(peer));
                    // The new handshake gets its turn before the next accept: under a
                    // flood of sockets a quick handshake (bytes already there) completes
                    // before newer sockets of its address displace it.
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }

    fn stop_accepting(&mut self) -> bool {
        if let Some(listener) = self.listener.take() {
            for stream in rpc_transport_tcp::take_backlog(listener) {
                let peer = stream.peer_addr().ok();
                self.handshake(stream, peer);
            }
        }
        // The queue closes when the last handshake running ends.
        self.tx = None;
        true
    }
}

/// The next socket of `listener`; never, once it is gone.
async fn accept_socket(
    listener: Option<&tokio::net::TcpListener>,
) -> std::io::Result<(TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
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
    rdma::accept(socket, settings, serves_rdma).await
}

/// Buffers between the runtime and the TCP and gRPC connections: with the `rdma`
/// feature the RDMA crate's buffers (which hold heap bytes for them, and TCP's send
/// reservation), without it plain bytes.
#[cfg(feature = "rdma")]
mod glue {
    use bytes::{Bytes, BytesMut};
    use rpc_core::TransportError;
    use rpc_transport_tcp::{SendReservation, TcpConnection};

    use crate::bufs::{RecvBuf, SendBuf};

    /// A TCP frame's buffer, built only once the send queue has room for it.
    pub(super) async fn tcp_alloc(
        c: &TcpConnection,
        len: usize,
    ) -> Result<SendBuf, TransportError> {
        Ok(SendBuf::bytes(len, c.reserve(len).await?))
    }

    pub(super) fn heap(len: usize) -> SendBuf {
        SendBuf::heap(len)
    }

    pub(super) fn heap_bytes(
        frame: SendBuf,
    ) -> Result<(BytesMut, Option<SendReservation>), TransportError> {
        frame.into_heap().ok_or_else(|| {
            TransportError::Other("an RDMA buffer sent on a TCP or gRPC connection".into())
        })
    }

    pub(super) fn received(bytes: Bytes) -> RecvBuf {
        RecvBuf::from_bytes(bytes)
    }

    pub(super) fn received_bytes(frame: RecvBuf) -> Result<Bytes, RecvBuf> {
        frame.into_bytes()
    }
}

/// Without RDMA the buffers are plain bytes, and a TCP frame reserves its room in the
/// send queue when it is sent, as with `TcpConnection` alone (a buffer that carried the
/// reservation from `alloc` would have to implement `BufMut` itself, which takes unsafe
/// code, kept to the RDMA crate): the bound on queued bytes holds either way.
#[cfg(not(feature = "rdma"))]
mod glue {
    use bytes::{Bytes, BytesMut};
    use rpc_core::{Connection, TransportError};
    use rpc_transport_tcp::{SendReservation, TcpConnection};

    pub(super) async fn tcp_alloc(
        c: &TcpConnection,
        len: usize,
    ) -> Result<BytesMut, TransportError> {
        c.alloc(len).await
    }

    pub(super) fn heap(len: usize) -> BytesMut {
        BytesMut::with_capacity(len)
    }

    pub(super) fn heap_bytes(
        frame: BytesMut,
    ) -> Result<(BytesMut, Option<SendReservation>), TransportError> {
        Ok((frame, None))
    }

    pub(super) fn received(bytes: Bytes) -> Bytes {
        bytes
    }

    pub(super) fn received_bytes(frame: Bytes) -> Result<Bytes, Bytes> {
        Ok(frame)
    }
}

/// RDMA's side: the client's and the server's handshake on an open socket.
#[cfg(feature = "rdma")]
mod rdma {
    use rpc_core::{Endpoint, TransportError, TransportKind};
    use rpc_transport_rdma::{handshake_client, handshake_server, Negotiated};
    use rpc_transport_tcp::{Socket, TcpConnection};

    use super::{AnyConnection, TransportSettings};

    /// Offers RDMA on `socket` (`rdma://`, or `auto://` with a local device).
    pub(super) async fn connect(
        socket: Socket,
        endpoint: &Endpoint,
        settings: &TransportSettings,
    ) -> Result<AnyConnection, TransportError> {
        let fallback = endpoint.kind != TransportKind::Rdma;
        match handshake_client(socket, &settings.rdma, fallback).await? {
            Negotiated::Rdma(conn) => {
                if fallback {
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
            other => Err(TransportError::Other(format!(
                "{endpoint}: unexpected RDMA handshake outcome {other:?}"
            ))),
        }
    }

    /// The RDMA settings a listener serving RDMA will use, checked before it binds.
    pub(super) fn validate(settings: &TransportSettings) -> Result<(), TransportError> {
        settings.rdma.validate().map_err(TransportError::Other)
    }

    /// Answers an RDMA hello (its first 8 bytes read): RDMA when this listener serves
    /// it, else a refusal, after which the socket carries TCP.
    pub(super) async fn accept(
        socket: Socket,
        settings: &TransportSettings,
        serves_rdma: bool,
    ) -> Result<Option<AnyConnection>, String> {
        let rdma = serves_rdma.then_some(&settings.rdma);
        match handshake_server(socket, rdma).await? {
            Ok(conn) => Ok(Some(AnyConnection::Rdma(conn))),
            Err(socket) => TcpConnection::accepted(socket, &settings.tcp, &[])
                .map(|c| Some(AnyConnection::Tcp(c)))
                .map_err(|e| e.to_string()),
        }
    }
}

/// Without the `rdma` feature: `rdma://` never gets here (refused earlier), `auto://` is
/// TCP, and RDMA clients' hellos are refused so that `auto://` clients fall back.
#[cfg(not(feature = "rdma"))]
mod rdma {
    use rpc_core::{Endpoint, TransportError};
    use rpc_transport_tcp::rdma_hello::refuse_hello;
    use rpc_transport_tcp::{Socket, TcpConnection};

    use super::{no_rdma, AnyConnection, TransportSettings};

    pub(super) async fn connect(
        _socket: Socket,
        endpoint: &Endpoint,
        _settings: &TransportSettings,
    ) -> Result<AnyConnection, TransportError> {
        Err(no_rdma(endpoint))
    }

    pub(super) fn validate(_settings: &TransportSettings) -> Result<(), TransportError> {
        Ok(())
    }

    pub(super) async fn accept(
        mut socket: Socket,
        settings: &TransportSettings,
        _serves_rdma: bool,
    ) -> Result<Option<AnyConnection>, String> {
        refuse_hello(&mut socket, "this server was built without RDMA")
            .await
            .map_err(|e| format!("refusing an RDMA hello: {e}"))?;
        TcpConnection::accepted(socket, &settings.tcp, &[])
            .map(|c| Some(AnyConnection::Tcp(c)))
            .map_err(|e| e.to_string())
    }
}
