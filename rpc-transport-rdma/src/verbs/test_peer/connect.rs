//! The raw peer's connection set-up: HELLO on the side channel, then the queue pair
//! through rdma_cm, as the transport's client does it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{err, HelloLimits, RECV_SLOTS, SLOT};
use crate::handshake::{Mode, Offer, BLOCK, HELLO, NONE, OKAY};
use crate::verbs::{CmEventKind, CmId, ConnParam, EventChannel, Init, QueuePair, Rts};

/// The queue pair in RTS after rdma_cm's `answer` to the connect request: moved by
/// this side and established (InfiniBand, RoCE), or by the kernel (iWARP).
pub(super) fn established(
    qp: QueuePair<Init>,
    id: &CmId,
    answer: CmEventKind,
    server: std::net::IpAddr,
) -> Result<QueuePair<Rts>, String> {
    if answer != CmEventKind::ConnectResponse {
        return Ok(qp.moved_by_cm());
    }
    let qp = qp
        .cm_rtr(id, None, server)
        .map_err(err)?
        .cm_rts(id)
        .map_err(err)?;
    id.establish().map_err(err)?;
    Ok(qp)
}

/// HELLO with `limits` on the side channel; the server's OKAY.
pub(super) fn hello(side: &mut TcpStream, limits: HelloLimits) -> Result<Offer, String> {
    let offer = Offer {
        mode: Mode::Rdma,
        cm_port: 0,
        token: [0; 16],
        recv_slots: RECV_SLOTS,
        slot_size: SLOT,
        rdv_budget: limits.rdv_budget,
        max_loans: limits.max_loans,
    };
    side.write_all(&offer.encode(HELLO)).map_err(err)?;
    let mut block = [0u8; BLOCK];
    side.read_exact(&mut block).map_err(err)?;
    if &block[..8] == NONE {
        return Err("the server refused RDMA".into());
    }
    if &block[..8] != OKAY {
        return Err("not an RDMA server".into());
    }
    Offer::decode(&block).map_err(|e| e.to_string())
}

/// A new id on `channel`, its address and route resolved from `local` (or the route's
/// source) to `server`.
pub(super) fn resolved(
    channel: &Arc<EventChannel>,
    local: Option<SocketAddr>,
    server: SocketAddr,
) -> Result<CmId, String> {
    let id = CmId::new(channel).map_err(err)?;
    id.resolve_addr(local, server, Duration::from_secs(10))
        .map_err(err)?;
    cm_event(channel, &id, &[CmEventKind::AddrResolved])?;
    id.resolve_route(Duration::from_secs(10)).map_err(err)?;
    cm_event(channel, &id, &[CmEventKind::RouteResolved])?;
    Ok(id)
}

/// Sends the connect request on `id`. As the transport's client does: on iWARP an
/// rdma_cm port is also a host TCP port, which a host socket may hold (`EADDRINUSE`), and
/// a fresh id (resolved from `local` to `server` again) takes another port.
pub(super) fn request(
    channel: &Arc<EventChannel>,
    mut id: CmId,
    local: Option<SocketAddr>,
    server: SocketAddr,
    param: &ConnParam<'_>,
) -> Result<CmId, String> {
    let mut attempt = 1;
    while let Err(e) = id.connect(param) {
        if !e.address_in_use() || attempt == crate::cm_service::PORT_ATTEMPTS {
            return Err(format!("{e} ({attempt} rdma_cm ports tried)"));
        }
        attempt += 1;
        id = resolved(channel, local, server)?;
    }
    Ok(id)
}

/// The next event of `id` on `channel`, which must be one of `kinds`, within 20 s.
pub(super) fn cm_event(
    channel: &Arc<EventChannel>,
    id: &CmId,
    kinds: &[CmEventKind],
) -> Result<CmEventKind, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no rdma_cm event {kinds:?} in time"));
        }
        let Some(event) = channel.next(left).map_err(err)? else {
            continue;
        };
        if event.id != id.key() {
            continue;
        }
        if event.kind == CmEventKind::Rejected {
            return Err(format!(
                "the server rejected the rdma_cm request (private data {:?})",
                String::from_utf8_lossy(&event.private_data)
            ));
        }
        if !kinds.contains(&event.kind) {
            return Err(format!(
                "rdma_cm: {} where {kinds:?} was expected",
                event.kind
            ));
        }
        return Ok(event.kind);
    }
}
