//! The client's side of the set-up: HELLO on the side channel, then the queue pair
//! through rdma_cm to the port and with the token the server's OKAY gave.

use std::net::SocketAddr;

use rdmarpc_core::TransportError;
use rdmarpc_transport_tcp::Socket;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use std::sync::Arc;

use super::{
    access, check_named, local_addr, offer, prepare_off_thread, reserve, usable_address,
    Negotiated, Prepared,
};
use crate::cm_service::{service, Routed, PORT_ATTEMPTS};
use crate::handshake::{self, Mode, Offer, BLOCK, HELLO, NONE, OKAY, READY};
use crate::verbs::CmEventKind;
use crate::RdmaConfig;

/// An rdma_cm id bound to the side channel's local address: fails, before anything is
/// offered, where no RDMA device holds that address (or not the one `config` names).
fn local_id(config: &RdmaConfig, stream: &Socket) -> Result<Routed, String> {
    config.validate()?;
    let local = local_addr(stream)?;
    usable_address(local.ip())?;
    let id = service()
        .map_err(access::cm_unusable)?
        .new_id()
        .map_err(|e| e.to_string())?;
    id.id().bind(local).map_err(|e| {
        access::verbs_nodes()
            .err()
            .unwrap_or_else(|| format!("no RDMA device holds {}: {e}", local.ip()))
    })?;
    let binding = id.id().binding().map_err(|e| e.to_string())?;
    check_named(config, local.ip(), &binding)?;
    access::device_node(&binding.0)?;
    Ok(id)
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
    let id = match (local_id(config, &stream), mode) {
        (Ok(id), _) => id,
        // Nothing was sent yet: the socket carries TCP from its first byte.
        (Err(e), Mode::Auto) => {
            return Ok(Negotiated::Tcp(
                stream,
                format!("no usable local RDMA device: {e}"),
            ));
        }
        (Err(e), Mode::Rdma) => return Err(TransportError::Other(format!("RDMA set-up: {e}"))),
    };
    // The connection's locked memory, before anything is offered: a process that cannot
    // pin it uses TCP on this socket (auto://) or fails here (rdma://), not on its calls.
    let account = match (reserve(config), mode) {
        (Ok(account), _) => account,
        (Err(e), Mode::Auto) => {
            static SAID: crate::memlock::AtomicBool = crate::memlock::AtomicBool::new(false);
            e.log_once("auto:// uses TCP", &SAID);
            return Ok(Negotiated::Tcp(stream, e.to_string()));
        }
        (Err(e), Mode::Rdma) => return Err(e.to_transport()),
    };
    let work = async {
        let hello = offer(mode, config, 0, [0; 16]).encode(HELLO);
        stream.write_all(&hello).await?;
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
            tokio::time::timeout(
                config.handshake_timeout,
                connect(stream, id, config, &remote, account),
            )
            .await
            .map_err(|_| TransportError::Other("RDMA connection set-up timed out".into()))?
            .map_err(|e| TransportError::Other(format!("RDMA set-up: {e}")))
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

/// Resolves `server`'s address and a route to it on `id`.
async fn resolve(id: &mut Routed, server: SocketAddr, config: &RdmaConfig) -> Result<(), String> {
    id.id()
        .resolve_addr(None, server, config.handshake_timeout)
        .map_err(|e| e.to_string())?;
    id.expect(&[CmEventKind::AddrResolved]).await?;
    id.id()
        .resolve_route(config.handshake_timeout)
        .map_err(|e| e.to_string())?;
    id.expect(&[CmEventKind::RouteResolved]).await?;
    Ok(())
}

/// After OKAY: resolves the server's rdma_cm port from the side channel's local address
/// (the side channel's TCP connection already resolved the neighbour), prepares the
/// queue pair on the device the route leaves from, connects with the token and, once
/// the queue pair is in RTS, sends READY.
async fn connect(
    mut stream: Socket,
    mut id: Routed,
    config: &RdmaConfig,
    remote: &Offer,
    account: Arc<crate::memlock::Account>,
) -> Result<Negotiated, String> {
    let mut server = stream.peer_addr().map_err(|e| e.to_string())?;
    server.set_port(remote.cm_port);
    resolve(&mut id, server, config).await?;
    let (id, prepared) = prepare_off_thread(config, id, account).await?;
    let prepared = prepared?;
    let (id, answer) = request(id, &stream, server, config, &prepared, remote).await?;
    let moved = answer == CmEventKind::Established;
    let connected = prepared.connect(id, moved, config, remote, server.ip())?;
    if !moved {
        // InfiniBand and RoCE: the QP is in RTS, the server learns it from this.
        connected.cm.id().establish().map_err(|e| e.to_string())?;
    }
    stream.write_all(READY).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    Ok(Negotiated::Rdma(connected.start(stream, config)))
}

/// Sends the connect request with the token and returns the server's answer. rdma_cm
/// may give an id a port that turns out taken when the request goes (`EADDRINUSE`: on
/// iWARP an rdma_cm port is also a TCP port of the host, which a host socket may hold):
/// a fresh id on the same address (so the same device, with another port) carries the
/// same request then. That failure comes before the provider touches the queue pair,
/// which is not tied to an id. (A reset of the request's TCP connection is not retried:
/// Soft-iWARP reports the server's own rejects the same way, and the queue pair is in
/// the error state after it.)
async fn request(
    mut id: Routed,
    stream: &Socket,
    server: SocketAddr,
    config: &RdmaConfig,
    prepared: &Prepared,
    remote: &Offer,
) -> Result<(Routed, CmEventKind), String> {
    let request = handshake::cm_request(&remote.token);
    let mut attempt = 1;
    while let Err(e) = id.id().connect(&prepared.conn_param(&request)) {
        if !e.address_in_use() || attempt == PORT_ATTEMPTS {
            return Err(format!("{e} ({attempt} rdma_cm ports tried)"));
        }
        tracing::debug!(attempt, "{e}: another rdma_cm port");
        attempt += 1;
        id = local_id(config, stream)?;
        resolve(&mut id, server, config).await?;
    }
    let answer = id
        .expect(&[CmEventKind::ConnectResponse, CmEventKind::Established])
        .await
        .map_err(|e| format!("{e} (the server did not accept the connect request)"))?;
    Ok((id, answer.kind))
}
