//! This framework's server answering standard gRPC clients (rpc-load's grpc:// path with
//! `--grpc-client tonic` is tonic's client) on the same port as its own TCP clients: unary calls with metadata,
//! server, client and bidirectional streams, deadlines, unknown methods.

mod common;

use common::*;
use examples::echo::echo_server::EchoServer;
use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::interop::InteropService;
use examples::EchoService;
use rdmarpc_core::{Endpoint, Server, ServerConfig};
use rdmarpc_load::app;
use rdmarpc_transport::{AnyListener, TransportSettings};

/// [`args`] with tonic's client behind grpc:// addresses.
fn tonic_args(file: &str, rest: &[&str]) -> rdmarpc_load::cli::Args {
    let mut rest = rest.to_vec();
    rest.extend(["--grpc-client", "tonic"]);
    args(file, &rest)
}

/// The echo and interop services on one port of 127.0.0.1 (`AnyListener`: this
/// framework's TCP frames, RDMA handshakes and HTTP/2 told apart by their first bytes),
/// with `settings` adjusted by `tune`; shut down gracefully when `stop` resolves.
/// Returns the port and the serving task.
async fn start_server(
    tune: impl FnOnce(&mut TransportSettings),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> (u16, tokio::task::JoinHandle<()>) {
    start_server_telling(tune, stop, None).await
}

/// [`start_server`], notifying `started` (when given) as each call reaches the services.
async fn start_server_telling(
    tune: impl FnOnce(&mut TransportSettings),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    started: Option<std::sync::Arc<tokio::sync::Notify>>,
) -> (u16, tokio::task::JoinHandle<()>) {
    let mut settings = TransportSettings::default();
    settings.max_message_size(SERVER_MAX);
    tune(&mut settings);
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &settings).await.unwrap();
    let port = listener.port();
    let mut config = ServerConfig::default();
    config.max_message_size(SERVER_MAX);
    let mut builder = Server::builder();
    if let Some(started) = started {
        builder = builder.layer(tower::util::MapRequestLayer::new(
            move |request: rdmarpc_core::Request<rdmarpc_core::layer::ServerCall>| {
                started.notify_one();
                request
            },
        ));
    }
    let server = builder
        .add_service(EchoServer::new(EchoService))
        .unwrap()
        .add_service(TestServiceServer::new(InteropService::default()))
        .unwrap()
        .config(config)
        .build();
    let task = tokio::spawn(async move {
        let _ = server.serve_with_shutdown(listener, stop).await;
    });
    (port, task)
}

/// [`start_server`] with the default settings, serving until the test ends.
async fn start_one_port_server() -> u16 {
    start_server(|_| {}, std::future::pending()).await.0
}

fn ok(report: &rdmarpc_load::report::Report) -> u64 {
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
        tonic_args(
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
    let report = app::run(&tonic_args(
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
    let report = app::run(&tonic_args(
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
    let report = app::run(&tonic_args(
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
    let report = app::run(&tonic_args(
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
    let report = app::run(&tonic_args(
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

/// A client-streaming message larger than the HTTP/2 window of its stream is read whole
/// (the body is not paused inside a message); a graceful shutdown lets a long server
/// stream over gRPC finish, its last messages and trailers flushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_stream_messages_and_a_graceful_shutdown_over_grpc() {
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    // HTTP/2 windows of 64 KiB for requests.
    let (port, task) = start_server_telling(
        |settings| settings.grpc.stream_window = 64 * 1024,
        async {
            let _ = stopped.await;
        },
        Some(started.clone()),
    )
    .await;
    let url = format!("grpc://127.0.0.1:{port}");
    // 600 KB messages (800,000 base64 characters) on a stream with a 64 KiB window.
    let body = "A".repeat(800_000);
    let data =
        format!(r#"[{{"payload": {{"body": "{body}"}}}}, {{"payload": {{"body": "{body}"}}}}]"#);
    let report = app::run(&tonic_args(
        "grpc/testing/test.proto",
        &[
            "--call",
            "grpc.testing.TestService/StreamingInputCall",
            "-d",
            &data,
            "-n",
            "3",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(ok(&report), 3, "{:?}", report.error_distribution);
    // A server stream of 1,000,000 messages; the server shuts down 100 ms into it.
    let load = tonic_args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Repeat",
            "-d",
            r#"{"payload": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "count": 1000000}"#,
            "-n",
            "1",
            "-t",
            "60s",
            &url,
        ],
    );
    // The permit left by the three calls above is taken first: wait for the stream's own.
    started.notified().await;
    let run = tokio::spawn(async move { app::run(&load).await });
    // Shut down once the stream runs (100 ms into it), not at a fixed time after the
    // client starts: a loaded host may take longer than that to connect.
    started.notified().await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let report = run.await.unwrap().unwrap();
    assert_eq!(ok(&report), 1, "{:?}", report.error_distribution);
    assert_eq!(report.stream_messages.as_ref().unwrap().received, 1_000_000);
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("the server finished its shutdown")
        .unwrap();
}

/// A bidirectional call whose handler is blocked (its responses are never read) and whose
/// client sends empty messages as fast as HTTP/2 lets it: the server stops reading once a
/// window's worth of them waits (each counts as the frame it becomes, not as its 0 bytes),
/// so HTTP/2 flow control holds the client back. Counting empty messages as nothing let
/// one call queue millions of them (found by review: ~245 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_empty_messages_to_a_blocked_handler_is_held_back() {
    use examples::grpc_testing::{ResponseParameters, StreamingOutputCallRequest};
    use prost::Message;

    let port = start_one_port_server().await;
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = http::Request::builder()
        .method("POST")
        .uri("http://localhost/grpc.testing.TestService/FullDuplexCall")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut client = client.ready().await.unwrap();
    let (_response, mut body) = client.send_request(request, false).unwrap();
    // The first message asks for 64 responses of 256 KiB, which nobody reads.
    let first = StreamingOutputCallRequest {
        response_parameters: vec![
            ResponseParameters {
                size: 256 << 10,
                ..Default::default()
            };
            64
        ],
        ..Default::default()
    }
    .encode_to_vec();
    let mut prefixed = vec![0];
    prefixed.extend_from_slice(&(first.len() as u32).to_be_bytes());
    prefixed.extend_from_slice(&first);
    body.send_data(prefixed.into(), false).unwrap();
    // Then empty messages (5-byte prefixes), 64 KiB at a time, for 3 s.
    let chunk = bytes::Bytes::from(vec![0u8; 5 * 13_107]);
    let mut accepted = 0usize;
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        body.reserve_capacity(chunk.len());
        let capacity =
            tokio::time::timeout_at(until, std::future::poll_fn(|cx| body.poll_capacity(cx))).await;
        let Ok(Some(Ok(n))) = capacity else {
            break;
        };
        if n < chunk.len() {
            continue;
        }
        body.send_data(chunk.clone(), false).unwrap();
        accepted += chunk.len();
    }
    eprintln!(
        "empty-message flood: {accepted} bytes ({} messages) accepted in 3 s",
        accepted / 5
    );
    // A window of frames (1 MiB / 40 bytes each = 26k messages, 131 KB of prefixes) plus
    // HTTP/2's windows (1 MiB stream, 16 MiB connection): well under 20 MB.
    assert!(
        accepted < 20 << 20,
        "{accepted} bytes of empty messages accepted"
    );
}

/// One unary echo over raw HTTP/2 with `encoding` on the request (`grpc-encoding`) and
/// `accept` as `grpc-accept-encoding`; returns the response's `grpc-encoding`, the
/// first message's flag byte, the reply's payload, and `grpc-status`.
async fn raw_echo(
    port: u16,
    body: bytes::Bytes,
    encoding: Option<&str>,
    accept: &str,
) -> (Option<String>, Option<u8>, Vec<u8>, String) {
    use prost::Message;
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = http::Request::builder()
        .method("POST")
        .uri("http://localhost/echo.Echo/Echo")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-accept-encoding", accept);
    if let Some(encoding) = encoding {
        request = request.header("grpc-encoding", encoding);
    }
    let mut client = client.ready().await.unwrap();
    let (response, mut send) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    send.send_data(body, true).unwrap();
    let response = response.await.unwrap();
    let header = |headers: &http::HeaderMap, name: &str| {
        headers.get(name).map(|v| v.to_str().unwrap().to_owned())
    };
    let encoding = header(response.headers(), "grpc-encoding");
    if let Some(status) = header(response.headers(), "grpc-status") {
        return (encoding, None, Vec::new(), status);
    }
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let status = header(&body.trailers().await.unwrap().unwrap(), "grpc-status").unwrap();
    let flag = bytes.first().copied();
    let payload = match (flag, encoding.as_deref()) {
        (Some(1), Some("gzip")) => {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[5..]), &mut out)
                .unwrap();
            out
        }
        (Some(1), Some("zstd")) => zstd::decode_all(&bytes[5..]).unwrap(),
        (Some(_), _) => bytes[5..].to_vec(),
        (None, _) => Vec::new(),
    };
    let reply = examples::echo::EchoReply::decode(&payload[..]).unwrap_or_default();
    (encoding, flag, reply.payload.to_vec(), status)
}

fn prefixed(flag: u8, message: &[u8]) -> bytes::Bytes {
    let mut out = vec![flag];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// Compression with a raw HTTP/2 client: gzip and zstd requests are read; responses are
/// compressed as configured only for clients that accept it; an unknown encoding is
/// UNIMPLEMENTED; a 64 MiB bomb in a few KiB is RESOURCE_EXHAUSTED at the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_messages_both_ways_and_bombs_stop_at_the_limit() {
    use prost::Message;
    let (port, _task) = start_server(
        |s| s.grpc.send_compression = Some(rdmarpc_grpc::Encoding::Zstd),
        std::future::pending(),
    )
    .await;
    let payload: Vec<u8> = (0..20_000u32).map(|i| (i % 13) as u8).collect();
    let request = examples::echo::EchoRequest {
        payload: payload.clone().into(),
        ..Default::default()
    }
    .encode_to_vec();
    let gzip = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut e, &request).unwrap();
        e.finish().unwrap()
    };
    // gzip request, client reads zstd: a zstd response.
    let (encoding, flag, echoed, status) =
        raw_echo(port, prefixed(1, &gzip), Some("gzip"), "identity,zstd").await;
    assert_eq!(
        (encoding.as_deref(), flag, status.as_str()),
        (Some("zstd"), Some(1), "0")
    );
    assert_eq!(echoed, payload);
    // zstd request, client reads only identity: an uncompressed response.
    let zstd = zstd::encode_all(&request[..], 3).unwrap();
    let (encoding, flag, echoed, status) =
        raw_echo(port, prefixed(1, &zstd), Some("zstd"), "identity").await;
    assert_eq!((encoding, flag, status.as_str()), (None, Some(0), "0"));
    assert_eq!(echoed, payload);
    // An encoding the server does not read.
    let (_, _, _, status) = raw_echo(port, prefixed(1, &gzip), Some("snappy"), "identity").await;
    assert_eq!(status, "12", "UNIMPLEMENTED");
    // A message that inflates to 64 MiB, past the server's limit.
    let bomb = {
        let huge = examples::echo::EchoRequest {
            payload: vec![0u8; 64 << 20].into(),
            ..Default::default()
        }
        .encode_to_vec();
        zstd::encode_all(&huge[..], 3).unwrap()
    };
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    let started = std::time::Instant::now();
    let (_, _, _, status) = raw_echo(port, prefixed(1, &bomb), Some("zstd"), "identity").await;
    assert_eq!(status, "8", "RESOURCE_EXHAUSTED");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
