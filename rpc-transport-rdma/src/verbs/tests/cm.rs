//! rdma_cm on real verbs: hand-made queue pairs connected through rdma_cm over IPv4 and
//! IPv6, a wrong token rejected before the server creates anything. In the guest on rxe
//! (`scripts/test-rdma`) and on siw (`SOFTROCE_PROVIDER=siw`), where the kernel's iWARP
//! connection manager moves the client's queue pair itself.

use std::net::{IpAddr, SocketAddr};

use super::*;
use crate::verbs::{CmEventKind, CmId, ConnParam, EventChannel};

const TOKEN: &[u8; 24] = b"RPCM\x01\0\0\0sixteen-byte-tok";
const CM_WAIT: Duration = Duration::from_secs(30);

/// The next event on `channel` about the id `key`, which must be of one of the `kinds`;
/// events of other ids (a closed connection's late ones) are passed over.
fn expect(channel: &Arc<EventChannel>, key: usize, kinds: &[CmEventKind]) -> crate::verbs::CmEvent {
    let deadline = Instant::now() + CM_WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no rdma_cm event {kinds:?} within {CM_WAIT:?}"
        );
        if let Some(event) = channel.next(left).expect("rdma_cm event") {
            if event.id != key {
                eprintln!("rdma_cm: passed over {} of another id", event.kind);
                continue;
            }
            assert!(
                kinds.contains(&event.kind),
                "rdma_cm: got {} (status {}), wanted {kinds:?}",
                event.kind,
                event.status
            );
            return event;
        }
    }
}

/// One side: its id's device, a PD, a CQ, a ring and a 1 MiB buffer, a QP in INIT with
/// the ring's RECVs posted.
fn side(id: &CmId, big_access: Access) -> (Side, QueuePair<Init>) {
    let ctx = Arc::new(id.context().expect("the id's device"));
    let pd =
        Arc::new(ProtectionDomain::new(&ctx, crate::memlock::Account::unlimited()).expect("pd"));
    let cq = Arc::new(CompletionQueue::new(&ctx, DEFAULT_CQ_DEPTH, None, 0).expect("cq"));
    let ring = MemoryRegion::new(&pd, RING, Access::Local).expect("ring mr");
    let big = MemoryRegion::new(&pd, MIB, big_access).expect("big mr");
    // 256 bytes inline, as `RdmaConfig` asks by default: siw refuses it and grants less.
    let config = QpConfig {
        max_inline: 256,
        ..QpConfig::default()
    };
    let qp = QueuePair::new(&pd, &cq, &cq, &config).expect("create qp");
    eprintln!(
        "rdma_cm: {} bytes inline granted for 256 asked",
        qp.max_inline()
    );
    let qp = qp.cm_init(id).expect("INIT through rdma_cm");
    let side = Side {
        cq,
        ring,
        big,
        seen: Vec::new(),
    };
    post_ring(&qp, &side);
    (side, qp)
}

fn param(token: &[u8], qp_num: u32) -> ConnParam<'_> {
    ConnParam {
        private_data: token,
        qp_num,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
    }
}

/// A client id resolved to `server` from `client`.
fn resolved(channel: &Arc<EventChannel>, client: IpAddr, server: SocketAddr) -> CmId {
    // As the side channel's TCP connection does before a connection's rdma_cm set-up:
    // the neighbour is known (a first resolution otherwise waits its whole timeout,
    // probes/rdma-cm/README.md). Refused or not, the attempt resolves it.
    let _ = std::net::TcpStream::connect_timeout(&SocketAddr::new(server.ip(), 9), WAIT);
    let id = CmId::new(channel).expect("client id");
    id.resolve_addr(
        Some(SocketAddr::new(client, 0)),
        server,
        Duration::from_secs(10),
    )
    .expect("resolve address");
    expect(channel, id.key(), &[CmEventKind::AddrResolved]);
    id.resolve_route(Duration::from_secs(10))
        .expect("resolve route");
    expect(channel, id.key(), &[CmEventKind::RouteResolved]);
    id
}

/// Connects a client on `client` to a listener on `server`, exchanges SENDs both ways
/// and READs 1 MiB, then shows a wrong token rejected.
fn connect_and_talk(server: IpAddr, client: IpAddr) {
    let (server_events, client_events) = (
        EventChannel::new().expect("channel"),
        EventChannel::new().expect("channel"),
    );
    let listener = CmId::new(&server_events).expect("listener id");
    listener
        .listen(SocketAddr::new(server, 0), 8)
        .expect("listen");
    let at = SocketAddr::new(server, listener.local_port());
    let t = Instant::now();
    let id = resolved(&client_events, client, at);
    let ctx = id.context().expect("client device");
    eprintln!("rdma_cm {client} -> {at}: {}", ctx.describe());
    let (mut c, qc) = side(&id, Access::Local);
    id.connect(&param(TOKEN, qc.qp_num())).expect("connect");

    let request = expect(
        &server_events,
        listener.key(),
        &[CmEventKind::ConnectRequest],
    );
    assert_eq!(
        &request.private_data[..TOKEN.len()],
        TOKEN,
        "the token arrives"
    );
    let accepted = request.request.expect("the new connection's id");
    let (mut s, qs) = side(&accepted, Access::RemoteRead);
    let qs = qs
        .cm_rtr(&accepted, None, client)
        .expect("server RTR")
        .cm_rts(&accepted)
        .expect("server RTS");
    accepted.accept(&param(&[], qs.qp_num())).expect("accept");

    let answer = expect(
        &client_events,
        id.key(),
        &[CmEventKind::ConnectResponse, CmEventKind::Established],
    );
    let qc = if answer.kind == CmEventKind::ConnectResponse {
        let qc = qc
            .cm_rtr(&id, None, server)
            .expect("client RTR")
            .cm_rts(&id)
            .expect("client RTS");
        id.establish().expect("establish");
        qc
    } else {
        qc.moved_by_cm() // iWARP: the kernel's connection manager moved it
    };
    expect(&server_events, accepted.key(), &[CmEventKind::Established]);
    let state = qc.state().expect("query");
    if answer.kind == CmEventKind::ConnectResponse {
        assert_eq!(state, QpState::Rts);
    } else {
        // siw reports the state its own way (measured: Reset here); the SEND and the READ
        // below show the queue pair connected.
        eprintln!("rdma_cm: iWARP client queue pair reported as {state:?}");
    }
    eprintln!(
        "rdma_cm: connected in {:?} (client saw {})",
        t.elapsed(),
        answer.kind
    );

    // SEND client -> server, then server -> client.
    let msg = pattern(1, 1000);
    c.ring.write_at(0, &msg).expect("fill");
    // SAFETY: the slot is not written again until its completion is reaped.
    unsafe {
        qc.post_send(
            WrId(1),
            &c.ring,
            0,
            msg.len(),
            SendOptions {
                signaled: true,
                ..Default::default()
            },
        )
    }
    .expect("post send");
    c.wait(1);
    let got = s.wait(1000);
    assert_eq!(
        s.ring.slice(0, got.byte_len as usize).expect("slot"),
        &msg[..]
    );
    let reply = pattern(2, 48);
    qs.post_send_inline(WrId(2), &reply, true, None)
        .expect("inline send");
    s.wait(2);
    let got = c.wait(1000);
    assert_eq!(
        c.ring.slice(0, got.byte_len as usize).expect("slot"),
        &reply[..]
    );

    // 1 MiB READ by the client of the server's buffer, into a sink without remote access.
    let data = pattern(3, MIB);
    s.big.as_mut_slice().copy_from_slice(&data);
    let remote = RemoteBuf {
        addr: s.big.addr(),
        rkey: s.big.rkey(),
    };
    // SAFETY: `c.big` is not touched until the READ completion is reaped.
    unsafe { qc.post_read(WrId(3), &c.big, 0, MIB, remote) }.expect("post read");
    c.wait(3);
    assert!(c.big.as_slice() == &data[..], "RDMA READ payload");

    id.disconnect();
    expect(&server_events, accepted.key(), &[CmEventKind::Disconnected]);
    drop((qc, qs));

    // A wrong token is rejected before the server creates anything.
    let id = resolved(&client_events, client, at);
    let (_c, qc) = side(&id, Access::Local);
    let mut wrong = *TOKEN;
    wrong[8] ^= 1;
    id.connect(&param(&wrong, qc.qp_num())).expect("connect");
    let request = expect(
        &server_events,
        listener.key(),
        &[CmEventKind::ConnectRequest],
    );
    request
        .request
        .expect("its id")
        .reject(b"RPCX")
        .expect("reject");
    let refused = expect(&client_events, id.key(), &[CmEventKind::Rejected]);
    assert!(
        refused.private_data.starts_with(b"RPCX"),
        "the server's reject data: {:?}",
        refused.private_data
    );
    eprintln!(
        "rdma_cm: wrong token rejected (status {}, {} bytes of private data)",
        refused.status,
        refused.private_data.len()
    );
}

#[test]
fn rdma_cm_connects_queue_pairs_over_ipv4_and_ipv6_and_rejects_a_wrong_token() {
    if !rdma_available() {
        eprintln!("SKIP: no RDMA device on this host (run scripts/test-rdma)");
        return;
    }
    let probe = EventChannel::new().and_then(|ch| {
        let id = CmId::new(&ch)?;
        id.listen(SocketAddr::new(IP_B.into(), 0), 1)
    });
    if let Err(e) = probe {
        // Inside the guest (softroce-vm sets SOFTROCE_PROVIDER) a skip would hide a bug.
        assert!(
            std::env::var_os("SOFTROCE_PROVIDER").is_none(),
            "rdma_cm cannot listen on {IP_B} in the softroce-vm guest: {e}"
        );
        eprintln!("SKIP: rdma_cm cannot listen on {IP_B} ({e}): not the softroce-vm guest");
        return;
    }
    connect_and_talk(IP_B.into(), IP_A.into());
    connect_and_talk(IP6_B.into(), IP6_A.into());
}
