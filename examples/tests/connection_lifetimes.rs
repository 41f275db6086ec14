//! `max_connection_age` (with its grace) and `max_connection_idle` against a real
//! `echo-server` process, over the framework's TCP frames and over gRPC (HTTP/2) on the
//! same port: the server says GOAWAY when a connection is old or idle, closes it once
//! the grace has run out under calls that do not finish, and a well-behaved client on
//! 127.0.0.1 moves to new connections with nothing lost. Peers that watch the frames
//! connect from 127.0.0.2 and up.

#[allow(dead_code)]
mod peer;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::EchoRequest;
use peer::grpc::*;
use peer::*;
use rdmarpc_core::wire::FrameKind;
use rdmarpc_core::{Channel, Code};
use rdmarpc_transport::AnyConnection;
use tokio::io::AsyncWriteExt;

/// A raw TCP-frames connection from `source` with one echo call of `delay_ms` sent.
async fn raw_call_from(
    server: &ServerProcess,
    source: IpAddr,
    call_id: u64,
    delay_ms: u32,
) -> tokio::net::TcpStream {
    let mut tcp = connect_from(server, source).await;
    let request = EchoRequest {
        payload: b"raw".to_vec().into(),
        delay_ms,
        ..Default::default()
    };
    tcp.write_all(&request_frame(call_id, ECHO, &request, 0))
        .await
        .unwrap();
    tcp
}

/// A well-behaved client of the server over `scheme` (`tcp`, `grpc`): a channel that
/// dials again when its connection is retired.
async fn client(server: &ServerProcess, scheme: &str) -> EchoClient<AnyConnection> {
    let url = format!("{scheme}://127.0.0.1:{}", server.port);
    EchoClient::new(Channel::<AnyConnection>::connect(&url).await.unwrap())
}

/// The next frame within `within`, skipping none; `None` at EOF.
async fn next_frame(
    tcp: &mut tokio::net::TcpStream,
    within: Duration,
) -> Option<(rdmarpc_core::wire::Header, Vec<u8>)> {
    tokio::time::timeout(within, read_frame(tcp))
        .await
        .expect("a frame or the end within the time given")
}

/// The age is 400 ms (±10 %), the grace 600 ms. A client making calls for 3 s, some of
/// them 250 ms long, gets every answer right although its connection is retired every
/// ~400 ms; a raw connection sees GOAWAY at its age and is closed at the end of the
/// grace with its 10 s call in flight; an HTTP/2 connection is told GOAWAY too and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_connections_are_retired_with_nothing_lost() {
    let server = ServerProcess::start(&[
        ("RPC_SERVER_MAX_CONNECTION_AGE_MS", "400"),
        ("RPC_SERVER_MAX_CONNECTION_AGE_GRACE_MS", "600"),
    ]);
    let watcher: IpAddr = "127.0.0.2".parse().unwrap();

    // The raw watcher: GOAWAY at its age, closed at the grace's end, its call unanswered.
    let opened = Instant::now();
    let mut raw = raw_call_from(&server, watcher, 1, 10_000).await;
    let (header, _) = next_frame(&mut raw, Duration::from_secs(10))
        .await
        .expect("a GOAWAY, not the end");
    let aged = opened.elapsed();
    assert_eq!(header.kind, FrameKind::GoAway, "{header:?}");
    assert!(aged >= Duration::from_millis(350), "GOAWAY after {aged:?}");
    let closed = next_frame(&mut raw, Duration::from_secs(10)).await;
    let graced = opened.elapsed() - aged;
    assert!(closed.is_none(), "the call is not answered: {closed:?}");
    assert!(
        graced >= Duration::from_millis(550),
        "closed {graced:?} after the GOAWAY"
    );
    report(&format!(
        "max_connection_age 400 ms: GOAWAY after {aged:?}, closed {graced:?} later (grace 600 ms)"
    ));

    // An HTTP/2 connection: GOAWAY, and its 10 s call ends when the grace is out.
    let (mut h2, connection) = h2_watched(&server, watcher).await;
    let opened = Instant::now();
    h2 = h2.ready().await.unwrap();
    let (response, mut body) = h2
        .send_request(grpc_request("/echo.Echo/Echo"), false)
        .unwrap();
    body.send_data(
        prefixed_echo(&EchoRequest {
            delay_ms: 10_000,
            ..Default::default()
        }),
        true,
    )
    .unwrap();
    let status = grpc_status_within(response, Duration::from_secs(10)).await;
    let ended = opened.elapsed();
    assert_ne!(status, Some(0), "the 10 s call did not succeed");
    assert!(
        ended >= Duration::from_millis(900) && ended < Duration::from_secs(8),
        "the HTTP/2 call ended after {ended:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("the HTTP/2 connection ends");
    report(&format!(
        "HTTP/2: the call in flight ended after {ended:?} (status {status:?}); the connection ended: {end:?}"
    ));

    // Well-behaved clients, the framework's frames and gRPC: every call answered,
    // content checked.
    for scheme in ["tcp", "grpc"] {
        let client = client(&server, scheme).await;
        let started = Instant::now();
        let mut calls = 0;
        while started.elapsed() < Duration::from_secs(3) {
            let long = calls % 5 == 0;
            let payload = format!("call {calls}").into_bytes();
            let reply = client
                .echo(EchoRequest {
                    payload: payload.clone().into(),
                    delay_ms: if long { 250 } else { 0 },
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|s| {
                    panic!(
                        "{scheme}: call {calls} after {:?}: {s:?}",
                        started.elapsed()
                    )
                });
            assert_eq!(reply.into_inner().payload, payload);
            calls += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        report(&format!(
            "{scheme}: a client across ~7 connection ages: {calls} of {calls} calls answered"
        ));
        assert!(calls >= 20, "{calls} calls");
    }
}

/// Idle for 300 ms: a connection with a call running for 1.2 s is not closed under it;
/// 300 ms after its last call ends (pings do not count) it is told GOAWAY and closed; a
/// client that comes back after its connection was closed is served on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_busy_ones_are_not() {
    let server = ServerProcess::start(&[("RPC_SERVER_MAX_CONNECTION_IDLE_MS", "300")]);
    let watcher: IpAddr = "127.0.0.2".parse().unwrap();
    let mut raw = raw_call_from(&server, watcher, 1, 1_200).await;
    let (header, payload) = next_frame(&mut raw, Duration::from_secs(10))
        .await
        .expect("the call's answer");
    assert_eq!(
        (header.kind, header.call_id, Code::from_u8(header.status)),
        (FrameKind::Response, 1, Code::Ok),
        "busy, not closed: {header:?}"
    );
    let reply = <examples::echo::EchoReply as prost::Message>::decode(&payload[..]).unwrap();
    assert_eq!(&reply.payload[..], b"raw");
    let ended = Instant::now();
    raw.write_all(&control_frame(FrameKind::Ping, 7))
        .await
        .unwrap();
    let (header, _) = next_frame(&mut raw, Duration::from_secs(10)).await.unwrap();
    assert_eq!(header.kind, FrameKind::Pong);
    let (header, _) = next_frame(&mut raw, Duration::from_secs(10)).await.unwrap();
    let idle = ended.elapsed();
    assert_eq!(header.kind, FrameKind::GoAway, "{header:?}");
    assert!(
        idle >= Duration::from_millis(250) && idle < Duration::from_secs(5),
        "GOAWAY {idle:?} after the call ended"
    );
    raw.write_all(&control_frame(FrameKind::GoAway, 0))
        .await
        .unwrap();
    assert!(next_frame(&mut raw, Duration::from_secs(10))
        .await
        .is_none());
    report(&format!(
        "max_connection_idle 300 ms: not closed under a 1.2 s call; GOAWAY {idle:?} after it ended"
    ));

    // An idle HTTP/2 connection is told GOAWAY and ends.
    let (_h2, connection) = h2_watched(&server, watcher).await;
    let opened = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("the idle HTTP/2 connection ends");
    report(&format!(
        "an idle HTTP/2 connection ended after {:?}: {end:?}",
        opened.elapsed()
    ));

    // A client that pauses longer than the idle limit is served on a new connection.
    for scheme in ["tcp", "grpc"] {
        let client = client(&server, scheme).await;
        for i in 0..3u8 {
            let reply = client
                .echo(EchoRequest {
                    payload: vec![i; 10].into(),
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|s| panic!("{scheme}: call {i} after a pause: {s:?}"));
            assert_eq!(reply.into_inner().payload, vec![i; 10]);
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
    }
}
