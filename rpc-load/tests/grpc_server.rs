//! This framework's server answering standard gRPC clients (rpc-load's grpc:// path is
//! tonic's client) on the same port as its own TCP clients: unary calls with metadata,
//! server, client and bidirectional streams, deadlines, unknown methods.

mod common;

use common::*;
use examples::echo::echo_server::EchoServer;
use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::interop::InteropService;
use examples::EchoService;
use rpc_core::{Endpoint, Server, ServerConfig};
use rpc_load::app;
use rpc_transport_rdma::{AnyListener, TransportSettings};

/// The echo and interop services on one port of 127.0.0.1 (`AnyListener`: this
/// framework's TCP frames, RDMA handshakes and HTTP/2 told apart by their first bytes).
async fn start_one_port_server() -> u16 {
    let mut settings = TransportSettings::default();
    settings.max_message_size(SERVER_MAX);
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &settings).await.unwrap();
    let port = listener.port();
    let mut config = ServerConfig::default();
    config.max_message_size(SERVER_MAX);
    let server = Server::builder()
        .add_service(EchoServer::new(EchoService))
        .unwrap()
        .add_service(TestServiceServer::new(InteropService::default()))
        .unwrap()
        .config(config)
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    port
}

fn ok(report: &rpc_load::report::Report) -> u64 {
    report
        .status_code_distribution
        .get("OK")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_tcp_clients_call_the_same_port_at_once() {
    let port = start_one_port_server().await;
    let load = |scheme: &str| {
        args(
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
                "400",
                &format!("{scheme}://127.0.0.1:{port}"),
            ],
        )
    };
    let (grpc_args, tcp_args) = (load("grpc"), load("tcp"));
    let (grpc, tcp) = tokio::join!(app::run(&grpc_args), app::run(&tcp_args));
    let (grpc, tcp) = (grpc.unwrap(), tcp.unwrap());
    assert_eq!((grpc.transport.as_str(), ok(&grpc)), ("grpc", 400));
    assert_eq!((tcp.transport.as_str(), ok(&tcp)), ("tcp", 400));
    assert!(grpc.error_distribution.is_empty() && tcp.error_distribution.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_every_kind_over_grpc() {
    let port = start_one_port_server().await;
    let url = format!("grpc://127.0.0.1:{port}");
    // Server streaming: 3 streams of 20,000 messages, flow-controlled both ways.
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Repeat",
            "-d",
            r#"{"payload": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "count": 20000}"#,
            "-c",
            "1",
            "-n",
            "3",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(ok(&report), 3, "{:?}", report.error_distribution);
    assert_eq!(report.stream_messages.as_ref().unwrap().received, 60_000);
    // Client streaming: three requests, their sizes summed by the interop service.
    let report = app::run(&args(
        "grpc/testing/test.proto",
        &[
            "--call",
            "grpc.testing.TestService/StreamingInputCall",
            "-d",
            r#"[{"payload": {"body": "AAAA"}}, {"payload": {"body": "AAAAAAAA"}}, {"payload": {"body": ""}}]"#,
            "-c",
            "2",
            "-n",
            "10",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(ok(&report), 10, "{:?}", report.error_distribution);
    assert_eq!(report.stream_messages.as_ref().unwrap().sent, 30);
    // Bidirectional: each request asks for one response of 10 bytes.
    let report = app::run(&args(
        "grpc/testing/test.proto",
        &[
            "--call",
            "grpc.testing.TestService/FullDuplexCall",
            "-d",
            r#"[{"response_parameters": [{"size": 10}]}, {"response_parameters": [{"size": 20}]}]"#,
            "-c",
            "2",
            "-n",
            "10",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(ok(&report), 10, "{:?}", report.error_distribution);
    let moved = report.stream_messages.as_ref().unwrap();
    assert_eq!((moved.sent, moved.received), (20, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_and_unknown_methods_over_grpc() {
    let port = start_one_port_server().await;
    let url = format!("grpc://127.0.0.1:{port}");
    // grpc-timeout reaches the server, which ends the call at its deadline.
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"payload": "aGVsbG8=", "delay_ms": 2000}"#,
            "-t",
            "100ms",
            "-c",
            "2",
            "-n",
            "4",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(
        report.status_code_distribution.get("DeadlineExceeded"),
        Some(&4),
        "{:?}",
        report.status_code_distribution
    );
    // A service the server does not serve.
    let report = app::run(&args(
        "grpc/testing/test.proto",
        &[
            "--call",
            "grpc.testing.UnimplementedService/UnimplementedCall",
            "-d",
            "{}",
            "-n",
            "3",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(
        report.status_code_distribution.get("Unimplemented"),
        Some(&3),
        "{:?}",
        report.status_code_distribution
    );
}
