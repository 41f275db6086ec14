//! Hostile peers against a real `echo-server` process over TCP on 127.0.0.1, one test per
//! item of the hardening issue: floods without reading, thousands of slow calls, silent
//! and stalled sockets, headers that lie about lengths, oversized responses, a client
//! that never reads, duplicate call ids, panicking handlers; and gRPC (HTTP/2) clients on
//! the same port that lie about lengths, stall, or never read. Each test asserts on the
//! server's memory (VmRSS) and open file descriptors from /proc, and on a well-behaved
//! client being served meanwhile. Each prints its figures (`hostile: …`); see
//! `docs/limits.md` for the bounds they check.
//!
//! `HOSTILE_SERVER_BIN` runs them against another `echo-server` build (e.g. an older
//! one, to measure the "before" figures).

mod peer;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use prost::Message;

use examples::echo::EchoRequest;
use peer::grpc::*;
use peer::*;
use rdmarpc_core::wire::{FrameKind, Header};
use rdmarpc_core::Code;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Item 1: PINGs and requests for an unknown method, sent by a peer that never reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_and_unknown_method_flood_without_reading_is_bounded() {
    let server = ServerProcess::start(&[("RPC_TCP_WRITE_TIMEOUT_MS", "2000")]);
    good_call(server.port).await.expect("served before");
    let (rss0, fds0) = (server.rss_kib(), settled_fds(&server).await);

    let mut hostile = TcpStream::connect(server.addr()).await.unwrap();
    let mut chunk = Vec::new();
    for i in 0..(1 << 20) / 40 {
        let header = if i % 2 == 0 {
            Header::new(FrameKind::Ping, i)
        } else {
            let mut h = Header::new(FrameKind::Request, i);
            h.method_id = 0xdead_beef;
            h
        };
        chunk.extend_from_slice(&header.encode());
    }
    // Up to 64 MiB of 40-byte frames (1.6 million), until the server stops reading.
    let sent = write_until_stalled(&mut hostile, &chunk, 64).await;
    let rss_flood = server.rss_kib();
    let served = good_call(server.port).await;
    report(&format!(
        "item 1: sent {} MiB of PING/unknown-method frames without reading; server RSS +{} KiB",
        sent >> 20,
        rss_flood.saturating_sub(rss0)
    ));
    served.expect("a good client is served during the flood");
    assert!(
        rss_flood.saturating_sub(rss0) < 64 * 1024,
        "RSS grew {} KiB",
        rss_flood - rss0
    );
    assert!(sent < 64 << 20, "the server stopped reading (backpressure)");
    // The server's write timeout (2 s) closes the hostile connection, which still does
    // not read (reading would let the server's writes progress).
    let closed = server.wait_fds_at_most(fds0, Duration::from_secs(10)).await;
    report(&format!(
        "item 1: hostile connection closed by the server {closed:?} after the flood"
    ));
    closed.expect("closed by the write timeout");
    assert!(
        wait_closed(&mut hostile, Duration::from_secs(5))
            .await
            .is_some(),
        "the socket reaches EOF"
    );
}

/// Item 2: one connection with thousands of slow calls (default limits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_slow_calls_on_one_connection_leave_room_for_others() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let (rss0, fds0) = (server.rss_kib(), settled_fds(&server).await);
    let hostile = TcpStream::connect(server.addr()).await.unwrap();
    let (mut rx, mut tx) = hostile.into_split();
    let mut frames = Vec::new();
    for id in 1..=5000u64 {
        let request = EchoRequest {
            payload: vec![1; 16].into(),
            delay_ms: 30_000,
            ..Default::default()
        };
        frames.extend_from_slice(&request_frame(id, ECHO, &request, 0));
    }
    tx.write_all(&frames).await.unwrap();
    // The reader is not blocked behind the waiting calls: a cancel and a ping are read.
    tx.write_all(&control_frame(FrameKind::Cancel, 300))
        .await
        .unwrap();
    tx.write_all(&control_frame(FrameKind::Ping, 424242))
        .await
        .unwrap();
    let started = Instant::now();
    let mut refused = 0;
    let pong = loop {
        match tokio::time::timeout(Duration::from_secs(10), read_frame(&mut rx)).await {
            Ok(Some((h, _))) if h.kind == FrameKind::Pong => break Some(started.elapsed()),
            Ok(Some((h, _))) if Code::from_u8(h.status) == Code::ResourceExhausted => refused += 1,
            Ok(Some((h, _))) => panic!("unexpected {h:?}"),
            Ok(None) | Err(_) => break None,
        }
    };
    let served = good_call(server.port).await;
    report(&format!(
        "item 2: 5000 slow calls on one connection: {refused} refused at once, PONG after {pong:?}, good client: {served:?}"
    ));
    assert!(pong.is_some(), "PING answered while calls wait");
    assert!(
        refused >= 5000 - 256 - 1024,
        "beyond running + queued: refused"
    );
    served.expect("another client is served");
    assert!(server.rss_kib().saturating_sub(rss0) < 64 * 1024);
    // Its EOF is seen at once, and its handlers are dropped.
    drop((rx, tx));
    server
        .wait_fds_at_most(fds0, Duration::from_secs(5))
        .await
        .expect("connection released");
    good_call(server.port).await.expect("served after");
}

/// Item 3: sockets that stay silent, stop in the middle of a header, of a frame, or of an
/// RDMA hello.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_stalled_sockets_are_closed() {
    let server = ServerProcess::start(&[
        ("RPC_HANDSHAKE_TIMEOUT_MS", "1000"),
        ("RPC_TCP_FIRST_FRAME_TIMEOUT_MS", "1000"),
        ("RPC_TCP_FRAME_TIMEOUT_MS", "1000"),
    ]);
    let fds0 = settled_fds(&server).await;
    let mut half_frame = EchoRequest {
        payload: vec![0; 1000].into(),
        ..Default::default()
    };
    half_frame.delay_ms = 0;
    let half_frame = request_frame(1, ECHO, &half_frame, 0)[..100].to_vec();
    let kinds: [(&str, Vec<u8>); 4] = [
        ("silent", Vec::new()),
        (
            "half header",
            control_frame(FrameKind::Ping, 1)[..20].to_vec(),
        ),
        ("half frame", half_frame),
        ("half RDMA hello", rdma_hello_prefix()),
    ];
    let mut sockets = Vec::new();
    for (kind, bytes) in &kinds {
        let n = if *kind == "silent" { 150 } else { 50 };
        for _ in 0..n {
            let mut s = TcpStream::connect(server.addr()).await.unwrap();
            s.write_all(bytes).await.unwrap();
            sockets.push((*kind, s));
        }
    }
    let held = server.fds();
    let served = good_call(server.port).await;
    let started = Instant::now();
    let mut waits = tokio::task::JoinSet::new();
    for (kind, mut s) in sockets {
        waits.spawn(async move {
            let mut byte = [0u8; 1];
            let closed = tokio::time::timeout(Duration::from_secs(8), s.read(&mut byte))
                .await
                .ok()
                .map(|_| started.elapsed());
            (kind, closed)
        });
    }
    let mut worst: Vec<(&str, Option<Duration>)> = Vec::new();
    while let Some(done) = waits.join_next().await {
        let (kind, closed) = done.unwrap();
        match worst.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, w)) => *w = w.zip(closed).map(|(a, b)| a.max(b)),
            None => worst.push((kind, closed)),
        }
    }
    report(&format!(
        "item 3: 300 stalled sockets held {} fds; closed by the server after (worst per kind) {worst:?}",
        held - fds0
    ));
    served.expect("a good client is served meanwhile");
    for (kind, closed) in worst {
        assert!(closed.is_some(), "{kind} sockets are closed");
    }
    server
        .wait_fds_at_most(fds0, Duration::from_secs(5))
        .await
        .expect("every stalled socket released");
}

/// Item 4: headers that promise the maximum payload and send a few bytes, under an
/// address-space limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_claiming_huge_frames_reserve_nothing() {
    let mut server = ServerProcess::start_limited(&[], 1536 << 20);
    good_call(server.port).await.expect("served before");
    let rss0 = server.rss_kib();
    let mut sockets = Vec::new();
    for id in 0..200 {
        let mut h = Header::new(FrameKind::Request, id);
        h.method_id = ECHO;
        h.payload_len = (16 << 20) - 1; // the server's maximum
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&[0u8; 100]);
        let mut s = TcpStream::connect(server.addr()).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        sockets.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alive = server.is_alive();
    let rss = server.rss_kib();
    let served = good_call(server.port).await;
    report(&format!(
        "item 4: 200 headers claiming 16 MiB each (3.2 GB) under a 1.5 GiB address-space limit: server alive {alive}, RSS +{} KiB",
        rss.saturating_sub(rss0)
    ));
    assert!(alive, "the server survives");
    served.expect("and serves");
    assert!(rss.saturating_sub(rss0) < 64 * 1024);
    // The liars hold the process-wide allowance for buffers allocated at a header's
    // length: an honest large call is still served, its frame buffer growing with what
    // arrives, then moved to a buffer of its own.
    let client = peer::channel(server.port, 4 << 20).await;
    let payload = bytes::Bytes::from((0..3_000_000u32).map(|i| (i / 7) as u8).collect::<Vec<_>>());
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.echo(EchoRequest {
            payload: payload.clone(),
            ..Default::default()
        }),
    )
    .await
    .expect("served in time")
    .expect("a large call beside the liars");
    assert!(reply.into_inner().payload == payload, "echoed content");
    drop(sockets);
}

/// Item 5: a response over the server's size limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_the_limit_fails_its_call_with_resource_exhausted() {
    let server = ServerProcess::start(&[("RPC_MAX_MESSAGE_SIZE", "1048576")]);
    let client = channel(server.port, 8 << 20).await;
    let started = Instant::now();
    let request = EchoRequest {
        reply_size: 2 << 20,
        ..Default::default()
    };
    let status = tokio::time::timeout(Duration::from_secs(10), client.echo(request))
        .await
        .expect("answered, not left to a deadline")
        .unwrap_err();
    report(&format!(
        "item 5: 2 MiB response over a 1 MiB limit: {} after {:?}: {}",
        status.code(),
        started.elapsed(),
        status.message()
    ));
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("2097"), "{}", status.message());
    let ok = client
        .echo(EchoRequest {
            payload: b"next".to_vec().into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ok.into_inner().payload, &b"next"[..]);
}

/// Item 6: a client that asks for large responses and never reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_bounded_server_memory() {
    let server = ServerProcess::start(&[("RPC_TCP_WRITE_TIMEOUT_MS", "3000")]);
    good_call(server.port).await.expect("served before");
    let (rss0, fds0) = (server.rss_kib(), settled_fds(&server).await);
    let mut hostile = TcpStream::connect(server.addr()).await.unwrap();
    let mut frames = Vec::new();
    for id in 1..=2000u64 {
        let request = EchoRequest {
            reply_size: 256 << 10,
            ..Default::default()
        };
        frames.extend_from_slice(&request_frame(id, ECHO, &request, 0));
    }
    hostile.write_all(&frames).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss = server.rss_kib();
    let served = good_call(server.port).await;
    let closed = server.wait_fds_at_most(fds0, Duration::from_secs(15)).await;
    report(&format!(
        "item 6: 2000 requests for 256 KiB replies, never read (500 MiB asked): server RSS +{} KiB; connection closed by the write timeout {closed:?} later",
        rss.saturating_sub(rss0)
    ));
    served.expect("a good client is served");
    // 256 calls may hold their reply (64 MiB) plus the 8 MiB send queue.
    assert!(rss.saturating_sub(rss0) < 128 * 1024);
    closed.expect("the write timeout closes it");
    assert!(wait_closed(&mut hostile, Duration::from_secs(5))
        .await
        .is_some());
}

/// Item 7: two calls in flight with the same call id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_call_id_closes_only_that_connection() {
    let server = ServerProcess::start(&[]);
    let mut hostile = TcpStream::connect(server.addr()).await.unwrap();
    // Handlers that would answer only after a minute: a server that let the duplicate
    // through would stay silent far past the bound below (generous, for a loaded host
    // running the other hostile tests' floods at the same time).
    let slow = EchoRequest {
        delay_ms: 60_000,
        ..Default::default()
    };
    hostile
        .write_all(&request_frame(7, ECHO, &slow, 0))
        .await
        .unwrap();
    hostile
        .write_all(&request_frame(7, ECHO, &slow, 0))
        .await
        .unwrap();
    let (mut rx, _tx) = hostile.into_split();
    let answer = tokio::time::timeout(Duration::from_secs(20), read_frame(&mut rx))
        .await
        .expect("the server acts at once");
    report(&format!(
        "item 7: duplicate call id: connection closed: {}",
        answer.is_none()
    ));
    assert!(answer.is_none(), "closed without an answer: {answer:?}");
    good_call(server.port).await.expect("others are served");
}

/// Item 8: handlers that panic on their first poll and after an await.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_only_its_own_call() {
    let mut server = ServerProcess::start(&[]);
    let client = channel(server.port, 1 << 20).await;
    for delay_ms in [0, 20] {
        let request = EchoRequest {
            panic: true,
            delay_ms,
            ..Default::default()
        };
        let status = tokio::time::timeout(Duration::from_secs(10), client.echo(request))
            .await
            .expect("answered")
            .unwrap_err();
        report(&format!(
            "item 8: handler panics after {delay_ms} ms: {} {}",
            status.code(),
            status.message()
        ));
        assert_eq!(status.code(), Code::Internal);
        let ok = client
            .echo(EchoRequest {
                payload: b"still here".to_vec().into(),
                ..Default::default()
            })
            .await
            .expect("the same connection still serves");
        assert_eq!(ok.into_inner().payload, &b"still here"[..]);
    }
    assert!(server.is_alive());
}

/// VmRSS of this process, in KiB.
fn own_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// Streams: a million-message server stream whose client pauses reading holds bounded
/// memory on both sides (the window stops the server; without it, the paused client
/// would buffer what the server produces), and every message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_message_server_stream_has_bounded_memory() {
    use examples::echo::echo_client::EchoClient;
    use examples::echo::RepeatRequest;
    const COUNT: u64 = 1_000_000;
    let server = ServerProcess::start(&[]);
    let conn = rdmarpc_transport_tcp::TcpConnection::connect(
        &format!("127.0.0.1:{}", server.port),
        &rdmarpc_transport_tcp::TcpConfig::default(),
    )
    .await
    .unwrap();
    let client = EchoClient::new(rdmarpc_core::Channel::new(conn));
    let payload = bytes::Bytes::from(vec![7u8; 64]);
    let mut stream = client
        .repeat(RepeatRequest {
            payload: payload.clone(),
            count: COUNT,
        })
        .await
        .unwrap()
        .into_inner();
    for _ in 0..1000 {
        assert_eq!(stream.message().await.unwrap().unwrap().payload, payload);
    }
    let (server0, client0) = (server.rss_kib(), own_rss_kib());
    // Paused: at 64 B a message the server would produce its 1,000,000 (104 MB of frames)
    // in this time if nothing stopped it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (server_paused, client_paused) = (server.rss_kib(), own_rss_kib());
    let mut received = 1000;
    let (mut server_peak, mut client_peak) = (server_paused, client_paused);
    while let Some(reply) = stream.message().await.unwrap() {
        assert_eq!(reply.payload.len(), 64);
        received += 1;
        if received % 100_000 == 0 {
            server_peak = server_peak.max(server.rss_kib());
            client_peak = client_peak.max(own_rss_kib());
        }
    }
    assert_eq!(received, COUNT);
    report(&format!(
        "streams: 1,000,000 x 64 B server stream, client paused 2 s: server RSS +{} KiB paused, \
         +{} KiB peak; client RSS +{} KiB paused, +{} KiB peak",
        server_paused.saturating_sub(server0),
        server_peak.saturating_sub(server0),
        client_paused.saturating_sub(client0),
        client_peak.saturating_sub(client0),
    ));
    for (what, grew) in [
        ("server, paused", server_paused.saturating_sub(server0)),
        ("server, peak", server_peak.saturating_sub(server0)),
        ("client, paused", client_paused.saturating_sub(client0)),
        ("client, peak", client_peak.saturating_sub(client0)),
    ] {
        assert!(grew < 16 * 1024, "{what}: RSS grew {grew} KiB");
    }
}

/// The repeat method's wire id.
const REPEAT: u32 = rdmarpc_core::codegen::method_id("/echo.Echo/Repeat");

/// Opens `connections` connections from `source` (an address of the loopback network)
/// and `per_connection` endless server streams on each, announcing a receive window of
/// one byte: every stream's handler sends one message, then waits for a window update
/// that never comes, holding its permits (a stream without a deadline has no lifetime
/// limit). The sockets are returned open.
async fn hold_idle_streams(
    server: &ServerProcess,
    source: std::net::IpAddr,
    connections: usize,
    per_connection: u64,
) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..connections {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((source, 0).into()).unwrap();
        let mut stream = socket
            .connect(server.addr().parse().unwrap())
            .await
            .unwrap();
        let mut frames = Vec::new();
        for id in 1..=per_connection {
            let request = examples::echo::RepeatRequest {
                payload: vec![7; 64].into(),
                count: u64::MAX,
            };
            let mut frame = request_frame(id, REPEAT, &request, 0);
            // The header's credits: the client's receive window for this stream (0 would
            // mean the default).
            let mut header = Header::decode(&frame).unwrap().unwrap();
            header.credits = 1;
            frame[..rdmarpc_core::wire::HEADER_LEN].copy_from_slice(&header.encode());
            frames.extend_from_slice(&frame);
        }
        stream.write_all(&frames).await.unwrap();
        held.push(stream);
    }
    held
}

/// A stream from the other address, of 100 messages, within 5 s.
async fn other_stream(
    port: u16,
) -> Result<Result<usize, rdmarpc_core::Status>, tokio::time::error::Elapsed> {
    let client = channel(port, 1 << 20).await;
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut replies = client
            .repeat(examples::echo::RepeatRequest {
                payload: vec![1; 16].into(),
                count: 100,
            })
            .await?
            .into_inner();
        let mut n = 0;
        while replies.message().await?.is_some() {
            n += 1;
        }
        Ok::<_, rdmarpc_core::Status>(n)
    })
    .await
}

/// One peer (127.0.0.2) opens many connections, each with as many idle streams as one
/// connection may open: they hold stream slots, never call permits, so unary calls from
/// another address are served whatever the share; and the peer takes its share of the
/// server-wide slots, not all of them, so a stream from another address opens too. On a
/// server whose per-peer share is the whole server, the server's fair reserve keeps room
/// for the other client's stream (before the reserve, it starved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_many_connections_of_idle_streams_takes_only_its_share() {
    let attacker: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let limits = |per_peer: &'static str| {
        [
            ("RPC_SERVER_MAX_OPEN_STREAMS", "64"),
            ("RPC_SERVER_MAX_OPEN_STREAMS_PER_CONNECTION", "16"),
            ("RPC_SERVER_MAX_OPEN_STREAMS_PER_PEER", per_peer),
            // Streams that held call permits (before streams had slots of their own)
            // would take every one of these.
            ("RPC_SERVER_MAX_CONCURRENT_CALLS", "64"),
            ("RPC_SERVER_MAX_CONCURRENT_CALLS_PER_CONNECTION", "16"),
            ("RPC_SERVER_MAX_CONCURRENT_CALLS_PER_PEER", "64"),
        ]
    };
    // 8 connections x 16 streams: twice the server's slots.
    let server = ServerProcess::start(&limits("32"));
    good_call(server.port).await.expect("served before");
    let held = hold_idle_streams(&server, attacker, 8, 16).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served = good_call(server.port).await;
    let streamed = other_stream(server.port).await;
    report(&format!(
        "per-peer share: 128 idle streams from 127.0.0.2 over 8 connections (share 32 of 64 slots): other client's call {served:?}, stream {streamed:?}"
    ));
    served.expect("a client from another address is served");
    assert_eq!(streamed.expect("within 5 s").expect("stream"), 100);
    drop(held);

    // The per-peer share is the whole server: the server's fair reserve still leaves
    // the other client room (the attacker gets the common half, 32 slots, and half the
    // reserve, 16). Before the reserve, this attack took every slot and the other
    // client's stream starved (its unary calls were served: streams hold no permit).
    let server = ServerProcess::start(&limits("64"));
    good_call(server.port).await.expect("served before");
    let held = hold_idle_streams(&server, attacker, 8, 16).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served = good_call(server.port).await;
    let streamed = other_stream(server.port).await;
    report(&format!(
        "per-peer share: share 64 of 64, the server's fair reserve: other client's call {served:?}, stream {streamed:?}"
    ));
    served.expect("unary calls are served: streams hold no call permit");
    assert_eq!(streamed.expect("within 5 s").expect("stream"), 100);
    drop(held);
}

// gRPC (HTTP/2) clients on the same port: lies about message lengths, stalled bodies,
// requests that are not gRPC, a client that never reads its server streams.

/// An HTTP/2 client connection to the server's port.
async fn h2_client(server: &ServerProcess) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_lies_about_lengths_stalls_and_non_grpc_requests_fail_alone() {
    let server = ServerProcess::start(&[("RPC_GRPC_BODY_TIMEOUT_MS", "500")]);
    good_call(server.port).await.expect("served before");
    let mut client = h2_client(&server).await;

    // A prefix claiming 4 GiB, and nothing after it: refused from the prefix alone.
    let (response, mut body) = client
        .send_request(grpc_request("/echo.Echo/Echo"), false)
        .unwrap();
    body.send_data(Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]), false)
        .unwrap();
    let lie = grpc_status(response).await;
    // A message of 100 bytes of which 10 arrive, then nothing: the body timeout ends it.
    let started = Instant::now();
    let (response, mut body) = client
        .send_request(grpc_request("/echo.Echo/Echo"), false)
        .unwrap();
    let mut partial = vec![0, 0, 0, 0, 100];
    partial.extend_from_slice(&[7; 10]);
    body.send_data(partial.into(), false).unwrap();
    let stalled = grpc_status(response).await;
    let stalled_after = started.elapsed();
    // Not gRPC: HTTP's 415.
    let request = Request::builder()
        .method("POST")
        .uri("http://localhost/echo.Echo/Echo")
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let not_grpc = response.await.unwrap().status();
    // The same HTTP/2 connection still serves a good call.
    let (response, mut body) = client
        .send_request(grpc_request("/echo.Echo/Echo"), false)
        .unwrap();
    let request = examples::echo::EchoRequest {
        payload: vec![3; 100].into(),
        ..Default::default()
    };
    body.send_data(prefixed(&request.encode_to_vec()), true)
        .unwrap();
    let good = grpc_status(response).await;
    let other = good_call(server.port).await;
    report(&format!(
        "grpc: 4 GiB prefix -> {lie:?}; stalled body -> {stalled:?} after {stalled_after:?}; json -> {not_grpc}; good call on the same connection -> {good:?}; other client {other:?}"
    ));
    assert_eq!(lie, Some(8), "RESOURCE_EXHAUSTED");
    assert_eq!(stalled, Some(1), "CANCELLED by the body timeout");
    assert!(stalled_after < Duration::from_secs(5));
    assert_eq!(not_grpc, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(good, Some(0));
    other.expect("another client is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_that_never_reads_its_streams_holds_bounded_server_memory() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let rss0 = server.rss_kib();
    let mut client = h2_client(&server).await;
    // 32 endless server streams of 16 KiB messages, never read.
    let mut held = Vec::new();
    for _ in 0..32 {
        let (response, mut body) = client
            .send_request(grpc_request("/echo.Echo/Repeat"), false)
            .unwrap();
        let request = examples::echo::RepeatRequest {
            payload: vec![5; 16 * 1024].into(),
            count: u64::MAX,
        };
        body.send_data(prefixed(&request.encode_to_vec()), true)
            .unwrap();
        held.push(response);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grown = server.rss_kib().saturating_sub(rss0);
    let other = good_call(server.port).await;
    report(&format!(
        "grpc: 32 server streams of 16 KiB messages never read: server RSS +{grown} KiB; other client {other:?}"
    ));
    other.expect("another client is served");
    // Per stream: the server's window for it (1 MiB) and HTTP/2's send buffer, at most.
    assert!(grown < 64 * 1024, "RSS grew {grown} KiB");
    drop(held);
}
