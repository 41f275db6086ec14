//! End to end over grpc:// (this framework's gRPC client transport) against the tonic
//! echo server on 127.0.0.1.

mod common;

use std::net::SocketAddr;

use common::*;
use grpc_interop::echo::GrpcEchoServer;
use rdmarpc_load::app;

/// Starts the tonic echo server on 127.0.0.1:0 (1 MiB message limit); returns its URL.
fn start_grpc_server() -> String {
    let server = GrpcEchoServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), SERVER_MAX).unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(std::future::pending()));
    format!("grpc://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_over_grpc_with_payload_and_metadata() {
    let url = start_grpc_server();
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "--payload-size",
            "16384",
            "-m",
            r#"{"x-test": "yes"}"#,
            "-c",
            "8",
            "--connections",
            "2",
            "-n",
            "200",
            "--warmup",
            "20",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.count, 200);
    assert_eq!(report.status_code_distribution.get("OK"), Some(&200));
    assert!(report.error_distribution.is_empty());
    assert_eq!(report.transport, "grpc");
    assert_eq!(report.options.payload_field.as_deref(), Some("payload"));
    assert!(report.rps > 0.0);
}

/// An oversized request mixed in fails on its own; the HTTP/2 connection and the run
/// go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_over_grpc_fails_alone() {
    let url = start_grpc_server();
    let big = "A".repeat(((2 * SERVER_MAX) / 3) * 4); // base64 of 2 MiB
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.json");
    std::fs::write(
        &data,
        format!(r#"[{{}}, {{}}, {{}}, {{"payload": "{big}"}}]"#),
    )
    .unwrap();
    let data_arg = format!("@{}", data.display());
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            &data_arg,
            "-c",
            "2",
            "-n",
            "40",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.count, 40);
    assert_eq!(report.sent, report.ok + report.errors);
    assert_eq!(report.ok, 30);
    assert_eq!(report.errors, 10);
    assert!(report.status_code_distribution.get("OK") == Some(&30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_over_grpc() {
    let url = start_grpc_server();
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"delayMs": 1000}"#,
            "-c",
            "2",
            "-n",
            "2",
            "-t",
            "300ms",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(
        report.status_code_distribution.get("DeadlineExceeded"),
        Some(&2),
        "{:?}",
        report.error_distribution
    );
}
