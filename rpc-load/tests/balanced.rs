//! Balanced targets: a list of this framework's endpoints (its balanced channel, both
//! strategies) and, for comparison, tonic's balanced channel over the same servers'
//! gRPC side.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use examples::echo::echo_server::EchoServer;
use examples::EchoService;
use rdmarpc_core::{Endpoint, Server};
use rdmarpc_load::app;
use rdmarpc_transport::{AnyListener, TransportSettings};

/// An echo server on 127.0.0.1 that takes tcp:// and gRPC clients on one port and counts
/// the echo calls it serves. Returns `HOST:PORT` and the count.
async fn counted_server() -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let echo = EchoServer::with_interceptor(EchoService, move |request| {
        counted.fetch_add(1, Ordering::Relaxed);
        Ok(request)
    });
    let server = Server::builder().add_service(echo).unwrap().build();
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let addr = format!("127.0.0.1:{}", listener.port());
    tokio::spawn(async move { server.serve(listener).await });
    (addr, calls)
}

async fn three() -> (Vec<String>, Vec<Arc<AtomicUsize>>) {
    let mut addrs = Vec::new();
    let mut counts = Vec::new();
    for _ in 0..3 {
        let (addr, calls) = counted_server().await;
        addrs.push(addr);
        counts.push(calls);
    }
    (addrs, counts)
}

fn loads(counts: &[Arc<AtomicUsize>]) -> Vec<usize> {
    counts.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_endpoints_round_robin_and_p2c() {
    let (addrs, counts) = three().await;
    let target = format!("tcp://{}", addrs.join(","));
    // Round robin, one worker: every server its third.
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"payload": "aGVsbG8="}"#,
            "-c",
            "1",
            "-n",
            "300",
            "--lb-strategy",
            "round-robin",
            &target,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.ok, 300, "{:?}", report.error_distribution);
    assert_eq!(
        report.transport,
        "tcp, balanced over 3 endpoints (round_robin)"
    );
    // The first calls may come before every endpoint is connected (they go to those that
    // are): each server gets its third, give or take those.
    let first = loads(&counts);
    assert_eq!(first.iter().sum::<usize>(), 300);
    assert!(first.iter().all(|&n| (80..=120).contains(&n)), "{first:?}");

    // Power of two choices, 16 workers: spread over all three.
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"payload": "aGVsbG8="}"#,
            "-c",
            "16",
            "-n",
            "3000",
            &target,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.ok, 3000, "{:?}", report.error_distribution);
    assert_eq!(report.transport, "tcp, balanced over 3 endpoints (p2c)");
    let spread: Vec<usize> = loads(&counts)
        .iter()
        .zip(&first)
        .map(|(now, before)| now - before)
        .collect();
    assert!(spread.iter().all(|&n| n >= 500), "{spread:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_balanced_channel_over_the_same_servers() {
    let (addrs, counts) = three().await;
    let target = format!("grpc://{}", addrs.join(","));
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"payload": "aGVsbG8="}"#,
            "-c",
            "16",
            "-n",
            "3000",
            "--grpc-client",
            "tonic",
            &target,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.ok, 3000, "{:?}", report.error_distribution);
    assert_eq!(
        report.transport,
        "grpc, tonic's balanced channel over 3 endpoints (p2c)"
    );
    let spread = loads(&counts);
    assert!(spread.iter().all(|&n| n >= 300), "{spread:?}");
}
