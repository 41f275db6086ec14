//! Building an [`RdmaConnection`] on either side of the handshake.

use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use rdmarpc_core::TransportError;
use rdmarpc_transport_tcp::Socket;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{watch, Notify};

use crate::completion::Membership;
use crate::connection::{max_frame, Inner, KeptBytes, RdmaConnection, Sends, State};
use crate::counters::Counters;
use crate::device::Device;
use crate::driver::{self, READ_WR_BUDGET};
use crate::fabric::Wanted;
use crate::handshake::{self, Mode, Offer, BLOCK, HELLO, NONE, OKAY, READY};
use crate::pool::LargePool;
use crate::protocol::session::{Session, SessionConfig};
use crate::protocol::{LoanLimit, PREFIX_LEN};
use crate::verbs::{
    Access, PreparedRings, ProtectionDomain, QpConfig, RingGeometry, Rings, SendSlot,
};
use crate::RdmaConfig;

/// Verbs resources of a connection before the peer's endpoint is known.
#[derive(Debug)]
pub(crate) struct Prepared {
    device: Arc<Device>,
    rings: PreparedRings,
    completion: Membership,
    pd: Arc<ProtectionDomain>,
}

/// The socket's local address (an IPv4-mapped IPv6 address as IPv4).
fn local_ip(stream: &Socket) -> Option<IpAddr> {
    Some(stream.local_addr().ok()?.ip().to_canonical())
}

/// Opens the device that owns the socket's local address (or the configured one) and
/// prepares a QP with its rings.
pub(crate) fn prepare(config: &RdmaConfig, stream: &Socket) -> Result<Prepared, String> {
    prepare_at(config, local_ip(stream))
}

/// [`prepare`] for a socket whose local address is `local`: blocking verbs calls and
/// registrations, for `spawn_blocking`.
fn prepare_at(config: &RdmaConfig, local: Option<IpAddr>) -> Result<Prepared, String> {
    config.validate()?;
    let wanted = Wanted {
        device: config.device.as_deref(),
        port: config.port,
        gid_index: config.gid_index,
        local,
    };
    let device = Device::get(&wanted).map_err(|e| e.to_string())?;
    // Sends and control messages (one per slot) and READs. Lent buffers are registered
    // in the connection's own PD and lent by their own key (`Access::Lendable`): no
    // work request per loan. (Lending through memory windows would need a bind and an
    // invalidation per loan, 2 x max_loans more.) The send queue's depth is most of a
    // connection's kernel-side queue memory: 352 entries before, 96 now by default.
    let max_send_wr = config.ring_slots + READ_WR_BUDGET as u32;
    // Room on a shared CQ for every completion the QP can have outstanding.
    let mut completion = Membership::join(&device, max_send_wr + config.ring_slots, config)?;
    let qp_config = QpConfig {
        max_send_wr,
        max_recv_wr: config.ring_slots,
        timeout: config.ack_timeout,
        max_inline: config.max_inline,
        ..QpConfig::default()
    };
    let geometry = RingGeometry {
        send_slots: config.initial_slots(),
        recv_slots: config.initial_slots(),
        max_slots: config.ring_slots,
        slot_size: config.slot_size,
    };
    // A protection domain of its own: the keys of what this connection lends are
    // useless to every other QP (see docs/limits.md, "Memory isolation").
    let pd = Arc::new(ProtectionDomain::new(&device.context).map_err(|e| e.to_string())?);
    let rings = PreparedRings::new(&pd, completion.cq(), &qp_config, geometry)
        .map_err(|e| e.to_string())?;
    completion.admit(rings.qp_num());
    Ok(Prepared {
        device,
        rings,
        completion,
        pd,
    })
}

impl Prepared {
    fn offer(&self, mode: Mode, config: &RdmaConfig) -> Offer {
        Offer {
            mode,
            endpoint: self.rings.endpoint(),
            recv_slots: config.initial_slots(),
            slot_size: config.slot_size,
            rdv_budget: config.lend_budget(),
            max_loans: config.max_loans,
        }
    }

    /// Moves the QP to RTS towards `remote`.
    fn connect(self, remote: &Offer) -> Result<Connected, String> {
        let (rings, slots) = self
            .rings
            .connect(&remote.endpoint)
            .map_err(|e| e.to_string())?;
        Ok(Connected {
            device: self.device,
            pd: self.pd,
            completion: self.completion,
            rings,
            slots,
            remote: *remote,
        })
    }
}

/// A connection whose QP is in RTS, not yet started.
#[derive(Debug)]
struct Connected {
    device: Arc<Device>,
    pd: Arc<ProtectionDomain>,
    rings: Rings,
    completion: Membership,
    slots: Vec<SendSlot>,
    remote: Offer,
}

impl Connected {
    /// Starts the connection: its task, and its place on the shared CQ (completions and
    /// timers).
    fn start(self, side: Socket, config: &RdmaConfig) -> RdmaConnection {
        let peer_addr = side.peer_addr().ok();
        let scheme = if side.is_tls() { "rdma+tls" } else { "rdma" };
        let peer = match peer_addr {
            Some(addr) => format!("{scheme}://{addr}"),
            None => format!("{scheme}://?"),
        };
        let qp_num = self.rings.qp_num();
        let (rings, slots, remote) = (self.rings, self.slots, &self.remote);
        // What fits the peer's slots, and our own threshold, whichever is smaller.
        let eager_limit = config
            .eager_limit()
            .min(remote.slot_size as usize - PREFIX_LEN);
        let max_frame = max_frame(config.max_message_size);
        let slot_size = rings.geometry().slot_size as usize;
        let session_config = session_config(config, remote, slot_size, max_frame);
        let (closed, _) = watch::channel(None);
        let inner = Arc::new(Inner {
            rings,
            completion: self.completion,
            state: Mutex::new(State {
                session: Session::new(session_config, Instant::now()),
                sends: Sends::new(slots),
            }),
            space: Notify::new(),
            closed,
            counters: Counters::registered(),
            receiving: Default::default(),
            cause_logged: AtomicBool::new(false),
            frames: Default::default(),
            tx_pool: LargePool::new(self.pd.clone(), Access::Lendable, config.pool_keep_bytes),
            // Lendable too: a kept frame sent on is lent from where it lies. Only this
            // connection's frames ever land in them.
            rx_pool: LargePool::new(self.pd.clone(), Access::Lendable, config.pool_keep_bytes),
            msg_pool: LargePool::new(self.pd.clone(), Access::Lendable, 0),
            kept: Arc::new(KeptBytes {
                held: Default::default(),
                max: config.keep_bytes,
                regions: Default::default(),
            }),
            peer,
            route: self.device.context.describe(),
            peer_addr,
            peer_certificates: side.peer_certificates().map(Arc::from),
            max_frame,
            eager_limit,
            loan_charges: Default::default(),
        });
        crate::events::register(self.device.context.name(), qp_num, &inner);
        // Completions reaped before now are handled first.
        inner.completion.attach(
            &inner,
            (config.ping_interval / 2).min(config.loan_timeout / 2),
        );
        // The peer may start with more receive slots than we have send slots.
        if let Err(why) = driver::grow(&inner) {
            inner.fail(why);
        }
        tokio::spawn(driver::run(inner.clone(), side));
        tracing::debug!(peer = %inner.peer, device = self.device.context.name(), eager_limit, "RDMA connection established");
        RdmaConnection { inner }
    }
}

/// The session's limits and timers: `config`'s, within what the peer offered
/// (`remote`); `slot_size` is our receive slots' (read-done tokens per control message).
fn session_config(
    config: &RdmaConfig,
    remote: &Offer,
    slot_size: usize,
    max_frame: usize,
) -> SessionConfig {
    SessionConfig {
        peer_slots: remote.recv_slots,
        own_slots: config.initial_slots(),
        max_slots: config.ring_slots,
        credit_threshold: (config.ring_slots / 8).max(2),
        lend: LoanLimit {
            bytes: config.lend_budget().min(remote.rdv_budget),
            loans: usize::from(config.max_loans.min(remote.max_loans)),
        },
        borrow: LoanLimit {
            bytes: config.lend_budget(),
            loans: usize::from(config.max_loans),
        },
        max_frame,
        max_message_size: config.max_message_size,
        read_chunk: config.read_chunk,
        read_wr_budget: READ_WR_BUDGET,
        max_tokens: (slot_size - PREFIX_LEN) / 8,
        ping_interval: config.ping_interval,
        ping_timeout: config.ping_timeout,
        loan_timeout: config.loan_timeout,
    }
}

/// What a client's RDMA handshake ended in ([`handshake_client`]).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // Once per connection, moved once.
#[non_exhaustive]
pub enum Negotiated {
    /// RDMA is up.
    Rdma(RdmaConnection),
    /// The server declined (reason); the socket carries TCP from here.
    Tcp(Socket, String),
}

/// The client side of the RDMA handshake on `socket`, a TCP connection (plain or TLS) to
/// a server's port: offers RDMA and, once the server accepts, connects the queue pairs;
/// the socket stays open as the side channel. A server that refuses (no device, or
/// TCP only) ends in [`Negotiated::Tcp`] with its reason when `fallback` is set (as
/// `auto://` asks), else in an error.
///
/// # Errors
/// Local set-up failure (no usable device), a handshake error, or, without `fallback`,
/// the server's refusal.
pub async fn handshake_client(
    socket: Socket,
    config: &RdmaConfig,
    fallback: bool,
) -> Result<Negotiated, TransportError> {
    let mode = if fallback { Mode::Auto } else { Mode::Rdma };
    client(socket, config, mode).await
}

/// The server side of the RDMA handshake, on a socket whose first 8 bytes were
/// [`HELLO`](rdmarpc_transport_tcp::rdma_hello::HELLO) (already read): reads the client's
/// offer and connects the queue pairs, or, with `config` `None` (a server that does not
/// serve RDMA) or no usable device, refuses; the socket then carries TCP
/// (`Ok(Err(socket))`).
///
/// # Errors
/// Why the handshake failed (a bad offer, a GID that is not the connection's address, a
/// timeout); the connection is then to be dropped.
pub async fn handshake_server(
    socket: Socket,
    config: Option<&RdmaConfig>,
) -> Result<Result<RdmaConnection, Socket>, String> {
    server(socket, config).await
}

/// Client side: offers RDMA on `stream`.
///
/// # Errors
/// Local set-up failure, a handshake error, or (in [`Mode::Rdma`]) the server's refusal.
pub(crate) async fn client(
    mut stream: Socket,
    config: &RdmaConfig,
    mode: Mode,
) -> Result<Negotiated, TransportError> {
    let prepared = match (prepare(config, &stream), mode) {
        (Ok(prepared), _) => prepared,
        // Nothing was sent yet: the socket carries TCP from its first byte.
        (Err(e), Mode::Auto) => {
            return Ok(Negotiated::Tcp(
                stream,
                format!("no usable local RDMA device: {e}"),
            ));
        }
        (Err(e), Mode::Rdma) => return Err(TransportError::Other(format!("RDMA set-up: {e}"))),
    };
    let work = async {
        stream
            .write_all(&prepared.offer(mode, config).encode(HELLO))
            .await?;
        // Under TLS a write may sit in the session until flushed.
        stream.flush().await?;
        let mut block = [0u8; BLOCK];
        stream.read_exact(&mut block).await?;
        Ok::<_, std::io::Error>(block)
    };
    let block = tokio::time::timeout(config.handshake_timeout, work)
        .await
        .map_err(|_| TransportError::Other("RDMA handshake timed out".into()))??;
    match &block[..8] {
        m if m == OKAY => {
            let remote = Offer::decode(&block)
                .map_err(|e| TransportError::Other(format!("RDMA handshake: {e}")))?;
            // Our QP must reach RTS before READY lets the server send.
            let connected = prepared.connect(&remote).map_err(TransportError::Other)?;
            stream.write_all(READY).await?;
            stream.flush().await?;
            Ok(Negotiated::Rdma(connected.start(stream, config)))
        }
        m if m == NONE => {
            // A refusal's reason is read under the same bound: a server that announces a
            // reason and stalls must not hang the dial.
            let reason = tokio::time::timeout(
                config.handshake_timeout,
                handshake::read_refusal(&mut stream, &block),
            )
            .await
            .map_err(|_| TransportError::Other("RDMA handshake timed out (refusal)".into()))??;
            match mode {
                Mode::Rdma => Err(TransportError::Other(format!(
                    "the server does not serve RDMA: {reason}"
                ))),
                Mode::Auto => Ok(Negotiated::Tcp(stream, reason)),
            }
        }
        _ => Err(TransportError::Other(
            "the server does not speak the RDMA handshake".into(),
        )),
    }
}

/// Server side, after the first 8 bytes were HELLO: reads the offer and answers it.
///
/// # Returns
/// `Ok(Ok(conn))` over RDMA; `Ok(Err(stream))` when RDMA was refused and the socket
/// carries TCP from here.
///
/// # Errors
/// Why the handshake failed (the connection is then dropped).
pub(crate) async fn server(
    mut stream: Socket,
    config: Option<&RdmaConfig>,
) -> Result<Result<RdmaConnection, Socket>, String> {
    let mut block = [0u8; BLOCK];
    block[..8].copy_from_slice(HELLO);
    stream
        .read_exact(&mut block[8..])
        .await
        .map_err(|e| e.to_string())?;
    let offer = Offer::decode(&block).map_err(|e| e.to_string())?;
    let Some(config) = config else {
        handshake::refuse(&mut stream, "this server serves TCP only")
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Err(stream));
    };
    // On RoCE (LID 0) a GID is an IP address: it must be the address this connection
    // comes from, or a client could point our queue pair at a third host.
    if let (0, Ok(peer)) = (offer.endpoint.lid, stream.peer_addr()) {
        let expected = match peer.ip() {
            IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
            IpAddr::V6(ip) => ip.octets(),
        };
        if offer.endpoint.gid != expected {
            let reason = format!(
                "the offered GID {} is not the connection's address {}",
                std::net::Ipv6Addr::from(offer.endpoint.gid),
                peer.ip()
            );
            let _ = handshake::refuse(&mut stream, &reason).await;
            return Err(reason);
        }
    }
    // Queue pair, completion queue and ring registrations only now that the offer is
    // valid, on a blocking thread (registration pins pages and can take a while).
    let (owned, local) = (config.clone(), local_ip(&stream));
    let prepared = tokio::task::spawn_blocking(move || prepare_at(&owned, local))
        .await
        .map_err(|e| format!("RDMA set-up task: {e}"))?;
    let prepared = match prepared {
        Ok(p) => p,
        Err(reason) => {
            // The details (device names, addresses) stay in this server's log: the
            // client, not yet authenticated, learns that RDMA is refused, not why.
            static SAID: AtomicBool = AtomicBool::new(false);
            if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::debug!(%reason, "RDMA refused: no usable device");
            } else {
                tracing::warn!(%reason, "RDMA refused: no usable device (said once; then at debug)");
            }
            handshake::refuse(&mut stream, "the server has no usable RDMA device")
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Err(stream));
        }
    };
    let reply = prepared.offer(offer.mode, config).encode(OKAY);
    let connected = prepared.connect(&offer)?;
    stream.write_all(&reply).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    let mut ready = [0u8; 8];
    tokio::time::timeout(config.handshake_timeout, stream.read_exact(&mut ready))
        .await
        .map_err(|_| "timed out waiting for READY".to_string())?
        .map_err(|e| e.to_string())?;
    if &ready != READY {
        return Err("bad READY".into());
    }
    Ok(Ok(connected.start(stream, config)))
}
