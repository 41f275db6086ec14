//! `--stream-ping-pong` end to end on 127.0.0.1: this framework's client over tcp:// and
//! grpc://, and tonic's client over grpc://, against servers that catch a request sent
//! before the reply to the one before it (each reply is held back a while, so that a
//! client sending ahead is caught every time), and against the benchmark's own echo
//! servers.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use examples::echo::echo_server::{Echo as RpcEcho, EchoServer};
use examples::echo::{EchoReply, EchoRequest, RepeatRequest};
use examples::EchoService;
use futures_util::{Stream, StreamExt};
use grpc_interop::echo::proto::echo_server::{Echo as TonicEcho, EchoServer as TonicEchoServer};
use grpc_interop::echo::{proto as tonic_echo, GrpcEcho, GrpcEchoServer};
use rdmarpc_core::{BoxStream, Request, Response, Server, Status, Streaming};
use rdmarpc_load::app;
use rdmarpc_load::report::Report;
use rdmarpc_transport_tcp::{TcpConfig, TcpListener};

/// How long the strict servers hold each reply back.
const REPLY_DELAY: Duration = Duration::from_millis(5);

/// Replies to each request of `requests` in order, [`REPLY_DELAY`] after taking it,
/// while a task of its own takes the requests as they come; counts into `early` every
/// request that came while the reply to the one before was still unsent.
fn strict_replies<Req, Rep, E>(
    requests: impl Stream<Item = Result<Req, E>> + Send + 'static,
    reply: fn(Req) -> Rep,
    early: Arc<AtomicU64>,
) -> impl Stream<Item = Result<Rep, E>> + Send + 'static
where
    Req: Send + 'static,
    Rep: Send + 'static,
    E: Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Req, E>>();
    let replied = Arc::new(AtomicU64::new(0));
    let seen = replied.clone();
    tokio::spawn(async move {
        let mut requests = std::pin::pin!(requests);
        let mut came = 0u64;
        while let Some(item) = requests.next().await {
            if item.is_ok() {
                came += 1;
                if seen.load(Ordering::SeqCst) + 1 < came {
                    early.fetch_add(1, Ordering::SeqCst);
                }
            }
            if tx.send(item).is_err() {
                break;
            }
        }
    });
    futures_util::stream::unfold((rx, replied), move |(mut rx, replied)| async move {
        let item = rx.recv().await?;
        tokio::time::sleep(REPLY_DELAY).await;
        // Counted before it is handed on: the client cannot have it any earlier.
        replied.fetch_add(1, Ordering::SeqCst);
        Some((item.map(reply), (rx, replied)))
    })
}

/// This framework's echo service with the strict `Chat`.
#[derive(Clone, Default)]
struct Strict {
    early: Arc<AtomicU64>,
}

impl RpcEcho for Strict {
    type RepeatStream = BoxStream<EchoReply>;
    type ChatStream = BoxStream<EchoReply>;

    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        EchoService.echo(request).await
    }

    async fn repeat(
        &self,
        request: Request<RepeatRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        EchoService.repeat(request).await
    }

    async fn chat(
        &self,
        request: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        let reply = |r: EchoRequest| EchoReply { payload: r.payload };
        let replies = strict_replies(request.into_inner(), reply, self.early.clone());
        Ok(Response::new(Box::pin(replies)))
    }
}

/// tonic's echo service with the strict `Chat`.
#[derive(Clone, Default)]
struct StrictTonic {
    early: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TonicEcho for StrictTonic {
    type RepeatStream = grpc_interop::echo::RepeatStream;
    type ChatStream = grpc_interop::echo::RepeatStream;

    async fn echo(
        &self,
        request: tonic::Request<tonic_echo::EchoRequest>,
    ) -> Result<tonic::Response<tonic_echo::EchoReply>, tonic::Status> {
        GrpcEcho.echo(request).await
    }

    async fn repeat(
        &self,
        request: tonic::Request<tonic_echo::RepeatRequest>,
    ) -> Result<tonic::Response<Self::RepeatStream>, tonic::Status> {
        GrpcEcho.repeat(request).await
    }

    async fn chat(
        &self,
        request: tonic::Request<tonic::Streaming<tonic_echo::EchoRequest>>,
    ) -> Result<tonic::Response<Self::ChatStream>, tonic::Status> {
        let reply = |r: tonic_echo::EchoRequest| tonic_echo::EchoReply { payload: r.payload };
        let replies = strict_replies(request.into_inner(), reply, self.early.clone());
        Ok(tonic::Response::new(Box::pin(replies)))
    }
}

/// The strict service over tcp:// on 127.0.0.1:0: its URL and its count of early requests.
async fn start_strict_rpc() -> (String, Arc<AtomicU64>) {
    let service = Strict::default();
    let early = service.early.clone();
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_socket_addr().unwrap();
    let server = Server::builder()
        .add_service(EchoServer::new(service))
        .unwrap()
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    (format!("tcp://{addr}"), early)
}

/// The strict service served by tonic on 127.0.0.1:0: its URL and its count of early
/// requests.
fn start_strict_tonic() -> (String, Arc<AtomicU64>) {
    let service = StrictTonic::default();
    let early = service.early.clone();
    let incoming =
        tonic::transport::server::TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .unwrap()
            .with_nodelay(Some(true));
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TonicEchoServer::new(service))
            .serve_with_incoming(incoming),
    );
    (format!("grpc://{addr}"), early)
}

/// `rpc-load --call echo.Echo/Chat` with 20 messages a call, 4 calls on 2 workers, and
/// `extra` flags, against `url`.
async fn chat(url: &str, extra: &[&str]) -> Report {
    let mut rest = vec![
        "--call",
        "echo.Echo/Chat",
        "-d",
        r#"{"payload": "cGluZw=="}"#,
        "--stream-call-count",
        "20",
        "-c",
        "2",
        "-n",
        "4",
    ];
    rest.extend_from_slice(extra);
    rest.push(url);
    app::run(&args("echo.proto", &rest)).await.unwrap()
}

/// Every call OK, and its messages counted both ways.
fn all_ok(report: &Report, messages: u64, what: &str) {
    assert_eq!(
        report.status_code_distribution.get("OK"),
        Some(&report.count),
        "{what}: {:?}",
        report.error_distribution
    );
    let moved = report.stream_messages.as_ref().expect("stream messages");
    assert_eq!((moved.sent, moved.received), (messages, messages), "{what}");
}

/// With `--stream-ping-pong` no request reaches the server before the reply to the one
/// before it was sent, on each client; without it the same servers catch the requests
/// sent ahead (the check works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_sends_each_message_after_the_reply_to_the_one_before() {
    let (rpc_url, rpc_early) = start_strict_rpc().await;
    let (tonic_url, tonic_early) = start_strict_tonic();
    let cases = [
        ("tcp://", &rpc_url, &rpc_early, "rpc"),
        (
            "grpc://, this framework's client",
            &tonic_url,
            &tonic_early,
            "rpc",
        ),
        ("grpc://, tonic's client", &tonic_url, &tonic_early, "tonic"),
    ];
    for (what, url, early, client) in cases {
        early.store(0, Ordering::SeqCst);
        let flags = ["--grpc-client", client, "--stream-ping-pong"];
        let report = chat(url, &flags).await;
        all_ok(&report, 80, what);
        assert_eq!(
            early.load(Ordering::SeqCst),
            0,
            "{what}: requests sent ahead"
        );
        assert!(report.options.stream_ping_pong, "{what}: in the report");

        let report = chat(url, &["--grpc-client", client]).await;
        all_ok(&report, 80, what);
        assert!(
            early.load(Ordering::SeqCst) > 0,
            "{what}: without ping-pong the requests go ahead, and the server sees it"
        );
    }
}

/// Against the benchmark's servers (the examples' echo over tcp://, tonic's
/// `grpc-echo-server` over grpc://): ping-pong by count and by duration, each round trip
/// one message each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_against_the_benchmark_servers_by_count_and_duration() {
    let tcp = start_rpc_server().await;
    let server = GrpcEchoServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), SERVER_MAX).unwrap();
    let grpc = format!("grpc://{}", server.local_addr().unwrap());
    tokio::spawn(server.serve(std::future::pending()));
    for (url, client) in [(&tcp, "rpc"), (&grpc, "rpc"), (&grpc, "tonic")] {
        let what = format!("{url} ({client})");
        let report = chat(
            url,
            &[
                "--grpc-client",
                client,
                "--stream-ping-pong",
                "--payload-size",
                "64",
            ],
        )
        .await;
        all_ok(&report, 80, &what);
        let rest = [
            "--call",
            "echo.Echo/Chat",
            "--payload-size",
            "64",
            "--stream-ping-pong",
            "--stream-call-duration",
            "200ms",
            "-c",
            "1",
            "-n",
            "2",
            "--grpc-client",
            client,
            url,
        ];
        let report = app::run(&args("echo.proto", &rest)).await.unwrap();
        let moved = report.stream_messages.as_ref().expect("stream messages");
        assert_eq!(
            report.status_code_distribution.get("OK"),
            Some(&2),
            "{what}"
        );
        assert_eq!(moved.sent, moved.received, "{what}: a reply per request");
        assert!(
            moved.received > 2,
            "{what}: round trips for 200 ms: {}",
            moved.received
        );
    }
}

/// `--stream-ping-pong` with a method that is not bidirectional is refused, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_takes_bidirectional_methods_only() {
    let url = start_rpc_server().await;
    for (file, call, kind) in [
        ("echo.proto", "echo.Echo/Echo", "unary"),
        ("echo.proto", "echo.Echo/Repeat", "server-streaming"),
        (
            "grpc/testing/test.proto",
            "grpc.testing.TestService/StreamingInputCall",
            "client-streaming",
        ),
    ] {
        let rest = ["--call", call, "--stream-ping-pong", "-n", "1", &url];
        let error = format!("{:#}", app::run(&args(file, &rest)).await.unwrap_err());
        assert!(
            error.contains("--stream-ping-pong takes a bidirectional streaming method")
                && error.contains(kind),
            "{call}: {error}"
        );
    }
}
