//! Hostile HTTP/2 (gRPC) peers against a real `echo-server` process over TCP, gRPC on
//! the same port: clients that grant no flow-control window, clients that stop reading
//! the socket, peers that stop answering PINGs, and rapid reset (streams opened and reset
//! right after the server accepted them). Attackers connect from 127.0.0.2 and up; a
//! well-behaved client on 127.0.0.1 is served meanwhile. Each test prints its figures
//! (`hostile: …`); see `docs/limits.md` for the bounds they check.
//!
//! `HOSTILE_SERVER_BIN` runs them against another `echo-server` build (e.g. an older
//! one, to measure the "before" figures).

#[allow(dead_code)] // shared with hostile.rs, which uses all of it
mod peer;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use examples::echo::EchoRequest;
use peer::grpc::*;
use peer::*;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

/// A TCP connection from 127.0.0.`2 + n % 200`, to the server.
async fn attacker_socket(server: &ServerProcess, n: usize) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    let from = format!("127.0.0.{}:0", 2 + n % 200);
    socket.bind(from.parse().unwrap()).unwrap();
    socket
        .connect(server.addr().parse().unwrap())
        .await
        .unwrap()
}

/// A socket that stops reading once told (`deaf`): its reads never complete again.
struct Deaf {
    io: TcpStream,
    deaf: Arc<AtomicBool>,
}

impl AsyncRead for Deaf {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.deaf.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Deaf {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// An HTTP/2 client from an attacker's address, built by `builder`, on a socket that
/// stops reading when its flag is set.
async fn h2_attacker(
    server: &ServerProcess,
    n: usize,
    builder: &h2::client::Builder,
) -> (h2::client::SendRequest<Bytes>, Arc<AtomicBool>) {
    let deaf = Arc::new(AtomicBool::new(false));
    let io = Deaf {
        io: attacker_socket(server, n).await,
        deaf: deaf.clone(),
    };
    let (client, connection) = builder.handshake(io).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    (client, deaf)
}

/// Starts an echo call whose reply is `reply_size` bytes.
async fn start_echo(
    client: &mut h2::client::SendRequest<Bytes>,
    request: &EchoRequest,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut ready = client.clone().ready().await.unwrap();
    let (response, mut body) = ready
        .send_request(grpc_request("/echo.Echo/Echo"), false)
        .unwrap();
    body.send_data(prefixed_echo(request), true).unwrap();
    *client = ready;
    (response, body)
}

/// How the server ended the call's stream: the reset's reason, or `None` if the call
/// ended otherwise (or did not within `within`).
async fn reset_reason(
    response: h2::client::ResponseFuture,
    within: Duration,
) -> Option<h2::Reason> {
    let call = async {
        let response = match response.await {
            Ok(response) => response,
            Err(e) => return e.reason(),
        };
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            match chunk {
                Ok(chunk) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                Err(e) => return e.reason(),
            }
        }
        body.trailers().await.err().and_then(|e| e.reason())
    };
    tokio::time::timeout(within, call).await.ok().flatten()
}

fn reply_of(size: u32) -> EchoRequest {
    EchoRequest {
        payload: vec![7; 16].into(),
        reply_size: size,
        ..Default::default()
    }
}

/// (a) 32 connections that read but grant no window (`SETTINGS_INITIAL_WINDOW_SIZE` 0),
/// four 1 MiB replies each: every call is reset (`CANCEL`) once its reply waited the
/// stream idle timeout, its buffers freed; a good client is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_window_calls_are_reset_after_the_stream_idle_timeout() {
    let server = ServerProcess::start(&[
        ("RPC_GRPC_STREAM_IDLE_TIMEOUT_MS", "1000"),
        ("RPC_GRPC_KEEPALIVE_INTERVAL_MS", "0"),
    ]);
    good_call(server.port).await.expect("served before");
    let rss0 = server.rss_kib();
    let mut builder = h2::client::Builder::new();
    builder.initial_window_size(0);
    let mut calls = Vec::new();
    let mut clients = Vec::new();
    for n in 0..32 {
        let (mut client, _) = h2_attacker(&server, n, &builder).await;
        for _ in 0..4 {
            // Each call's time to its reset counts from its start.
            let began = Instant::now();
            let (response, body) = start_echo(&mut client, &reply_of(1 << 20)).await;
            calls.push(tokio::spawn(async move {
                let reason = reset_reason(response, Duration::from_secs(8)).await;
                drop(body);
                (reason, began.elapsed())
            }));
        }
        clients.push(client);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_held = server.rss_kib();
    let served = good_call(server.port).await;
    let mut cancelled = 0;
    let mut last = Duration::ZERO;
    for call in calls {
        let (reason, at) = call.await.unwrap();
        if reason == Some(h2::Reason::CANCEL) {
            cancelled += 1;
            last = last.max(at);
        }
    }
    let served_after = good_call(server.port).await;
    report(&format!(
        "(a) 128 zero-window calls of 1 MiB on 32 connections: {cancelled} reset CANCEL, the slowest {last:?} after its start; RSS +{} KiB held, +{} KiB after; good client during {served:?}, after {served_after:?}",
        rss_held.saturating_sub(rss0),
        server.rss_kib().saturating_sub(rss0),
    ));
    assert_eq!(cancelled, 128, "every stalled call reset within 8 s");
    assert!(last < Duration::from_secs(1) + Duration::from_secs(5));
    served.expect("a good client is served while they wait");
    served_after.expect("a good client is served after");
    assert!(
        server.rss_kib().saturating_sub(rss0) < 512 * 1024,
        "RSS bounded"
    );
}

/// (b) 32 connections that grant windows but stop reading the socket, eight 1 MiB replies
/// each (coming 5 s after the requests): the server's writes stall and each connection is closed after the write
/// timeout (the descriptors back to where they were); a good client is served. The
/// sending account is raised so that every connection's replies are queued at once:
/// with the default figures (16 MiB per peer) the replies of two connections at a time
/// are, and the others wait for the account, their sockets closed in turn as their
/// replies come to be written (the write timeout measures the peer, not the account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_stop_reading_are_closed_after_the_write_timeout() {
    let server = ServerProcess::start(&[
        ("RPC_GRPC_WRITE_TIMEOUT_MS", "1000"),
        ("RPC_GRPC_STREAM_IDLE_TIMEOUT_MS", "60000"),
        ("RPC_GRPC_KEEPALIVE_INTERVAL_MS", "0"),
        ("RPC_SERVER_MAX_SENDING_BYTES", "1073741824"),
        ("RPC_SERVER_MAX_SENDING_BYTES_PER_PEER", "1073741824"),
        ("RPC_SERVER_MAX_HELD_BYTES", "1073741824"),
        ("RPC_SERVER_MAX_HELD_BYTES_PER_PEER", "1073741824"),
    ]);
    good_call(server.port).await.expect("served before");
    let (rss0, fds0) = (server.rss_kib(), settled_fds(&server).await);
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(16 << 20)
        .initial_connection_window_size(1 << 30);
    let mut attackers = Vec::new();
    // The replies come 5 s after the requests: all 32 are open and deaf by then.
    let mut request = reply_of(1 << 20);
    request.delay_ms = 5000;
    for n in 0..32 {
        let (mut client, deaf) = h2_attacker(&server, n, &builder).await;
        let mut calls = Vec::new();
        for _ in 0..8 {
            calls.push(start_echo(&mut client, &request).await);
        }
        deaf.store(true, Ordering::Relaxed);
        attackers.push((client, calls));
    }
    let opened = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (fds_held, rss_held) = (server.fds(), server.rss_kib());
    let served = good_call(server.port).await;
    let closed = server.wait_fds_at_most(fds0, Duration::from_secs(25)).await;
    report(&format!(
        "(b) 32 connections that stop reading, 8 MiB of replies each: {} fds held, back to {fds0} {:?} after the calls went ({closed:?} of waiting); RSS +{} KiB held; good client {served:?}",
        fds_held,
        opened.elapsed(),
        rss_held.saturating_sub(rss0),
    ));
    assert!(fds_held >= fds0 + 32, "the connections were open");
    closed.expect("closed by the reply delay (5 s) + the write timeout (1 s) + slack");
    served.expect("a good client is served meanwhile");
    good_call(server.port).await.expect("served after");
    drop(attackers);
}

/// (d) Peers that stop answering (their socket unread) after the handshake: the server's
/// keepalive PING goes unanswered and each connection is closed after the keepalive
/// interval and timeout; an idle client that answers PINGs keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_that_stop_answering_pings_are_closed_by_the_keepalive() {
    let server = ServerProcess::start(&[
        ("RPC_GRPC_KEEPALIVE_INTERVAL_MS", "500"),
        ("RPC_GRPC_KEEPALIVE_TIMEOUT_MS", "500"),
    ]);
    good_call(server.port).await.expect("served before");
    let fds0 = settled_fds(&server).await;
    let builder = h2::client::Builder::new();
    // A live client, idle: it answers the PINGs.
    let (mut live, _) = h2_attacker(&server, 100, &builder).await;
    let mut dead = Vec::new();
    for n in 0..8 {
        let (client, deaf) = h2_attacker(&server, n, &builder).await;
        deaf.store(true, Ordering::Relaxed);
        dead.push(client);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fds_held = server.fds();
    let closed = server
        .wait_fds_at_most(fds0 + 1, Duration::from_secs(10))
        .await;
    // Past several keepalive rounds, the live client's connection still serves.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (response, _body) = start_echo(&mut live, &reply_of(10)).await;
    let live_served = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .map(|r| r.map(|r| r.status()));
    report(&format!(
        "(d) 8 peers that stop reading: {fds_held} fds held, back to {} after {closed:?}; the idle live client's call after 2 s more: {live_served:?}",
        fds0 + 1
    ));
    assert!(fds_held >= fds0 + 9, "the connections were open");
    closed.expect("closed by keepalive (0.5 s + 0.5 s) + slack");
    assert!(
        matches!(live_served, Ok(Ok(s)) if s == http::StatusCode::OK),
        "a client that answers PINGs keeps its connection"
    );
    drop(dead);
}

/// (c) Rapid reset: a client opens streams (echo calls that would wait 10 s) and resets
/// each right after the server accepted it (a PING's round trip after its request). The
/// server counts the resets of accepted streams and answers GOAWAY `ENHANCE_YOUR_CALM`
/// once they are past its budget, long before 10,000 resets; a good client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_gets_goaway_enhance_your_calm() {
    let server = ServerProcess::start(&[]);
    good_call(server.port).await.expect("served before");
    let (rss0, fds0) = (server.rss_kib(), settled_fds(&server).await);
    let io = attacker_socket(&server, 0).await;
    let (mut client, mut connection) = h2::client::handshake(io).await.unwrap();
    let mut ping_pong = connection.ping_pong().expect("a ping handle");
    let driver = tokio::spawn(connection);
    let slow = EchoRequest {
        payload: vec![7; 16].into(),
        delay_ms: 10_000,
        ..Default::default()
    };
    let started = Instant::now();
    let mut resets = 0;
    let attack = async {
        while resets < 10_000 {
            let Ok(mut ready) = client.clone().ready().await else {
                break;
            };
            let Ok((_response, mut body)) =
                ready.send_request(grpc_request("/echo.Echo/Echo"), false)
            else {
                break;
            };
            if body.send_data(prefixed_echo(&slow), true).is_err() {
                break;
            }
            // Once the PING's answer came, the server has read the request (and
            // accepted the stream): the reset comes after the accept.
            if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                break;
            }
            body.send_reset(h2::Reason::CANCEL);
            resets += 1;
            client = ready;
        }
    };
    let timed_out = tokio::time::timeout(Duration::from_secs(60), attack)
        .await
        .is_err();
    let took = started.elapsed();
    let ended = tokio::time::timeout(Duration::from_secs(5), driver).await;
    let reason = match &ended {
        Ok(Ok(Err(e))) => e.reason(),
        _ => None,
    };
    let served = good_call(server.port).await;
    let closed = server.wait_fds_at_most(fds0, Duration::from_secs(5)).await;
    report(&format!(
        "(c) rapid reset: {resets} streams reset in {took:?} before the connection ended ({reason:?}, timed out: {timed_out}); closed {closed:?}; RSS +{} KiB; good client {served:?}",
        server.rss_kib().saturating_sub(rss0)
    ));
    assert_eq!(
        reason,
        Some(h2::Reason::ENHANCE_YOUR_CALM),
        "GOAWAY ENHANCE_YOUR_CALM"
    );
    assert!(
        resets < 2000,
        "stopped after {resets} resets, within the budget (256) + slack"
    );
    closed.expect("the connection closed");
    served.expect("a good client is served");
}

/// (c') The rapid-reset budget's other side: a well-behaved gRPC client that gives up on
/// calls is not taken for an attacker. On one connection, 600 calls that outlive their
/// 50 ms deadline (reset at the deadline, as gRPC clients do) and 600 calls of which two
/// in five are dropped by the application 30 ms in (resets the server counts) leave the
/// connection open: the next call goes on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancelling_its_calls_keeps_its_connection() {
    use examples::echo::echo_client::EchoClient;
    use rdmarpc_core::{Channel, Code, Request};
    use rdmarpc_transport::AnyConnection;

    let server = ServerProcess::start(&[]);
    let url = format!("grpc://127.0.0.1:{}", server.port);
    let channel = Channel::<AnyConnection>::connect(&url).await.unwrap();
    let client = EchoClient::new(channel.clone());
    client.echo(EchoRequest::default()).await.unwrap();
    let first = channel.connection().expect("connected");
    let slow = |ms| EchoRequest {
        payload: vec![3; 16].into(),
        delay_ms: ms,
        ..Default::default()
    };
    let mut expired = 0;
    for _round in 0..10 {
        let calls: Vec<_> = (0..60)
            .map(|_| {
                let client = client.clone();
                let mut request = Request::new(slow(200));
                request.set_timeout(Duration::from_millis(50));
                tokio::spawn(async move { client.echo(request).await })
            })
            .collect();
        for call in calls {
            let status = call.await.unwrap().unwrap_err();
            assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
            expired += 1;
        }
    }
    let (mut dropped, mut finished) = (0, 0);
    for _round in 0..10 {
        let calls: Vec<_> = (0..60)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    if i % 5 < 2 {
                        let call = client.echo(slow(200));
                        tokio::time::timeout(Duration::from_millis(30), call)
                            .await
                            .is_err()
                    } else {
                        client.echo(slow(40)).await.expect("served");
                        false
                    }
                })
            })
            .collect();
        for call in calls {
            if call.await.unwrap() {
                dropped += 1;
            } else {
                finished += 1;
            }
        }
    }
    let reply = client.echo(EchoRequest::default()).await;
    let same = channel
        .connection()
        .is_some_and(|now| Arc::ptr_eq(&now, &first));
    report(&format!(
        "(c') a client giving up: {expired} calls past their deadline, {dropped} dropped and {finished} finished; next call {:?} on the same connection: {same}",
        reply.as_ref().map(|_| "OK")
    ));
    reply.expect("the next call is served");
    assert_eq!(dropped, 240);
    assert!(same, "the connection stayed open");
}

/// Handlers that panic (on their first poll, and after an await) under gRPC: each fails
/// its own call INTERNAL, while a slower call started before them on the same HTTP/2
/// connection and the calls after them are served there, and another client meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_only_its_own_grpc_call() {
    let mut server = ServerProcess::start(&[]);
    let (mut client, _) = h2_attacker(&server, 0, &h2::client::Builder::new()).await;
    let slow = EchoRequest {
        payload: vec![5; 64].into(),
        delay_ms: 300,
        ..Default::default()
    };
    let (slow_call, _body) = start_echo(&mut client, &slow).await;
    let mut codes = Vec::new();
    for delay_ms in [0, 20] {
        let panics = EchoRequest {
            panic: true,
            delay_ms,
            ..Default::default()
        };
        let (response, _body) = start_echo(&mut client, &panics).await;
        codes.push(grpc_status(response).await);
    }
    let (after, _body) = start_echo(&mut client, &reply_of(1000)).await;
    let after = grpc_status(after).await;
    let slow = grpc_status(slow_call).await;
    let other = good_call(server.port).await;
    report(&format!(
        "grpc: panicking handlers -> {codes:?}; the call in flight beside them -> {slow:?}, the next one -> {after:?}; other client {other:?}"
    ));
    assert_eq!(codes, [Some(13), Some(13)], "INTERNAL, each");
    assert_eq!(slow, Some(0), "the call in flight beside them");
    assert_eq!(after, Some(0), "the same connection serves on");
    other.expect("another client is served");
    assert!(server.is_alive());
}
