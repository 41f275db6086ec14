//! Hostile peers against the server's one resource model (`rdmarpc_core::account`): from
//! other loopback addresses (127.0.0.2 and up) against a real `echo-server` process with
//! its default settings, while a well-behaved client on 127.0.0.1 is served within its
//! deadlines. Each test prints its figures (`hostile: …`); `HOSTILE_SERVER_BIN` runs
//! them against another `echo-server` build (the code before the fix, for the "before"
//! figures).
//!
//! - Compressed requests are charged at the size they inflate to: 400 gRPC calls of 4 MiB
//!   of gzip'd zeros (~4 KiB each on the wire) held by their handler do not make the
//!   server hold 400 x 4 MiB.
//! - Long-lived streams hold stream slots, not call permits: 4,400 `Health/Watch` streams
//!   from four addresses leave unary calls served.
//! - Replies nobody reads are held bytes: thousands of requests of ~10 bytes for 1 MiB
//!   replies (gigabytes asked) from four addresses that never read, over TCP frames and
//!   over HTTP/2, leave the server under 256 MiB and a fifth client served.

#[allow(dead_code)]
mod peer;

use std::io::Write;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use prost::Message;

use examples::echo::EchoRequest;
use peer::grpc::*;
use peer::*;
use tokio::io::AsyncWriteExt;

/// The server's resident memory must stay under this with the default settings.
const RSS_BOUND_KIB: u64 = 256 * 1024;

/// `message` gzip'd, with gRPC's prefix flagged compressed.
fn gzip_prefixed(message: &[u8]) -> Bytes {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(message).unwrap();
    let compressed = encoder.finish().unwrap();
    let mut out = vec![1u8];
    out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
    out.extend_from_slice(&compressed);
    out.into()
}

/// 400 gzip'd requests of 4 MiB of zeros each (the echo server takes up to 16 MiB), each
/// held by its handler for 6 s, over 4 connections from 127.0.0.2. Charged at their
/// compressed size (as before the account), they took the server from 6 MiB to
/// 1,373 MiB; charged as they inflate, the peer holds at most its share (32 MiB) and
/// the rest are refused with RESOURCE_EXHAUSTED. A well-behaved client is served
/// meanwhile, and the server stays under 256 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_requests_are_charged_at_their_inflated_size() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let rss0 = server.rss_kib();
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let request = EchoRequest {
        payload: vec![0; 4 << 20].into(),
        delay_ms: 6000,
        reply_size: 16,
        ..Default::default()
    };
    let body = gzip_prefixed(&request.encode_to_vec());
    let mut calls = Vec::new();
    for _ in 0..4 {
        let mut client = h2_from(&server, attacker).await;
        for _ in 0..100 {
            client = client.ready().await.unwrap();
            let request = Request::builder()
                .method("POST")
                .uri("http://localhost/echo.Echo/Echo")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header("grpc-encoding", "gzip")
                .body(())
                .unwrap();
            let (response, mut stream) = client.send_request(request, false).unwrap();
            stream.send_data(body.clone(), true).unwrap();
            calls.push(tokio::spawn(grpc_status_within(
                response,
                Duration::from_secs(600),
            )));
        }
    }
    let wire = 400 * body.len();
    // While the handlers hold their requests: the peak, and a good client meanwhile.
    let mut peak = 0;
    let started = Instant::now();
    let mut served = Vec::new();
    while started.elapsed() < Duration::from_secs(4) {
        peak = peak.max(server.rss_kib());
        served.push(good_call(server.port).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut codes = std::collections::BTreeMap::new();
    for call in calls {
        let code = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("every call answered")
            .unwrap();
        *codes.entry(code).or_insert(0) += 1;
    }
    let failed = served.iter().filter(|s| s.is_err()).count();
    report(&format!(
        "compression: 400 gzip'd 4 MiB requests ({} KiB on the wire in all) from 127.0.0.2: server RSS {} -> peak {} MiB; statuses {codes:?}; good client {} of {} calls served",
        wire >> 10,
        rss0 >> 10,
        peak >> 10,
        served.len() - failed,
        served.len(),
    ));
    assert_eq!(
        failed, 0,
        "the good client is served throughout: {served:?}"
    );
    assert!(peak < RSS_BOUND_KIB, "server RSS peaked at {peak} KiB");
    // The peer's share: a few run (OK), the rest are refused.
    assert!(codes.get(&Some(0)).copied().unwrap_or(0) >= 1, "{codes:?}");
    assert!(
        codes.get(&Some(8)).copied().unwrap_or(0) >= 300,
        "{codes:?}"
    );
}

/// What one attacker of the replies tests asks for: `connections` connections from each
/// of 127.0.0.2-5, `calls` echo calls on each for replies of `reply` bytes.
const ATTACKERS: std::ops::RangeInclusive<u8> = 2..=5;

/// Samples the server's RSS and makes a good call from 127.0.0.1 every 200 ms for
/// `during`; returns the peak and the calls' outcomes.
async fn watch_while(
    server: &ServerProcess,
    during: Duration,
) -> (u64, Vec<Result<Duration, rdmarpc_core::Status>>) {
    let mut peak = 0;
    let started = Instant::now();
    let mut served = Vec::new();
    while started.elapsed() < during {
        peak = peak.max(server.rss_kib());
        served.push(good_call(server.port).await);
        peak = peak.max(server.rss_kib());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (peak, served)
}

/// Four addresses (127.0.0.2-5) each open 16 connections of the framework's TCP frames
/// and send 64 requests of ~10 bytes on each for a 1 MiB reply, 4,096 in all (4 GiB
/// asked), and never read. Before responses were charged, each connection held its 8 MiB send
/// queue and, beyond it, every running call's reply waiting for room (the per-connection
/// call limit, 256): gigabytes. Now a reply beyond its request is charged to the bytes
/// account until the transport takes it (refused `RESOURCE_EXHAUSTED` past the peer's
/// share), and what the transports queue is charged to the sending account (a wait),
/// each with a reserve shared fairly: the server stays under 256 MiB, and a fifth client
/// on 127.0.0.1 is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_nobody_reads_from_four_addresses_are_bounded_over_tcp_frames() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let rss0 = server.rss_kib();
    let request = EchoRequest {
        reply_size: 1 << 20,
        ..Default::default()
    };
    let mut held = Vec::new();
    for last in ATTACKERS {
        let source = IpAddr::from([127, 0, 0, last]);
        for _ in 0..16 {
            let mut stream = connect_from(&server, source).await;
            let mut frames = Vec::new();
            for id in 1..=64u64 {
                frames.extend_from_slice(&request_frame(id, ECHO, &request, 0));
            }
            stream.write_all(&frames).await.unwrap();
            held.push(stream);
        }
    }
    let (peak, served) = watch_while(&server, Duration::from_secs(6)).await;
    let failed = served.iter().filter(|s| s.is_err()).count();
    report(&format!(
        "replies unread (TCP frames): 4,096 requests for 1 MiB replies from 127.0.0.2-5 on 64 connections, never read: server RSS {} -> peak {} MiB; good client {} of {} calls served, first failure {:?}",
        rss0 >> 10,
        peak >> 10,
        served.len() - failed,
        served.len(),
        served.iter().find(|s| s.is_err()),
    ));
    assert_eq!(failed, 0, "the good client is served throughout");
    assert!(peak < RSS_BOUND_KIB, "server RSS peaked at {peak} KiB");
    drop(held);
}

/// The same over HTTP/2: four addresses each open 8 connections that grant no window
/// (INITIAL_WINDOW_SIZE 0) and make 64 calls on each for 1 MiB replies. The bridge's
/// response buffer (16 MiB per connection) held them before; now it is charged to the
/// sending account, and the replies waiting for it to the bytes account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_nobody_reads_from_four_addresses_are_bounded_over_http2() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let rss0 = server.rss_kib();
    let body = prefixed_echo(&EchoRequest {
        reply_size: 1 << 20,
        ..Default::default()
    });
    let mut held = Vec::new();
    for last in ATTACKERS {
        let source = IpAddr::from([127, 0, 0, last]);
        for _ in 0..8 {
            let tcp = connect_from(&server, source).await;
            let (mut client, connection) = h2::client::Builder::new()
                .initial_window_size(0)
                .initial_connection_window_size(65_535)
                .handshake::<_, Bytes>(tcp)
                .await
                .unwrap();
            held.push(tokio::spawn(connection));
            for _ in 0..64 {
                client = client.ready().await.unwrap();
                let (response, mut stream) = client
                    .send_request(grpc_request("/echo.Echo/Echo"), false)
                    .unwrap();
                stream.send_data(body.clone(), true).unwrap();
                // Headers may come; the body is never read (no window is granted).
                held.push(tokio::spawn(async move {
                    let _response = response.await;
                    std::future::pending::<()>().await;
                    Ok(())
                }));
            }
        }
    }
    let (peak, served) = watch_while(&server, Duration::from_secs(6)).await;
    let failed = served.iter().filter(|s| s.is_err()).count();
    report(&format!(
        "replies unread (HTTP/2, no window): 2,048 calls for 1 MiB replies from 127.0.0.2-5 on 32 connections: server RSS {} -> peak {} MiB; good client {} of {} calls served, first failure {:?}",
        rss0 >> 10,
        peak >> 10,
        served.len() - failed,
        served.len(),
        served.iter().find(|s| s.is_err()),
    ));
    assert_eq!(failed, 0, "the good client is served throughout");
    assert!(peak < RSS_BOUND_KIB, "server RSS peaked at {peak} KiB");
    for task in held {
        task.abort();
    }
}

const WATCH: u32 = rdmarpc_core::codegen::method_id("/grpc.health.v1.Health/Watch");

/// Four addresses (127.0.0.2-5) each open 1,100 `grpc.health.v1.Health/Watch` streams,
/// 4,400 on 24 connections, and keep them open. When streams held call permits (before
/// the account), they took every server-wide permit (4 x the per-peer 1,024 = 4,096) and
/// a fifth client's unary calls timed out. Open streams now hold stream slots: the fifth
/// client's unary calls are served, and so is a stream of its own (each address holds at
/// most its 1,024 slots of the server's 8,192).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lived_streams_from_four_addresses_leave_unary_calls_served() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let mut held = Vec::new();
    for last in 2..=5u8 {
        let source = IpAddr::from([127, 0, 0, last]);
        let mut id = 0u64;
        for connection in 0..6 {
            let mut stream = connect_from(&server, source).await;
            // 1,100 per address over its 6 connections: 184, 184, 183, ...
            let streams = 1100 / 6 + u64::from(connection < 1100 % 6);
            let mut frames = Vec::new();
            for _ in 0..streams {
                id += 1;
                frames.extend_from_slice(&request_frame(id, WATCH, &(), 0));
            }
            stream.write_all(&frames).await.unwrap();
            held.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rss = server.rss_kib();
    let mut served = Vec::new();
    for _ in 0..3 {
        for _ in 0..20 {
            served.push(good_call(server.port).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failed = served.iter().filter(|s| s.is_err()).count();
    // A stream of its own opens too.
    let client = channel(server.port, 1 << 20).await;
    let streamed = tokio::time::timeout(Duration::from_secs(5), async {
        let mut replies = client
            .repeat(examples::echo::RepeatRequest {
                payload: vec![1; 16].into(),
                count: 10,
            })
            .await?
            .into_inner();
        let mut n = 0;
        while replies.message().await?.is_some() {
            n += 1;
        }
        Ok::<_, rdmarpc_core::Status>(n)
    })
    .await;
    report(&format!(
        "long-lived streams: 4,400 Watch streams from 4 addresses on 24 connections; server RSS {} MiB; fifth client: {} of 60 unary calls served, its stream {streamed:?}; first failure {:?}",
        rss >> 10,
        60 - failed,
        served.iter().find(|s| s.is_err()),
    ));
    assert_eq!(failed, 0, "every unary call of the fifth client is served");
    assert_eq!(streamed.expect("within 5 s").expect("stream"), 10);
    assert!(rss < RSS_BOUND_KIB, "server RSS {rss} KiB");
    drop(held);
}

/// FNV-1a's multiplier (the method id hash) and its inverse modulo 2^32.
const FNV_PRIME: u32 = 0x0100_0193;

fn fnv_inverse() -> u32 {
    // Newton's iteration: each step doubles the correct low bits of an odd number's inverse.
    let mut inverse = FNV_PRIME;
    for _ in 0..5 {
        inverse = inverse.wrapping_mul(2u32.wrapping_sub(FNV_PRIME.wrapping_mul(inverse)));
    }
    inverse
}

/// A path other than `target` with the same method id: `prefix` and six characters,
/// found by meeting in the middle (three characters forward from the prefix's state,
/// three backward from the target's id: 2^36 pairs for a 32-bit match).
fn colliding_path(target: &str, prefix: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let goal = rdmarpc_core::codegen::method_id(target);
    let start = rdmarpc_core::codegen::method_id(prefix);
    let step = |h: u32, b: u8| (h ^ u32::from(b)).wrapping_mul(FNV_PRIME);
    let mut forward = std::collections::HashMap::new();
    for &a in ALPHABET {
        for &b in ALPHABET {
            for &c in ALPHABET {
                forward.insert(step(step(step(start, a), b), c), [a, b, c]);
            }
        }
    }
    let inverse = fnv_inverse();
    let back = |h: u32, b: u8| h.wrapping_mul(inverse) ^ u32::from(b);
    for &f in ALPHABET {
        for &e in ALPHABET {
            for &d in ALPHABET {
                if let Some(first) = forward.get(&back(back(back(goal, f), e), d)) {
                    let tail = [first[0], first[1], first[2], d, e, f];
                    let path = format!("{prefix}{}", std::str::from_utf8(&tail).unwrap());
                    assert_eq!(rdmarpc_core::codegen::method_id(&path), goal);
                    return path;
                }
            }
        }
    }
    panic!("no collision found (expected about 16)");
}

/// A unary gRPC call from `source` whose body is `body`, sent a byte every `every`;
/// returns the call's `grpc-status` and how long it took.
async fn trickled_call(
    server: &ServerProcess,
    source: IpAddr,
    path: &str,
    timeout: Option<&str>,
    body: Bytes,
    every: Duration,
) -> (Option<u32>, Duration) {
    let mut client = h2_from(server, source).await;
    client = client.ready().await.unwrap();
    let mut request = Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(timeout) = timeout {
        request = request.header("grpc-timeout", timeout);
    }
    let (response, mut stream) = client
        .send_request(request.body(()).unwrap(), body.is_empty())
        .unwrap();
    let started = Instant::now();
    let answer = tokio::spawn(grpc_status_within(response, Duration::from_secs(600)));
    if every.is_zero() {
        let _ = stream.send_data(body, true);
    } else {
        let sender = tokio::spawn(async move {
            for i in 0..body.len() {
                let last = i + 1 == body.len();
                if stream.send_data(body.slice(i..i + 1), last).is_err() {
                    return;
                }
                tokio::time::sleep(every).await;
            }
        });
        drop(sender);
    }
    let status = tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
    (status, started.elapsed())
}

/// A unary body trickled a byte every 300 ms (each read well within the body timeout)
/// ends when the body timeout (2 s here) has passed since the request's headers: the
/// bound is per body, not per read; and with `grpc-timeout` (1 s), at the deadline, with
/// DEADLINE_EXCEEDED. Before, such a body was read for as long as it kept trickling.
/// A path whose hash collides with `/echo.Echo/Echo` is not routed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_ends_at_the_body_timeout_and_a_colliding_path_routes_nowhere() {
    let server = ServerProcess::start(&[("RPC_GRPC_BODY_TIMEOUT_MS", "2000")]);
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let body = prefixed_echo(&EchoRequest {
        payload: vec![1; 64].into(),
        ..Default::default()
    });
    let (trickled, deadlined, good) = tokio::join!(
        trickled_call(
            &server,
            attacker,
            "/echo.Echo/Echo",
            None,
            body.clone(),
            Duration::from_millis(300)
        ),
        trickled_call(
            &server,
            attacker,
            "/echo.Echo/Echo",
            Some("1S"),
            body.clone(),
            Duration::from_millis(300)
        ),
        good_call(server.port),
    );
    let collision = colliding_path("/echo.Echo/Echo", "/echo.Echo/X");
    let (routed, _) = trickled_call(
        &server,
        attacker,
        &collision,
        None,
        body.clone(),
        Duration::ZERO,
    )
    .await;
    let (echoed, _) = trickled_call(
        &server,
        attacker,
        "/echo.Echo/Echo",
        None,
        body,
        Duration::ZERO,
    )
    .await;
    report(&format!(
        "trickle: a {}-byte body a byte every 300 ms: status {:?} after {:?} (body timeout 2 s); with grpc-timeout 1S: {:?} after {:?}; good client {good:?}; {collision} (id of /echo.Echo/Echo): status {routed:?}",
        64 + 7,
        trickled.0,
        trickled.1,
        deadlined.0,
        deadlined.1,
    ));
    good.expect("a good client is served meanwhile");
    assert_eq!(trickled.0, Some(1), "CANCELLED at the body timeout");
    assert!(trickled.1 < Duration::from_secs(6), "{:?}", trickled.1);
    assert_eq!(deadlined.0, Some(4), "DEADLINE_EXCEEDED at grpc-timeout");
    assert!(deadlined.1 < Duration::from_secs(4), "{:?}", deadlined.1);
    assert_eq!(
        routed,
        Some(12),
        "UNIMPLEMENTED for a path it does not name"
    );
    assert_eq!(echoed, Some(0), "the real path is served");
}

/// A unary gRPC call on `client` with `body`, `timeout` its `grpc-timeout`: its status
/// (within 30 s) and how long it took.
async fn call_on(
    client: &h2::client::SendRequest<Bytes>,
    timeout: Option<&str>,
    body: Bytes,
) -> (Option<u32>, Duration) {
    let mut request = grpc_request("/echo.Echo/Echo");
    if let Some(timeout) = timeout {
        request
            .headers_mut()
            .insert("grpc-timeout", timeout.parse().unwrap());
    }
    let mut client = client.clone().ready().await.unwrap();
    let (response, mut stream) = client.send_request(request, false).unwrap();
    let started = Instant::now();
    stream.send_data(body, true).unwrap();
    let status = grpc_status_within(response, Duration::from_secs(30)).await;
    (status, started.elapsed())
}

/// Unary bodies that find no room on their connection's account (1 MiB here, 600 KiB of
/// it held by a call whose handler keeps its request for 5 s) wait, unread, for room, and
/// no longer than the body timeout (2 s: CANCELLED) or their deadline (`grpc-timeout`
/// 1 s: DEADLINE_EXCEEDED); once the holder is done, the same connection is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_bodies_with_no_room_on_the_account_wait_no_longer_than_their_timeouts() {
    let server = ServerProcess::start(&[
        ("RPC_GRPC_BODY_TIMEOUT_MS", "2000"),
        ("RPC_SERVER_MAX_HELD_BYTES_PER_CONNECTION", "1048576"),
    ]);
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let client = h2_from(&server, attacker).await;
    let large = |delay_ms| {
        prefixed_echo(&EchoRequest {
            payload: vec![7; 600 << 10].into(),
            delay_ms,
            reply_size: 16,
            ..Default::default()
        })
    };
    let holding = tokio::spawn({
        let (client, body) = (client.clone(), large(5000));
        async move { call_on(&client, None, body).await }
    });
    // The holder's request is read and charged first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (stalled, deadlined, good) = tokio::join!(
        call_on(&client, None, large(0)),
        call_on(&client, Some("1S"), large(0)),
        good_call(server.port),
    );
    let held = holding.await.unwrap();
    let after = call_on(&client, None, large(0)).await;
    report(&format!(
        "no room: 600 KiB unary bodies behind a 600 KiB request held 5 s (connection limit 1 MiB): status {:?} after {:?} (body timeout 2 s); with grpc-timeout 1S: {:?} after {:?}; the holder {:?}; the same connection after: {:?}; good client {good:?}",
        stalled.0, stalled.1, deadlined.0, deadlined.1, held.0, after.0,
    ));
    good.expect("a good client is served meanwhile");
    assert_eq!(stalled.0, Some(1), "CANCELLED at the body timeout");
    assert!(stalled.1 < Duration::from_millis(4000), "{:?}", stalled.1);
    assert_eq!(deadlined.0, Some(4), "DEADLINE_EXCEEDED at grpc-timeout");
    assert!(
        deadlined.1 < Duration::from_millis(4000),
        "{:?}",
        deadlined.1
    );
    assert_eq!(held.0, Some(0), "the holder is served");
    assert_eq!(after.0, Some(0), "room is back once the holder is done");
}

/// Unary requests of about, exactly and twice the connection's byte limit, alone on their
/// connection, are served: a message larger than the limit is charged as the whole of it,
/// and reading the rest of its body (its end) waits for no room it holds itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_requests_up_to_twice_the_account_alone_on_it_are_served() {
    let server = ServerProcess::start(&[
        ("RPC_GRPC_BODY_TIMEOUT_MS", "2000"),
        ("RPC_SERVER_MAX_HELD_BYTES_PER_CONNECTION", "1048576"),
    ]);
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let client = h2_from(&server, attacker).await;
    for size in [1000 << 10, 1 << 20, 2 << 20] {
        let body = prefixed_echo(&EchoRequest {
            payload: vec![7; size].into(),
            delay_ms: 100,
            reply_size: 16,
            ..Default::default()
        });
        let (status, took) = call_on(&client, None, body).await;
        report(&format!(
            "alone: a unary request of {size} bytes (connection limit 1 MiB): status {status:?} after {took:?}"
        ));
        assert_eq!(status, Some(0), "{size} bytes");
    }
}
