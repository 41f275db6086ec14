//! Building an [`RdmaConnection`] on either side of the handshake (`client.rs`,
//! `server.rs`): the side channel's offers, then the queue pair through rdma_cm.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use rdmarpc_core::TransportError;
use rdmarpc_transport_tcp::Socket;
use tokio::sync::{watch, Notify};

use crate::cm_service::Routed;
use crate::completion::Membership;
use crate::connection::{max_frame, Inner, KeptBytes, RdmaConnection, Sends, State};
use crate::counters::Counters;
use crate::device::Device;
use crate::driver::{self, READ_WR_BUDGET};
use crate::handshake::{Mode, Offer, Token, CM_REJECT};
use crate::memlock::{Account, Budget, Exhausted};
use crate::pool::LargePool;
use crate::protocol::session::{Session, SessionConfig};
use crate::protocol::{LoanLimit, PREFIX_LEN};
use crate::verbs::{
    Access, Binding, CmId, ConnParam, PreparedRings, ProtectionDomain, QpConfig, RingGeometry,
    Rings, SendSlot, MAX_INITIATOR_DEPTH,
};
use crate::RdmaConfig;

mod access;
mod client;
mod server;

/// Verbs resources of a connection whose rdma_cm id knows its device, before the queue
/// pair is connected.
#[derive(Debug)]
pub(crate) struct Prepared {
    device: Arc<Device>,
    rings: PreparedRings,
    completion: Membership,
    pd: Arc<ProtectionDomain>,
}

/// The socket's local address (an IPv4-mapped IPv6 address as IPv4), with its scope.
fn local_addr(stream: &Socket) -> Result<SocketAddr, String> {
    let addr = stream.local_addr().map_err(|e| e.to_string())?;
    Ok(match addr {
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => {
            SocketAddr::new(a.ip().to_canonical(), 0)
        }
        mut other => {
            other.set_port(0);
            other
        }
    })
}

/// Where rdma_cm cannot go: a loopback address binds to whichever device comes first,
/// which holds no such address.
fn usable_address(ip: IpAddr) -> Result<(), String> {
    if ip.to_canonical().is_loopback() {
        return Err(format!("the loopback address {ip} has no RDMA device"));
    }
    Ok(())
}

/// The device and port an rdma_cm id is bound to (`binding`: [`CmId::binding`]) for the
/// local address `ip` must be the ones `config` names.
pub(super) fn check_named(
    config: &RdmaConfig,
    ip: IpAddr,
    binding: &Binding,
) -> Result<(), String> {
    let (device, port, _) = binding;
    if let Some(named) = config.device.as_deref() {
        let names = crate::verbs::device_names();
        if !names.iter().any(|n| n == named) {
            return Err(format!(
                "RDMA device \"{named}\" not found (this host has {})",
                names.join(", ")
            ));
        }
        if named != device {
            return Err(format!(
                "{ip} is on RDMA device {device}, not on the configured device {named}"
            ));
        }
    }
    if let Some(named) = config.port {
        if named != *port {
            return Err(format!(
                "{ip} is on port {port} of RDMA device {device}, not on the configured port {named}"
            ));
        }
    }
    Ok(())
}

/// Reserves a connection's locked memory ([`RdmaConfig::pinned_reserve`]) in this
/// process's budget.
///
/// # Errors
/// The budget has less left: the set-up is refused.
fn reserve(config: &RdmaConfig) -> Result<Arc<Account>, Exhausted> {
    Account::reserve(Budget::process(), config.pinned_reserve())
}

/// Opens (or shares) the device rdma_cm bound `id` to and prepares a queue pair with its
/// rings there, their registrations charged to `account`: blocking verbs calls and
/// registrations, for `spawn_blocking`.
pub(crate) fn prepare(
    config: &RdmaConfig,
    id: &CmId,
    account: Arc<Account>,
) -> Result<Prepared, String> {
    config.validate()?;
    let device = Device::for_cm(id).map_err(|e| e.to_string())?;
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
    let pd = Arc::new(ProtectionDomain::new(&device.context, account).map_err(|e| e.to_string())?);
    let rings = PreparedRings::for_cm(&pd, completion.cq(), &qp_config, geometry, id)
        .map_err(|e| e.to_string())?;
    completion.admit(rings.qp_num());
    Ok(Prepared {
        device,
        rings,
        completion,
        pd,
    })
}

/// [`prepare`] on a blocking thread (registration pins pages and can take a while); the
/// id comes back with the result.
async fn prepare_off_thread(
    config: &RdmaConfig,
    id: Routed,
    account: Arc<Account>,
) -> Result<(Routed, Result<Prepared, String>), String> {
    let owned = config.clone();
    tokio::task::spawn_blocking(move || {
        let prepared = prepare(&owned, id.id(), account);
        (id, prepared)
    })
    .await
    .map_err(|e| format!("RDMA set-up task: {e}"))
}

/// This side's offer: its limits, and on a server the rdma_cm port and token.
fn offer(mode: Mode, config: &RdmaConfig, cm_port: u16, token: Token) -> Offer {
    Offer {
        mode,
        cm_port,
        token,
        recv_slots: config.initial_slots(),
        slot_size: config.slot_size,
        rdv_budget: config.lend_budget(),
        max_loans: config.max_loans,
    }
}

impl Prepared {
    /// What rdma_cm's connect or accept carries besides the private data.
    fn conn_param<'a>(&self, private_data: &'a [u8]) -> ConnParam<'a> {
        let ctx = &self.device.context;
        ConnParam {
            private_data,
            qp_num: self.rings.qp_num(),
            responder_resources: ctx.max_qp_rd_atom(),
            initiator_depth: ctx.max_qp_init_rd_atom().min(MAX_INITIATOR_DEPTH),
            retry_count: 7,
        }
    }

    /// Moves the QP to RTS through rdma_cm (`moved`: the kernel's iWARP connection
    /// manager did it), on a path to `peer` only (the side channel's peer).
    fn connect(
        self,
        id: Routed,
        moved: bool,
        config: &RdmaConfig,
        remote: &Offer,
        peer: IpAddr,
    ) -> Result<Connected, String> {
        let (rings, slots) = if moved {
            self.rings.moved_by_cm()
        } else {
            match self.rings.cm_connect(id.id(), config.gid_index, peer) {
                Ok(connected) => connected,
                Err(e) => {
                    // Either side may reject a request or response it cannot take up
                    // (the other side learns it now, not at its timeout).
                    let _ = id.id().reject(CM_REJECT);
                    return Err(e.to_string());
                }
            }
        };
        Ok(Connected {
            device: self.device,
            pd: self.pd,
            completion: self.completion,
            rings,
            slots,
            remote: *remote,
            cm: id,
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
    /// Kept as long as the connection: on iWARP it is the connection.
    cm: Routed,
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
                unpinned: Default::default(),
                pushes: Default::default(),
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
            piece_len: slot_size.min(remote.slot_size as usize)
                - PREFIX_LEN
                - crate::protocol::PIECE_TOKEN_LEN,
            loan_charges: Default::default(),
            cm: Mutex::new(self.cm),
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
/// a server's port: offers RDMA and, once the server accepts, connects the queue pairs
/// through rdma_cm (to the port and with the token the server gave on this socket); the
/// socket stays open as the side channel. A server that refuses (no device, or
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
    client::client(socket, config, mode).await
}

/// The server side of the RDMA handshake, on a socket whose first 8 bytes were
/// [`HELLO`](rdmarpc_transport_tcp::rdma_hello::HELLO) (already read): reads the client's
/// offer and accepts the rdma_cm connect request that carries the token it gave on this
/// socket, or, with `config` `None` (a server that does not serve RDMA) or no usable
/// device, refuses; the socket then carries TCP (`Ok(Err(socket))`).
///
/// # Errors
/// Why the handshake failed (a bad offer, no connect request with the token in time, a
/// queue-pair failure); the connection is then to be dropped.
pub async fn handshake_server(
    socket: Socket,
    config: Option<&RdmaConfig>,
) -> Result<Result<RdmaConnection, Socket>, String> {
    server::server(socket, config).await
}
