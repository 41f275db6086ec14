//! [`AnyListener`]: one port for every transport; each accepted socket's handshake on a
//! task of its own, bounded in number per peer and in time.

use std::sync::Arc;

use rdmarpc_core::{Endpoint, Listener, TransportError, TransportKind};
use rdmarpc_transport_tcp::rdma_hello::HELLO;
use rdmarpc_transport_tcp::{Socket, TcpConnection, TlsAcceptor, ALPN_FRAMES, ALPN_H2};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{no_rdma, rdma, rdma_available, AnyConnection, TransportSettings};
use crate::handshakes::Handshakes;

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
        let key = rdmarpc_core::account::PeerKey::of(ip);
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
    fn displace(&mut self, id: u64, peer: &str, key: rdmarpc_core::account::PeerKey) {
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
            let (stream, peer) = accepted;
            self.handshake(stream, Some(peer));
            // The new handshake gets its turn before the next accept: under a flood of
            // sockets a quick handshake (bytes already there) completes before newer
            // sockets of its address displace it.
            tokio::task::yield_now().await;
        }
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }

    fn stop_accepting(&mut self) -> bool {
        if let Some(listener) = self.listener.take() {
            for stream in rdmarpc_transport_tcp::take_backlog(listener) {
                let peer = stream.peer_addr().ok();
                self.handshake(stream, peer);
            }
        }
        // The queue closes when the last handshake running ends.
        self.tx = None;
        true
    }
}

/// The next socket of `listener` (accept errors are retried after a back-off); never,
/// once it is gone.
async fn accept_socket(
    listener: Option<&tokio::net::TcpListener>,
) -> (TcpStream, std::net::SocketAddr) {
    match listener {
        Some(listener) => rdmarpc_transport_tcp::accept_socket(listener).await,
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
    if first == rdmarpc_grpc::PREFACE[..8] {
        let peer = socket.peer_addr().ok();
        let certificates = socket.peer_certificates().map(Arc::from);
        let tls = socket.is_tls();
        return rdmarpc_grpc::GrpcConnection::accept(socket, &first, &settings.grpc, peer)
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
