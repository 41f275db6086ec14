//! The server's side of the set-up: the client's HELLO answered with OKAY (the rdma_cm
//! port and a token) or NONE, then the connect request that carries the token accepted.

use std::sync::atomic::AtomicBool;

use rdmarpc_transport_tcp::Socket;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{access, check_named, local_addr, offer, prepare_off_thread, reserve, usable_address};
use crate::cm_service::{service, Expected};
use crate::connection::RdmaConnection;
use crate::handshake::{self, Offer, BLOCK, CM_REJECT, HELLO, OKAY, READY};
use crate::memlock::Budget;
use crate::verbs::CmEventKind;
use crate::RdmaConfig;

/// Whether the server said at WARN that its locked memory is spent.
static MEMLOCK_SAID: AtomicBool = AtomicBool::new(false);

/// Why RDMA is refused: what the client is told, and the details for this server's log.
type Refusal = (&'static str, String);

/// The port of this process's rdma_cm listener on the address the client reached, and a
/// token to wait for.
fn listen(stream: &Socket, config: &RdmaConfig) -> Result<(u16, Expected), Refusal> {
    const NO_DEVICE: &str = "the server has no usable RDMA device";
    let no_device = |e: String| (NO_DEVICE, e);
    config.validate().map_err(no_device)?;
    let local = local_addr(stream).map_err(no_device)?;
    usable_address(local.ip()).map_err(no_device)?;
    let service = service().map_err(|e| no_device(access::cm_unusable(e)))?;
    let (port, binding) = service.listener(local).map_err(|e| {
        no_device(
            access::verbs_nodes()
                .err()
                .unwrap_or_else(|| format!("no RDMA device holds {}: {e}", local.ip())),
        )
    })?;
    check_named(config, local.ip(), &binding).map_err(no_device)?;
    access::device_node(&binding.0).map_err(no_device)?;
    let expected = service
        .expect()
        .map_err(|e| ("the server is setting up too many RDMA connections", e))?;
    Ok((port, expected))
}

/// Logs why RDMA is refused: at WARN the first time, then at DEBUG.
fn log_refusal(reason: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    crate::warn_once::warn_once(&SAID, format_args!("RDMA refused: {reason}"));
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
    let hello = Offer::decode(&block).map_err(|e| e.to_string())?;
    let Some(config) = config else {
        handshake::refuse(&mut stream, "this server serves TCP only")
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Err(stream));
    };
    let (port, expected) = match listen(&stream, config) {
        Ok(listening) => listening,
        Err((told, reason)) => {
            // The details (device names, addresses) stay in this server's log: the
            // client, not yet authenticated, learns only which kind of refusal it is.
            log_refusal(&reason);
            handshake::refuse(&mut stream, told)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Err(stream));
        }
    };
    // Room for the connection's locked memory, before the client is told to go on: a
    // server at its limit refuses new RDMA connections (the client may use TCP on this
    // socket) and keeps serving those it has. Only checked here: it is reserved once the
    // connect request with the token came (`accept`), so that sockets that say HELLO and
    // stall hold none of it.
    match Budget::process().check(config.pinned_reserve(), "an RDMA connection") {
        Ok(()) => {}
        Err(e) => {
            drop(expected);
            e.log_once(
                "new RDMA connections are refused (the clients are told to use TCP)",
                &MEMLOCK_SAID,
            );
            handshake::refuse(
                &mut stream,
                "the server cannot pin memory for another RDMA connection (its locked-memory limit)",
            )
            .await
            .map_err(|e| e.to_string())?;
            return Ok(Err(stream));
        }
    };
    let reply = offer(hello.mode, config, port, expected.token).encode(OKAY);
    stream.write_all(&reply).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    tokio::time::timeout(
        config.handshake_timeout,
        accept(stream, expected, config, &hello),
    )
    .await
    .map_err(|_| "RDMA connection set-up timed out".to_string())?
    .map(Ok)
}

/// After OKAY: takes the connect request with the token, prepares the queue pair on the
/// request's device, accepts, and starts once rdma_cm says `Established` and the client
/// sent READY.
async fn accept(
    mut stream: Socket,
    mut expected: Expected,
    config: &RdmaConfig,
    hello: &Offer,
) -> Result<RdmaConnection, String> {
    let id = expected.request().await?;
    drop(expected);
    // The token says which handshake the request belongs to; the request must also come
    // from the address that made the handshake.
    let side = stream
        .peer_addr()
        .map_err(|e| e.to_string())?
        .ip()
        .to_canonical();
    let from = id.id().peer_ip();
    if from != Some(side) {
        let _ = id.id().reject(CM_REJECT);
        return Err(format!(
            "the rdma_cm connect request came from {}, the handshake from {side}",
            from.map_or_else(|| "an unknown address".to_owned(), |ip| ip.to_string())
        ));
    }
    // Another set-up may have taken the room since HELLO: the request is rejected then.
    let account = match reserve(config) {
        Ok(account) => account,
        Err(e) => {
            let _ = id.id().reject(CM_REJECT);
            e.log_once("new RDMA connections are refused", &MEMLOCK_SAID);
            return Err(e.to_string());
        }
    };
    let (id, prepared) = prepare_off_thread(config, id, account).await?;
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let _ = id.id().reject(CM_REJECT);
            return Err(e);
        }
    };
    let param = prepared.conn_param(&[]);
    // The QP reaches RTS before the accept (on iWARP the kernel moves it on accepting).
    let mut connected = prepared.connect(id, false, config, hello, side)?;
    connected
        .cm
        .id()
        .accept(&param)
        .map_err(|e| e.to_string())?;
    connected.cm.expect(&[CmEventKind::Established]).await?;
    let mut ready = [0u8; 8];
    stream
        .read_exact(&mut ready)
        .await
        .map_err(|e| e.to_string())?;
    if &ready != READY {
        return Err("bad READY".into());
    }
    Ok(connected.start(stream, config))
}
