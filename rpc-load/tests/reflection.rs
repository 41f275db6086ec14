//! Descriptors without `--proto`: from the server's reflection service, over this
//! framework's transports and gRPC (its own server, and tonic's with tonic-reflection,
//! v1 and v1alpha), or from `--protoset`; and what a hostile reflection server cannot do
//! (answer never, answer garbage, answer without end, answer too much, answer without
//! the file asked for, name too many imports, answer slowly).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::proto_dir;
use futures_util::StreamExt;
use prost::Message as _;
use rdmarpc_core::{BoxStream, Request, Response, ServerConfig, Status, Streaming};
use rdmarpc_load::app;
use rdmarpc_load::cli::Args;
use rdmarpc_reflection::pb::v1::server_reflection_request::MessageRequest;
use rdmarpc_reflection::pb::v1::server_reflection_response::MessageResponse;
use rdmarpc_reflection::pb::v1::server_reflection_server::{
    ServerReflection, ServerReflectionServer,
};
use rdmarpc_reflection::pb::v1::{
    FileDescriptorResponse, ServerReflectionRequest, ServerReflectionResponse,
};
use rdmarpc_transport::{AnyListener, TransportSettings};

async fn serve(server: rdmarpc_core::Server) -> u16 {
    // Room for a hostile server's oversized answers.
    let mut settings = TransportSettings::default();
    settings.max_message_size(64 << 20);
    let listener = AnyListener::bind(&"tcp://127.0.0.1:0".parse().unwrap(), &settings)
        .await
        .unwrap();
    let port = listener.port();
    tokio::spawn(async move { server.serve(listener).await });
    port
}

async fn run(argv: &[&str]) -> anyhow::Result<rdmarpc_load::report::Report> {
    let mut all = vec!["rpc-load"];
    all.extend_from_slice(argv);
    app::run(&Args::from_argv(all)?).await
}

/// The examples' reflection service, recording each request's `authorization`.
#[derive(Clone)]
struct Recording {
    inner: rdmarpc_reflection::ReflectionService,
    seen: Arc<parking_lot::Mutex<Vec<Option<String>>>>,
}

impl ServerReflection for Recording {
    type ServerReflectionInfoStream =
        <rdmarpc_reflection::ReflectionService as ServerReflection>::ServerReflectionInfoStream;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<ServerReflectionRequest>>,
    ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
        let token = request.metadata().get("authorization").map(str::to_owned);
        self.seen.lock().push(token);
        self.inner.server_reflection_info(request).await
    }
}

/// --reflect-metadata reaches the reflection service on every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflect_metadata_goes_on_every_reflection_request() {
    use examples::helloworld::greeter_server::GreeterServer;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let recording = Recording {
        inner: examples::transport::reflection(&["helloworld.Greeter"]).unwrap(),
        seen: seen.clone(),
    };
    let server = rdmarpc_core::Server::builder()
        .add_service(GreeterServer::new(examples::ghz::GreeterService))
        .unwrap()
        .add_service(ServerReflectionServer::new(recording))
        .unwrap()
        .build();
    let host = format!("127.0.0.1:{}", serve(server).await);
    for target in [host.clone(), format!("tcp://{host}")] {
        seen.lock().clear();
        let report = run(&[
            "--insecure",
            "--call",
            "helloworld.Greeter.SayHello",
            "--reflect-metadata",
            r#"{"authorization":"token"}"#,
            "-n",
            "2",
            &target,
        ])
        .await
        .unwrap();
        assert_eq!(report.errors, 0, "{target}");
        let seen = seen.lock().clone();
        assert!(!seen.is_empty(), "{target}: no reflection request");
        assert!(
            seen.iter().all(|t| t.as_deref() == Some("token")),
            "{target}: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_over_grpc_and_this_frameworks_transport() {
    let (server, _reporter) = examples::ghz::ghz_server(ServerConfig::default()).unwrap();
    let port = serve(server).await;
    let host = format!("127.0.0.1:{port}");
    let tcp = format!("tcp://{host}");
    for target in [host.as_str(), tcp.as_str()] {
        let report = run(&[
            "--insecure",
            "--call",
            "helloworld.Greeter.SayHello",
            "-d",
            r#"{"name":"Joe"}"#,
            "--reflect-metadata",
            r#"{"authorization":"token"}"#,
            "-n",
            "20",
            "-c",
            "2",
            target,
        ])
        .await
        .unwrap();
        assert_eq!((report.count, report.errors), (20, 0), "{target}");
    }
    // A well-known type's method: its import comes with the answer or is known.
    let report = run(&[
        "--insecure",
        "--call",
        "wrapped.WrappedService.GetMessage",
        "-d",
        r#""asdf""#,
        "-n",
        "5",
        &host,
    ])
    .await
    .unwrap();
    assert_eq!(report.errors, 0);
    let e = run(&["--insecure", "--call", "nope.Nope/Call", &host])
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("nope.Nope"), "{e:#}");
}

/// tonic's echo server with tonic-reflection (v1, or v1alpha only) on 127.0.0.1:0.
fn start_tonic(v1: bool) -> String {
    let set = protox::compile([proto_dir().join("echo.proto")], [proto_dir()]).unwrap();
    let builder = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(Box::leak(set.encode_to_vec().into_boxed_slice()));
    let incoming =
        tonic::transport::server::TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = incoming.local_addr().unwrap();
    let echo =
        grpc_interop::echo::proto::echo_server::EchoServer::new(grpc_interop::echo::GrpcEcho);
    let router = tonic::transport::Server::builder().add_service(echo);
    let router = if v1 {
        router.add_service(builder.build_v1().unwrap())
    } else {
        router.add_service(builder.build_v1alpha().unwrap())
    };
    tokio::spawn(router.serve_with_incoming(incoming));
    addr.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_from_tonics_server_v1_and_v1alpha() {
    for v1 in [true, false] {
        let host = start_tonic(v1);
        let report = run(&[
            "--insecure",
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"payload":"aGk="}"#,
            "-n",
            "10",
            &host,
        ])
        .await
        .unwrap();
        assert_eq!((report.count, report.errors), (10, 0), "v1: {v1}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protoset_instead_of_proto() {
    let host = start_tonic(true);
    let dir = tempfile::tempdir().unwrap();
    let set = protox::compile([proto_dir().join("echo.proto")], [proto_dir()]).unwrap();
    let protoset = dir.path().join("bundle.protoset");
    std::fs::write(&protoset, set.encode_to_vec()).unwrap();
    let protoset = protoset.display().to_string();
    let report = run(&[
        "--insecure",
        "--protoset",
        &protoset,
        "--call",
        "echo.Echo.Echo",
        "-n",
        "10",
        &host,
    ])
    .await
    .unwrap();
    assert_eq!(report.errors, 0);
    let garbage = dir.path().join("garbage.protoset");
    std::fs::write(&garbage, b"\xff\xfe not a descriptor set").unwrap();
    let garbage = garbage.display().to_string();
    let e = run(&[
        "--insecure",
        "--protoset",
        &garbage,
        "--call",
        "echo.Echo.Echo",
        &host,
    ])
    .await
    .unwrap_err();
    assert!(format!("{e:#}").contains("not a valid protoset"), "{e:#}");
    let e = run(&[
        "--insecure",
        "--protoset",
        "/nonexistent.protoset",
        "--call",
        "echo.Echo.Echo",
        &host,
    ])
    .await
    .unwrap_err();
    assert!(format!("{e:#}").contains("cannot read"), "{e:#}");
}

/// How the hostile reflection server answers.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// Never.
    Silent,
    /// With bytes that are no file descriptor.
    Garbage,
    /// With a file importing a file importing a file ..., each asked for in turn.
    Endless,
    /// With files of 1 MiB, each importing another.
    Huge,
    /// With a file importing 1000 files, then with no file for each of them.
    Empty,
    /// With a file importing 100,000 files, then with each file asked for.
    Crowded,
    /// As `Endless`, each answer 300 ms late.
    Slow,
    /// With a million empty files in one answer (2 MB, that decode into 32 MB of
    /// entries; 64 MiB of them would be a GiB), all with the same name, "".
    Nameless,
    /// With one file without a name.
    Unnamed,
    /// With one file of 20 MiB, past the reflection channel's 16 MiB.
    Oversized,
}

fn file(n: u64, padding: usize) -> Bytes {
    file_importing(n, padding, vec![format!("f{}.proto", n + 1)])
}

fn file_importing(n: u64, padding: usize, dependency: Vec<String>) -> Bytes {
    prost_types::FileDescriptorProto {
        name: Some(format!("f{n}.proto")),
        package: Some("p".repeat(padding.max(1))),
        dependency,
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// The first file of `Empty` and `Crowded`: f0.proto importing f1.proto ... f`n`.proto.
fn file_importing_many(n: u64) -> Bytes {
    file_importing(0, 1, (1..=n).map(|i| format!("f{i}.proto")).collect())
}

impl Hostile {
    fn answer(self, request: ServerReflectionRequest) -> ServerReflectionResponse {
        let n = match request.message_request {
            Some(MessageRequest::FileByFilename(name)) => name
                .trim_start_matches('f')
                .trim_end_matches(".proto")
                .parse()
                .unwrap_or(0),
            _ => 0,
        };
        let files = match self {
            Hostile::Garbage => vec![Bytes::from_static(b"\xff\xff\xff\xff")],
            Hostile::Endless | Hostile::Slow => vec![file(n, 1)],
            Hostile::Huge => vec![file(n, 1 << 20)],
            Hostile::Silent => Vec::new(),
            Hostile::Empty if n == 0 => vec![file_importing_many(1000)],
            Hostile::Empty => Vec::new(),
            Hostile::Crowded if n == 0 => vec![file_importing_many(100_000)],
            Hostile::Crowded => vec![file_importing(n, 1, Vec::new())],
            Hostile::Nameless => vec![Bytes::new(); 1_000_000],
            Hostile::Unnamed => vec![Bytes::new()],
            Hostile::Oversized => vec![file_importing(0, 20 << 20, Vec::new())],
        };
        ServerReflectionResponse {
            message_response: Some(MessageResponse::FileDescriptorResponse(
                FileDescriptorResponse {
                    file_descriptor_proto: files,
                },
            )),
            ..Default::default()
        }
    }
}

/// A hostile reflection service, counting the requests it gets.
#[derive(Clone)]
struct HostileServer {
    how: Hostile,
    requests: Arc<AtomicUsize>,
}

impl ServerReflection for HostileServer {
    type ServerReflectionInfoStream = BoxStream<ServerReflectionResponse>;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<ServerReflectionRequest>>,
    ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
        let (hostile, requests) = (self.how, self.requests.clone());
        if let Hostile::Silent = hostile {
            return Ok(Response::new(Box::pin(futures_util::stream::pending())));
        }
        let answers = request.into_inner().then(move |request| {
            // Requests, not the stream's end (an error when the client hangs up).
            if request.is_ok() {
                requests.fetch_add(1, Ordering::Relaxed);
            }
            async move {
                if let Hostile::Slow = hostile {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                request.map(|r| hostile.answer(r))
            }
        });
        Ok(Response::new(Box::pin(answers)))
    }
}

/// Each hostile server ends the run with a clear error after a bounded number of
/// requests; the silent and the slow one within the walk's one deadline (1 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_reflection_server_gets_a_clear_error() {
    // Room enough for 4096 requests on a slow machine: the count stops these.
    let counted = "120s";
    let cases = [
        (Hostile::Silent, "1s", "no complete answer within 1s", 1),
        (Hostile::Garbage, counted, "does not decode", 1),
        (Hostile::Endless, counted, "exceed 4096 files", 4096),
        (Hostile::Huge, counted, "exceed 67108864 bytes", 65),
        // Without the check, 1000 requests, then an invalid set of descriptors.
        (
            Hostile::Empty,
            counted,
            "the answer for file f1.proto does not hold it",
            2,
        ),
        // Without the count of the imports still wanted, 4096 requests.
        (Hostile::Crowded, counted, "exceed 4096 files", 1),
        // Without the walk's deadline, 4096 answers of 300 ms each.
        (Hostile::Slow, "1s", "no complete answer within 1s", 5),
        // Without the count per answer, a million files taken as one, named "".
        (
            Hostile::Nameless,
            counted,
            "holds 1000000 files, more than 4096",
            1,
        ),
        (Hostile::Unnamed, counted, "holds a file without a name", 1),
        // Without the reflection channel's own limit, taken under the load's 64 MiB.
        (Hostile::Oversized, counted, "16777216", 1),
    ];
    for (how, timeout, expected, most_requests) in cases {
        let requests = Arc::new(AtomicUsize::new(0));
        let service = HostileServer {
            how,
            requests: requests.clone(),
        };
        // Room for the oversized answer on the server's side.
        let mut config = ServerConfig::default();
        config.max_message_size(64 << 20);
        let server = rdmarpc_core::Server::builder()
            .config(config)
            .add_service(ServerReflectionServer::new(service))
            .unwrap()
            .build();
        let port = serve(server).await;
        let host = format!("127.0.0.1:{port}");
        let started = Instant::now();
        let e = run(&[
            "--insecure",
            "--connect-timeout",
            timeout,
            "--call",
            "p.S/M",
            &host,
        ])
        .await
        .unwrap_err();
        let message = format!("{e:#}");
        assert!(message.contains(expected), "{how:?}: {message}");
        if timeout == "1s" {
            // A bound on termination (the deadline is 1 s), not a performance figure.
            assert!(started.elapsed() < Duration::from_secs(30), "{how:?}");
        }
        let requests = requests.load(Ordering::Relaxed);
        assert!(requests <= most_requests, "{how:?}: {requests} requests");
    }
}
