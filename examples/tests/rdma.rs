//! End to end on real verbs: Soft-RoCE inside `scripts/softroce-vm`, server on rxe1
//! (10.77.0.2), client on rxe0 (10.77.0.1); with `RDMA_TEST_IPV6` set, the same wire's
//! IPv6 addresses (fd00::2, fd00::1), so RoCE v2 runs over IPv6. Every test checks that the connection really
//! is RDMA, so nothing here can pass over TCP. On a host without an RDMA device each test
//! says so and returns (run `scripts/test-rdma` for the real thing).
//!
//! Tests that cut the link or make it lossy take the network lock exclusively; the others
//! share it, so a cut link never fails an unrelated test.

mod rdma_fork;
mod rdma_hostile;
mod rdma_polling;
mod suite;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::{EchoReply, EchoRequest};
use examples::kv::kv_client::KvClient;
use examples::kv::{GetRequest, PutRequest};
use rdmarpc_core::{Channel, ClientConfig, Code, Endpoint, Request, Server, TransportKind};
use rdmarpc_transport::{connect, rdma_available, AnyConnection, AnyListener, TransportSettings};
use rdmarpc_transport_rdma::test_peer::{HelloLimits, RawPeer};
use suite::*;

/// The server's host in URLs and socket addresses: `10.77.0.2`, or `[fd00::2]` with
/// `RDMA_TEST_IPV6` set.
const SERVER_IP: ServerHost = ServerHost;

/// See [`SERVER_IP`].
struct ServerHost;

impl std::fmt::Display for ServerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match server_ip() {
            std::net::IpAddr::V4(ip) => write!(f, "{ip}"),
            std::net::IpAddr::V6(ip) => write!(f, "[{ip}]"),
        }
    }
}

/// The server's address (rxe1's): IPv4, or IPv6 with `RDMA_TEST_IPV6` set.
fn server_ip() -> std::net::IpAddr {
    if std::env::var_os("RDMA_TEST_IPV6").is_some() {
        std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into()
    } else {
        std::net::Ipv4Addr::new(10, 77, 0, 2).into()
    }
}
static NETWORK: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn skip() -> bool {
    if rdma_available() {
        return false;
    }
    eprintln!("SKIP: no RDMA device on this host (run scripts/test-rdma: Soft-RoCE in a guest)");
    true
}

/// Default settings.
fn settings(max: usize) -> TransportSettings {
    let mut s = TransportSettings::default();
    s.max_message_size(max);
    s
}

/// Settings that detect a dead peer fast.
fn quick_detection(max: usize) -> TransportSettings {
    let mut s = settings(max);
    s.rdma.ping_interval = Duration::from_millis(300);
    s.rdma.ping_timeout = Duration::from_millis(1500);
    s
}

async fn rdma_channel(
    addr: &str,
    max: usize,
    settings: &TransportSettings,
) -> Channel<AnyConnection> {
    let endpoint: Endpoint = format!("rdma://{addr}").parse().unwrap();
    let conn = connect(&endpoint, settings).await.unwrap();
    assert_eq!(
        conn.transport(),
        TransportKind::Rdma,
        "not an RDMA connection"
    );
    let mut config = ClientConfig::default();
    config.max_message_size(max);
    Channel::with_config(conn, config)
}

struct Rdma;

impl Harness for Rdma {
    type Conn = AnyConnection;

    async fn start(&self, server: Server) -> String {
        let endpoint: Endpoint = format!("rdma://{SERVER_IP}:0").parse().unwrap();
        let listener = AnyListener::bind(&endpoint, &settings(BIG)).await.unwrap();
        assert!(listener.serves_rdma());
        let addr = format!("{SERVER_IP}:{}", listener.port());
        tokio::spawn(async move { server.serve(listener).await });
        addr
    }

    async fn connect(&self, addr: &str, max: usize) -> Channel<AnyConnection> {
        rdma_channel(addr, max, &settings(max)).await
    }
}

macro_rules! shared_net_test {
    ($name:ident, $body:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if skip() {
                return;
            }
            let _net = NETWORK.read().await;
            $body.await;
        }
    };
}

shared_net_test!(sixty_four_callers_few_thousand_calls, sixty_four_callers());
shared_net_test!(
    deadline_exceeded,
    deadline_fails_one_call_not_the_others(Rdma)
);
shared_net_test!(
    cancellation_reaches_the_handler,
    dropping_the_call_cancels_the_handler(Rdma)
);
shared_net_test!(
    unknown_method_oversized_and_garbage_protobuf,
    bad_requests_get_their_status(Rdma)
);
shared_net_test!(
    kv_16_mib_value_round_trip,
    large_value_put_then_get(Rdma, 16 << 20)
);
shared_net_test!(payload_sizes_take_the_right_path, payload_sizes());
shared_net_test!(
    large_payloads_are_not_copied_and_stay_valid_while_held,
    large_payloads_not_copied()
);
shared_net_test!(
    kept_frames_are_bounded_by_keep_bytes,
    kept_frames_are_bounded()
);
shared_net_test!(interop_cases, interop_cases_pass(Rdma));
shared_net_test!(
    interceptor_requires_a_token,
    an_interceptor_requires_a_token(Rdma)
);
shared_net_test!(tower_layers, tower_layers_hold(Rdma));
shared_net_test!(
    slow_stream_reader,
    a_slow_reader_does_not_stall_other_streams(Rdma)
);
shared_net_test!(
    cancelled_streams,
    cancelled_streams_release_their_handlers(Rdma)
);
shared_net_test!(
    stream_deadline,
    a_stream_past_its_deadline_ends_on_both_sides(Rdma)
);
shared_net_test!(kv_watch, kv_watch_streams_changes_under_a_prefix(Rdma));
shared_net_test!(chat_room, chat_members_see_each_others_posts(Rdma));
shared_net_test!(rdma_under_tls, rdma_with_the_side_channel_under_tls());
shared_net_test!(
    grpc_tcp_and_rdma_clients_on_one_port,
    three_kinds_of_client_on_one_port_at_once()
);

/// `rdma+tls://`: the side channel (handshake, liveness) runs under TLS, verified against
/// the test CA, the data path is RDMA: small and rendezvous-sized calls are answered,
/// and a client that does not trust the server's CA gets no connection.
async fn rdma_with_the_side_channel_under_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = test_certs::Ca::new("ca").unwrap();
    let ca_file = ca.write(dir.path()).unwrap();
    let (cert, key) = ca
        .issue("server", &[&server_ip().to_string()])
        .unwrap()
        .write(dir.path())
        .unwrap();
    let mut server_settings = settings(BIG);
    server_settings.tls.identity(cert, key);
    let endpoint: Endpoint = format!("rdma+tls://{SERVER_IP}:0").parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &server_settings)
        .await
        .unwrap();
    let addr = format!("{SERVER_IP}:{}", listener.port());
    let server = server_with(Probe::default(), big_config());
    tokio::spawn(async move { server.serve(listener).await });

    let mut client_settings = settings(BIG);
    client_settings.tls.ca(&ca_file);
    let endpoint: Endpoint = format!("rdma+tls://{addr}").parse().unwrap();
    let conn = connect(&endpoint, &client_settings).await.unwrap();
    assert_eq!(conn.transport(), TransportKind::Rdma);
    let peer = rdmarpc_core::Connection::peer(&conn);
    assert!(peer.starts_with("rdma+tls://"), "{peer}");
    // The server's chain, from the side channel's handshake.
    let chain = rdmarpc_core::Connection::peer_certificates(&conn);
    assert!(chain.is_some_and(|c| c.len() == 2));
    let channel = Channel::new(conn);
    let client = EchoClient::new(channel.clone());
    for size in [10usize, 100_000, 3 << 20] {
        let sent: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let reply = client
            .echo(echo_request(sent.clone().into()))
            .await
            .unwrap();
        assert_eq!(reply.into_inner().payload, sent, "{size} bytes");
    }
    let counters = channel.connection().unwrap().rdma_counters().unwrap();
    assert!(counters.rendezvous_reads > 0, "{counters:?}");

    let other = tempfile::tempdir().unwrap();
    let mut untrusting = settings(BIG);
    untrusting.tls.ca(test_certs::Ca::new("other")
        .unwrap()
        .write(other.path())
        .unwrap());
    let error = connect(&endpoint, &untrusting)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
}

/// One port, three kinds of client at once, the same service: a standard gRPC client
/// (HTTP/2, raw h2), a `tcp://` client and an `rdma://` client each make 200 echo calls
/// concurrently with the others, and every reply is its own request's.
async fn three_kinds_of_client_on_one_port_at_once() {
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let rdma = EchoClient::new(Rdma.connect(&addr, BIG).await);
    let endpoint: Endpoint = format!("tcp://{addr}").parse().unwrap();
    let tcp_conn = connect(&endpoint, &settings(BIG)).await.unwrap();
    assert_eq!(tcp_conn.transport(), TransportKind::Tcp);
    let tcp = EchoClient::new(Channel::new(tcp_conn));
    let socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (grpc, connection) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let calls = 200;
    let payload =
        |kind: u8, i: usize| -> Vec<u8> { (0..(i * 13) % 2000).map(|j| kind ^ j as u8).collect() };
    let rdma_task = tokio::spawn(async move {
        for i in 0..calls {
            let sent = payload(1, i);
            let reply = rdma.echo(echo_request(sent.clone().into())).await.unwrap();
            assert_eq!(reply.into_inner().payload, sent, "rdma call {i}");
        }
    });
    let tcp_task = tokio::spawn(async move {
        for i in 0..calls {
            let sent = payload(2, i);
            let reply = tcp.echo(echo_request(sent.clone().into())).await.unwrap();
            assert_eq!(reply.into_inner().payload, sent, "tcp call {i}");
        }
    });
    let grpc_task = tokio::spawn(async move {
        use prost::Message;
        for i in 0..calls {
            let sent = payload(3, i);
            let request = echo_request(sent.clone().into()).encode_to_vec();
            let mut body = vec![0];
            body.extend_from_slice(&(request.len() as u32).to_be_bytes());
            body.extend_from_slice(&request);
            let http = http::Request::builder()
                .method("POST")
                .uri(format!("http://{SERVER_IP}/echo.Echo/Echo"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
            let mut grpc = grpc.clone().ready().await.unwrap();
            let (response, mut stream) = grpc.send_request(http, false).unwrap();
            stream.send_data(body.into(), true).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status(), 200);
            let mut body = response.into_body();
            let mut bytes = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
                bytes.extend_from_slice(&chunk);
            }
            let trailers = body.trailers().await.unwrap().unwrap();
            assert_eq!(trailers.get("grpc-status").unwrap(), "0", "grpc call {i}");
            let reply = examples::echo::EchoReply::decode(&bytes[5..]).unwrap();
            assert_eq!(reply.payload, sent, "grpc call {i}");
        }
    });
    for task in [rdma_task, tcp_task, grpc_task] {
        task.await.unwrap();
    }
}

async fn large_payloads_not_copied() {
    let size = 256 << 10;
    let channel =
        large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(Rdma, size, 8, true)
            .await;
    let c = channel.connection().unwrap().rdma_counters().unwrap();
    // Every reply was kept here; the server lent each from the request it kept: only the
    // field's bytes were READ (the frame's first bytes came inline).
    assert_eq!(c.kept_frames, 12, "{c:?}");
    assert_eq!(c.bytes_read, 12 * size as u64, "{c:?}");
    assert_eq!(c.kept_bytes, 0, "released once dropped: {c:?}");
    // A kept reply sent on is lent from where it lies, not copied.
    let method = &examples::echo::echo_methods::METHODS[0];
    let fresh = bytes::Bytes::from(vec![5u8; size]);
    let first: EchoReply = channel
        .unary_gathered(Request::new(echo_request(fresh.clone())), method)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        channel
            .connection()
            .unwrap()
            .rdma_counters()
            .unwrap()
            .lent_in_place,
        0
    );
    let second: EchoReply = channel
        .unary_gathered(Request::new(echo_request(first.payload.clone())), method)
        .await
        .unwrap()
        .into_inner();
    let c = channel.connection().unwrap().rdma_counters().unwrap();
    assert_eq!(c.lent_in_place, 1, "{c:?}");
    assert!(second.payload == fresh && first.payload == fresh);
    assert_eq!(c.errors, 0);
    drop((first, second));
    // A field built in a message buffer (registered memory of the connection) is lent
    // from where it lies too.
    let mut buf = channel.connection().unwrap().message_buf(size);
    assert!(buf.is_registered());
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let built = buf.freeze();
    let held = channel
        .connection()
        .unwrap()
        .rdma_counters()
        .unwrap()
        .kept_bytes;
    assert!(held >= size as u64, "the buffer counts while held: {held}");
    let reply: EchoReply = channel
        .unary_gathered(Request::new(echo_request(built.clone())), method)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.payload, built);
    let c = channel.connection().unwrap().rdma_counters().unwrap();
    assert_eq!(c.lent_in_place, 2, "{c:?}");
    drop((built, reply));
    assert_eq!(
        channel
            .connection()
            .unwrap()
            .rdma_counters()
            .unwrap()
            .kept_bytes,
        0
    );
    // Eager-sized payloads are copied out of their receive slots.
    large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(Rdma, 1 << 10, 4, false)
        .await;
}

fn echo_request(payload: bytes::Bytes) -> EchoRequest {
    EchoRequest {
        payload,
        ..Default::default()
    }
}

/// An application that keeps every reply holds registered memory only up to
/// `keep_bytes`; past it, replies are copied out, and all stay correct.
async fn kept_frames_are_bounded() {
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let mut s = settings(BIG);
    s.rdma.keep_bytes = 1 << 20;
    let channel = rdma_channel(&addr, BIG, &s).await;
    let client = EchoClient::new(channel.clone());
    let size = 200 << 10; // a 256 KiB buffer each: four fit the budget
    let mut held = Vec::new();
    for i in 0..8u8 {
        let sent = bytes::Bytes::from(vec![i; size]);
        let reply = client.echo(echo_request(sent.clone())).await.unwrap();
        let payload = reply.into_inner().payload;
        assert_eq!(payload, sent);
        held.push(payload);
    }
    let c = channel.connection().unwrap().rdma_counters().unwrap();
    assert_eq!(c.kept_frames, 4, "{c:?}");
    assert_eq!(c.kept_bytes, 1 << 20, "{c:?}");
    for (i, payload) in held.iter().enumerate() {
        assert!(payload.iter().all(|&b| b == i as u8), "reply {i} changed");
    }
    // A message buffer beyond the budget is heap memory, and works the same.
    let mut buf = channel.connection().unwrap().message_buf(size);
    assert!(
        !buf.is_registered(),
        "the budget is spent by the replies held"
    );
    buf.as_mut_slice().fill(42);
    let reply = client.echo(echo_request(buf.freeze())).await.unwrap();
    assert!(reply.into_inner().payload.iter().all(|&b| b == 42));
    drop(held);
    assert_eq!(
        channel
            .connection()
            .unwrap()
            .rdma_counters()
            .unwrap()
            .kept_bytes,
        0
    );
    let reply = client
        .echo(echo_request(vec![9u8; size].into()))
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload.len(), size);
    assert_eq!(
        channel
            .connection()
            .unwrap()
            .rdma_counters()
            .unwrap()
            .kept_frames,
        5
    );
}

async fn sixty_four_callers() {
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    let workers: Vec<_> = (0..64)
        .map(|w| {
            let client = client.clone();
            tokio::spawn(async move {
                for i in 0..40 {
                    let sent: Vec<u8> = (0..(w * 37 + i * 11) % 3000)
                        .map(|j| (w ^ i ^ j) as u8)
                        .collect();
                    let reply = client
                        .echo(EchoRequest {
                            payload: sent.clone().into(),
                            delay_ms: 0,
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                    assert_eq!(reply.into_inner().payload, sent, "worker {w} call {i}");
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let counters = client
        .channel()
        .connection()
        .unwrap()
        .rdma_counters()
        .unwrap();
    // Every call went eagerly, plus the channel's opening PING; with 64 callers, frames
    // waited behind sends in flight and went several to a message.
    assert_eq!(counters.eager_sends, 64 * 40 + 1, "{counters:?}");
    assert!(counters.batches > 0, "no frames were batched: {counters:?}");
    assert_eq!(counters.rendezvous_reads, 0);
    assert_eq!(counters.errors, 0);
}

async fn payload_sizes() {
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let channel = Rdma.connect(&addr, BIG).await;
    let eager_limit = match &*channel.connection().unwrap() {
        AnyConnection::Rdma(c) => c.eager_limit(),
        _ => unreachable!(),
    };
    let slot = eager_limit + 16; // the slot size: eager limit plus the slot prefix
    let client = EchoClient::new(channel.clone());
    // The channel's opening PING goes out from its own task: let it, before counting.
    client.echo(EchoRequest::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for size in [0, 1, slot - 1, slot, slot + 1, 1 << 20, 16 << 20] {
        let before = channel.connection().unwrap().rdma_counters().unwrap();
        let sent: Vec<u8> = (0..size).map(|j| (j * 7 + size) as u8).collect();
        let request = EchoRequest {
            payload: sent.clone().into(),
            delay_ms: 0,
            ..Default::default()
        };
        let frame_len = 40 + prost::Message::encoded_len(&request);
        let reply = client.echo(request).await.unwrap();
        assert!(
            reply.into_inner().payload == sent,
            "content of {size} bytes differs"
        );
        let after = channel.connection().unwrap().rdma_counters().unwrap();
        let eager = after.eager_sends - before.eager_sends;
        let rendezvous = after.rendezvous_sends - before.rendezvous_sends;
        let reads = after.rendezvous_reads - before.rendezvous_reads;
        let read_bytes = after.bytes_read - before.bytes_read;
        if frame_len <= eager_limit {
            assert_eq!(
                (eager, rendezvous, reads),
                (1, 0, 0),
                "{size} B should go by SEND"
            );
        } else {
            assert_eq!(
                (eager, rendezvous, reads),
                (0, 1, 1),
                "{size} B should go by READ"
            );
            // The reply frame was pulled: same size as the request's; or, where the
            // server kept the request (within its `keep_bytes`) and the field is more
            // than a slot, only the field, lent from where the request landed (the
            // frame's first bytes inline in the descriptor).
            let lent_in_place = size > eager_limit && size < 8 << 20;
            let expected = if lent_in_place { size } else { frame_len };
            assert_eq!(read_bytes, expected as u64, "{size} B");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_server_is_declared_dead_within_the_ping_timeout() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = format!("{SERVER_IP}:47002");
    let url = format!("rdma://{addr}");
    let server = ServerProcess::start(env!("CARGO_BIN_EXE_echo-server"), &["--addr", &url]);
    wait_for_port(&addr).await;
    let s = quick_detection(BIG);
    let client = EchoClient::new(rdma_channel(&addr, BIG, &s).await);
    let hello = EchoRequest {
        payload: b"alive".to_vec().into(),
        ..Default::default()
    };
    client.echo(hello).await.expect("served while running");
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let slow = EchoRequest {
                    delay_ms: 20_000,
                    ..Default::default()
                };
                client.echo(slow).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The process stops; its NIC (rxe, in the kernel) still acknowledges our pings.
    server.signal("STOP");
    let stopped_at = Instant::now();
    for call in calls {
        let status = call.await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status}");
        assert!(status.message().contains("silent"), "{status}");
    }
    let took = stopped_at.elapsed();
    eprintln!("stopped server declared dead after {took:?}");
    assert!(
        took < s.rdma.ping_timeout + Duration::from_secs(3),
        "calls ended {took:?} after the stop"
    );
    server.signal("CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_requests_without_the_connections_token_are_rejected() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let target: std::net::SocketAddr = addr.parse().unwrap();
    // The server's OKAY gives a token; an rdma_cm connect request carrying another one
    // (one bit off, or another connection's) is rejected before anything is made for it.
    let forged = tokio::task::spawn_blocking(move || {
        let mut rejected = 0;
        for bit in 0..8u8 {
            let peer = RawPeer::connect_with(target, HelloLimits::default(), |t, _| {
                t[usize::from(bit)] ^= 1 << bit;
            });
            match peer {
                Err(e) if e.contains("rejected") => rejected += 1,
                Err(e) => panic!("forged token {bit}: {e}"),
                Ok(_) => panic!("forged token {bit} accepted"),
            }
        }
        rejected
    })
    .await
    .unwrap();
    assert_eq!(forged, 8);
    // The right token still connects a raw peer, and others are served meanwhile.
    let honest =
        tokio::task::spawn_blocking(move || RawPeer::connect(target, HelloLimits::default()));
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    let reply = client
        .echo(EchoRequest {
            payload: b"after".to_vec().into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload, &b"after"[..]);
    honest
        .await
        .unwrap()
        .expect("the token the server gave connects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_used_from_another_address_is_rejected() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    // One port for IPv4 and IPv6: the handshake over one family, the rdma_cm request
    // over the other (the guest's two addresses of each family are on the same wire).
    let endpoint: Endpoint = "rdma://[::]:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &settings(BIG)).await.unwrap();
    let port = listener.port();
    tokio::spawn(async move {
        server_with(Probe::default(), big_config())
            .serve(listener)
            .await
    });
    let v4: std::net::SocketAddr = format!("10.77.0.2:{port}").parse().unwrap();
    let v6: std::net::SocketAddr = format!("[fd00::2]:{port}").parse().unwrap();
    let outcome = tokio::task::spawn_blocking(move || {
        // An honest IPv4 peer: the server listens for rdma_cm on 10.77.0.2 from here on.
        let mut cm_v4 = None;
        let honest = RawPeer::connect_with(v4, HelloLimits::default(), |_, cm| cm_v4 = Some(*cm))
            .expect("an honest IPv4 raw peer connects");
        let cm_v4 = cm_v4.unwrap();
        // The handshake from fd00::1, the request, with its token, from 10.77.0.1.
        let thief = RawPeer::connect_with(v6, HelloLimits::default(), |_, cm| *cm = cm_v4);
        // The same split, each half from the right address, connects.
        let again = RawPeer::connect(v6, HelloLimits::default());
        (thief.err(), again.is_ok(), honest)
    })
    .await
    .unwrap();
    let (thief, again, _honest) = outcome;
    let thief = thief.expect("a request from another address than the handshake connected");
    assert!(thief.contains("rejected"), "{thief}");
    assert!(again, "an IPv6 raw peer connects");
}

/// A server process of the example binaries, killed on drop.
struct ServerProcess(Child);

impl ServerProcess {
    fn signal(&self, signal: &str) {
        let pid = self.0.id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    fn start(bin: &str, args: &[&str]) -> ServerProcess {
        let child = Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("start server");
        ServerProcess(child)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for_port(addr: &str) {
    // Up to 30 s: a server process starts slowly in an emulated guest under load.
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server at {addr} did not come up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_fails_calls_then_restarted_server_is_reached() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = format!("{SERVER_IP}:47001");
    let url = format!("rdma://{addr}");
    let bin = env!("CARGO_BIN_EXE_echo-server");
    let server = ServerProcess::start(bin, &["--addr", &url]);
    wait_for_port(&addr).await;
    let s = settings(BIG);
    let endpoint: Endpoint = url.parse().unwrap();
    let dial_settings = s.clone();
    let channel = Channel::with_reconnect(ClientConfig::default(), move || {
        let (endpoint, settings) = (endpoint.clone(), dial_settings.clone());
        async move { connect(&endpoint, &settings).await }
    })
    .await
    .unwrap();
    assert_eq!(
        channel.connection().unwrap().transport(),
        TransportKind::Rdma
    );
    let client = EchoClient::new(channel.clone());
    let calls: Vec<_> = (0..32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let r = client
                    .echo(EchoRequest {
                        payload: vec![i as u8; 100 + i * 500].into(),
                        delay_ms: 20_000,
                        ..Default::default()
                    })
                    .await;
                (r, start.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(server); // SIGKILL
    let killed_at = Instant::now();
    for call in calls {
        let (result, _) = call.await.unwrap();
        let status = result.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status}");
    }
    let took = killed_at.elapsed();
    assert!(
        took < s.rdma.ping_timeout + Duration::from_secs(3),
        "calls ended {took:?} after the kill"
    );

    let _server = ServerProcess::start(bin, &["--addr", &url]);
    wait_for_port(&addr).await;
    let client = EchoClient::new(rdma_channel(&addr, BIG, &s).await);
    let reply = client
        .echo(EchoRequest {
            payload: b"again".to_vec().into(),
            delay_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload, &b"again"[..]);
}

fn sh(cmd: &str) {
    let status = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(status.success(), "{cmd} failed");
}

/// Brings rxe1's link (veth1) back up with the IPv6 route scripts/softroce-vm gave it:
/// IPv6, unlike IPv4, drops a device's routes when it goes down (its addresses stay:
/// softroce-vm sets `keep_addr_on_down`).
fn veth1_up() {
    sh("ip link set veth1 up");
    sh("ip -6 route replace fd00::1 dev veth1 src fd00::2 table 201");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_down_reports_the_dead_peer_within_the_ping_timeout() {
    if skip() {
        return;
    }
    let _net = NETWORK.write().await;
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let s = quick_detection(BIG);
    let client = EchoClient::new(rdma_channel(&addr, BIG, &s).await);
    client
        .echo(EchoRequest {
            payload: b"warm".to_vec().into(),
            delay_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .echo(EchoRequest {
                        payload: vec![i; 64].into(),
                        delay_ms: 3_000,
                        ..Default::default()
                    })
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    sh("ip link set veth1 down");
    let cut = Instant::now();
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    let took = cut.elapsed();
    veth1_up();
    for outcome in outcomes {
        assert_eq!(outcome.unwrap_err().code(), Code::Unavailable);
    }
    assert!(
        took < s.rdma.ping_timeout + Duration::from_secs(2),
        "dead peer reported after {took:?}"
    );
    // Let the link come back before the next test uses it.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_sends_wait_for_the_lending_budget() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    // Room for one 200 KiB frame lent at a time: 16 callers take turns.
    let mut tight = settings(BIG);
    tight.rdma.lend_budget = Some(256 << 10);
    let client = EchoClient::new(rdma_channel(&addr, BIG, &tight).await);
    let calls: Vec<_> = (0..16u32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let sent: Vec<u8> = (0..200 << 10).map(|j: u32| (j ^ i) as u8).collect();
                let request = EchoRequest {
                    payload: sent.clone().into(),
                    ..Default::default()
                };
                let reply = client.echo(request).await.unwrap();
                assert!(reply.into_inner().payload == sent, "call {i}");
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
    let counters = client
        .channel()
        .connection()
        .unwrap()
        .rdma_counters()
        .unwrap();
    assert_eq!(counters.rendezvous_sends, 16, "{counters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_down_event_fails_the_server_connections_at_once() {
    if skip() {
        return;
    }
    let _net = NETWORK.write().await;
    // Pings far too slow to explain a prompt failure: only the asynchronous port event can.
    let mut slow = settings(BIG);
    slow.rdma.ping_interval = Duration::from_secs(30);
    slow.rdma.ping_timeout = Duration::from_secs(120);
    let (tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let probe = Probe {
        dropped: Some(tx),
        ..Default::default()
    };
    let server = server_with(probe, big_config());
    let listener = AnyListener::bind(&format!("rdma://{SERVER_IP}:0").parse().unwrap(), &slow)
        .await
        .unwrap();
    let addr = format!("{SERVER_IP}:{}", listener.port());
    tokio::spawn(async move { server.serve(listener).await });
    let client = EchoClient::new(rdma_channel(&addr, BIG, &slow).await);
    let calls: Vec<_> = (0..4u8)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let slow_call = EchoRequest {
                    payload: vec![i; 8].into(),
                    delay_ms: 60_000,
                    ..Default::default()
                };
                client.echo(slow_call).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    sh("ip link set veth1 down"); // rxe1's port: the server's side
    let cut = Instant::now();
    let mut handlers_dropped = 0;
    while handlers_dropped < 4 {
        match tokio::time::timeout(Duration::from_secs(15), dropped.recv()).await {
            Ok(Some(_)) => handlers_dropped += 1,
            _ => break,
        }
    }
    let took = cut.elapsed();
    veth1_up();
    for call in calls {
        call.abort();
    }
    eprintln!("port down: {handlers_dropped} server handlers dropped after {took:?}");
    assert_eq!(
        handlers_dropped, 4,
        "the server's connection failed on the port event"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_percent_loss_still_delivers_everything() {
    if skip() {
        return;
    }
    let _net = NETWORK.write().await;
    let addr = Rdma
        .start(server_with(Probe::default(), big_config()))
        .await;
    let mut s = settings(BIG);
    // Retransmissions stall the link for whole ACK timeouts: give pings more slack.
    s.rdma.ping_timeout = Duration::from_secs(20);
    let channel = rdma_channel(&addr, BIG, &s).await;
    sh("tc qdisc add dev veth0 root netem loss 2%");
    let kv = KvClient::new(channel.clone());
    let echo = EchoClient::new(channel.clone());
    let result = async {
        for i in 0..150usize {
            let size = [10, 3000, 20_000, 300_000][i % 4];
            let sent: Vec<u8> = (0..size).map(|j| (i * 13 + j) as u8).collect();
            let reply = echo
                .echo(EchoRequest {
                    payload: sent.clone().into(),
                    delay_ms: 0,
                    ..Default::default()
                })
                .await?;
            assert!(reply.into_inner().payload == sent, "call {i}");
        }
        let value: Vec<u8> = (0..(1 << 20)).map(|j| (j % 251) as u8).collect();
        kv.put(PutRequest {
            key: "lossy".into(),
            value: value.clone().into(),
        })
        .await?;
        let got = kv
            .get(GetRequest {
                key: "lossy".into(),
            })
            .await?
            .into_inner()
            .value;
        assert!(got == value);
        Ok::<_, rdmarpc_core::Status>(())
    }
    .await;
    sh("tc qdisc del dev veth0 root");
    result.unwrap();
    assert_eq!(
        channel
            .connection()
            .unwrap()
            .rdma_counters()
            .unwrap()
            .errors,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_delivers_in_flight_responses() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let endpoint: Endpoint = format!("rdma://{SERVER_IP}:0").parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &settings(BIG)).await.unwrap();
    let addr = format!("{SERVER_IP}:{}", listener.port());
    let probe = Probe::default();
    let running = probe.running.clone();
    let server = server_with(probe, big_config());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        server
            .serve_with_shutdown(listener, async {
                let _ = stopped.await;
            })
            .await
    });
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    // A small and a rendezvous-sized response, both in flight when the shutdown starts.
    let calls: Vec<_> = [100usize, 300_000]
        .into_iter()
        .map(|size| {
            let client = client.clone();
            tokio::spawn(async move {
                let sent = vec![7u8; size];
                let reply = client
                    .echo(EchoRequest {
                        payload: sent.clone().into(),
                        delay_ms: 400,
                        ..Default::default()
                    })
                    .await
                    .expect("in-flight call was not allowed to finish");
                assert!(reply.into_inner().payload == sent);
            })
        })
        .collect();
    while running.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(()).unwrap();
    for call in calls {
        call.await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// Frames go up in the order the peer sent them: a small frame sent right after a large
/// one (which the receiver must first pull with RDMA READ) does not overtake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_arrive_in_the_order_sent_across_eager_and_rendezvous() {
    use prost::bytes::BufMut;
    use rdmarpc_core::wire::{FrameKind, Header};
    use rdmarpc_core::{Connection, Listener, Metadata};
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let endpoint: Endpoint = format!("rdma://{SERVER_IP}:0").parse().unwrap();
    let mut listener = AnyListener::bind(&endpoint, &settings(BIG)).await.unwrap();
    let addr: Endpoint = format!("rdma://{SERVER_IP}:{}", listener.port())
        .parse()
        .unwrap();
    let client_settings = settings(BIG);
    let (client, server) = tokio::join!(connect(&addr, &client_settings), listener.accept());
    let (client, server) = (client.unwrap(), server.unwrap());
    assert_eq!(client.transport(), TransportKind::Rdma);
    // Sizes alternate between rendezvous (READ) and eager; 2 MiB ones take a while.
    let sizes: Vec<usize> = (0..24)
        .map(|i| match i % 3 {
            0 => 2 << 20,
            1 => 100,
            _ => 300_000,
        })
        .collect();
    let send = async {
        for (id, &size) in sizes.iter().enumerate() {
            let mut header = Header::new(FrameKind::Request, id as u64 + 1);
            header.payload_len = size as u32;
            let metadata = Metadata::new();
            let mut frame = client
                .alloc(rdmarpc_core::wire::HEADER_LEN + metadata.encoded_len() + size)
                .await
                .unwrap();
            rdmarpc_core::wire::encode_head(&mut header, &metadata, &mut frame);
            frame.put_bytes(id as u8, size);
            client.send(frame).await.unwrap();
        }
    };
    let receive = async {
        let mut order = Vec::new();
        for _ in 0..sizes.len() {
            let frame = server.recv().await.unwrap().expect("a frame");
            let header = Header::decode(&frame).unwrap().unwrap();
            let id = header.call_id as usize - 1;
            assert_eq!(frame.len(), rdmarpc_core::wire::HEADER_LEN + sizes[id]);
            assert!(frame[rdmarpc_core::wire::HEADER_LEN..]
                .iter()
                .all(|&b| b == id as u8));
            order.push(id);
            drop(frame);
        }
        order
    };
    let ((), order) = tokio::join!(send, receive);
    assert_eq!(order, (0..sizes.len()).collect::<Vec<_>>(), "arrival order");
}

/// A balanced channel over two RDMA servers (`auto://` endpoints: RDMA where both ends
/// have a device) spreads its calls over both, over RDMA; the process's RDMA counters,
/// published as metrics, count them, and keep counting closed connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_auto_endpoints_use_rdma_and_counters_become_metrics() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let mut addrs = Vec::new();
    for _ in 0..2 {
        addrs.push(
            Rdma.start(server_with(Probe::default(), big_config()))
                .await,
        );
    }
    let before = rdmarpc_transport::process_counters();
    let target = format!("auto://{},{}", addrs[0], addrs[1]);
    let channel = Channel::<AnyConnection>::connect(&target).await.unwrap();
    let start = Instant::now();
    while !channel.endpoints().iter().all(|e| e.connected) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            channel.endpoints()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = EchoClient::new(channel.clone());
    for i in 0..100u32 {
        let reply = client
            .echo(EchoRequest {
                payload: i.to_le_bytes().to_vec().into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(&reply.into_inner().payload[..], &i.to_le_bytes());
    }
    let after = rdmarpc_transport::process_counters();
    // Each call: a request and a response sent eagerly over RDMA, in this process.
    assert!(
        after.eager_sends.saturating_sub(before.eager_sends) >= 200,
        "{before:?} -> {after:?}"
    );
    assert!(after.live_connections >= before.live_connections + 4);
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, rdmarpc_transport::publish_rdma_metrics);
    let published: std::collections::HashMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(v) => {
                Some((key.key().name().to_owned(), v))
            }
            metrics_util::debugging::DebugValue::Gauge(v) => {
                Some((key.key().name().to_owned(), v.into_inner() as u64))
            }
            _ => None,
        })
        .collect();
    assert!(
        published["rpc_rdma_eager_sends_total"] >= after.eager_sends,
        "{published:?}"
    );
    assert!(published["rpc_rdma_connections"] >= 4, "{published:?}");
    // Closed connections still count.
    drop(client);
    drop(channel);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let closed = rdmarpc_transport::process_counters();
    assert!(
        closed.eager_sends >= after.eager_sends,
        "{after:?} -> {closed:?}"
    );
}
