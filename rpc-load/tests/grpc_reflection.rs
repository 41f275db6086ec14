//! Standard gRPC clients over HTTP/2 against the echo example server as `echo-server`
//! runs it (echo, health and reflection on one port): tonic-reflection's generated
//! client lists the services and fetches a service's file by symbol, a descriptor pool
//! built from the answers alone drives a dynamic call, and tonic-health's client gets
//! `SERVING`. Then what a hostile client cannot do over HTTP/2.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use examples::echo::echo_server::EchoServer;
use examples::EchoService;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Value};
use rdmarpc_core::ServerConfig;
use rdmarpc_load::grpc::DynamicCodec;
use rdmarpc_transport::{AnyListener, TransportSettings};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use tonic_reflection::pb::v1alpha;

/// The echo example server (`examples::transport::example_server`, as `echo-server`
/// builds it) on a port of 127.0.0.1, with `config`; returns the port.
async fn start_echo_server(config: ServerConfig) -> u16 {
    let endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let port = listener.port();
    let (server, reporter) =
        examples::transport::example_server(EchoServer::new(EchoService), config).unwrap();
    tokio::spawn(async move {
        let _reporter = reporter; // statuses stay as reported while the server runs
        server.serve(listener).await
    });
    port
}

async fn connect(port: u16) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn request(message: MessageRequest) -> ServerReflectionRequest {
    ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    }
}

/// Sends `requests` on one stream of tonic-reflection's v1 client; returns the answers.
async fn ask(channel: Channel, requests: Vec<MessageRequest>) -> Vec<MessageResponse> {
    let count = requests.len();
    let mut responses = ServerReflectionClient::new(channel)
        .server_reflection_info(futures_util::stream::iter(
            requests.into_iter().map(request),
        ))
        .await
        .unwrap()
        .into_inner();
    let mut answers = Vec::new();
    while let Some(response) = responses.message().await.unwrap() {
        answers.push(response.message_response.unwrap());
    }
    assert_eq!(answers.len(), count);
    answers
}

fn services(answer: &MessageResponse) -> Vec<String> {
    match answer {
        MessageResponse::ListServicesResponse(list) => {
            list.service.iter().map(|s| s.name.clone()).collect()
        }
        other => panic!("{other:?}"),
    }
}

fn files(answer: MessageResponse) -> Vec<Vec<u8>> {
    match answer {
        MessageResponse::FileDescriptorResponse(files) => files.file_descriptor_proto,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_reflection_lists_fetches_and_a_dynamic_call_follows() {
    let port = start_echo_server(ServerConfig::default()).await;
    let channel = connect(port).await;
    let mut answers = ask(
        channel.clone(),
        vec![
            MessageRequest::ListServices(String::new()),
            MessageRequest::FileContainingSymbol("echo.Echo".into()),
            MessageRequest::FileContainingSymbol("echo.Nope".into()),
        ],
    )
    .await;
    assert_eq!(
        services(&answers[0]),
        [
            "echo.Echo",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ]
    );
    match &answers[2] {
        MessageResponse::ErrorResponse(e) => assert_eq!(e.error_code, 5, "NOT_FOUND"),
        other => panic!("{other:?}"),
    }
    // A pool from the answer alone: no .proto file on this side.
    let files = files(answers.remove(1));
    let mut set = Vec::new();
    for file in &files {
        prost::encoding::bytes::encode(1, file, &mut set);
    }
    let pool = DescriptorPool::decode(set.as_slice()).unwrap();
    let method = pool
        .get_service_by_name("echo.Echo")
        .unwrap()
        .methods()
        .find(|m| m.name() == "Echo")
        .unwrap();
    assert_eq!(method.input().full_name(), "echo.EchoRequest");
    let mut message = DynamicMessage::new(method.input());
    message.set_field_by_name("payload", Value::Bytes(Bytes::from_static(b"reflected")));
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let reply = grpc
        .unary(
            tonic::Request::new(message),
            PathAndQuery::from_static("/echo.Echo/Echo"),
            DynamicCodec::new(method.output()),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.get_field_by_name("payload").unwrap().as_bytes(),
        Some(&Bytes::from_static(b"reflected"))
    );

    // v1alpha, which older tools ask, lists the same.
    let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(channel)
        .server_reflection_info(futures_util::stream::iter([
            v1alpha::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(
                    v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
                ),
            },
        ]))
        .await
        .unwrap()
        .into_inner();
    let listed = alpha.message().await.unwrap().unwrap();
    match listed.message_response.unwrap() {
        v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list) => {
            assert_eq!(list.service.len(), 4, "{list:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_health_checks_report_serving() {
    let port = start_echo_server(ServerConfig::default()).await;
    let mut health = HealthClient::new(connect(port).await);
    for service in ["", "echo.Echo"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "kv.Kv".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_symbol_over_http2_gets_an_error_response() {
    let port = start_echo_server(ServerConfig::default()).await;
    let answers = ask(
        connect(port).await,
        vec![
            MessageRequest::FileContainingSymbol("x".repeat(1 << 20)),
            MessageRequest::ListServices(String::new()),
        ],
    )
    .await;
    match &answers[0] {
        MessageResponse::ErrorResponse(e) => assert_eq!(e.error_code, 3, "INVALID_ARGUMENT"),
        other => panic!("{other:?}"),
    }
    assert_eq!(services(&answers[1]).len(), 4);
}

/// Sends raw bytes as requests and decodes reflection responses.
#[derive(Debug, Clone, Copy)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ServerReflectionResponse;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = ServerReflectionResponse;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut DecodeBuf<'_>,
    ) -> Result<Option<ServerReflectionResponse>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        ServerReflectionResponse::decode(bytes)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_over_http2_ends_the_stream_with_invalid_argument() {
    let port = start_echo_server(ServerConfig::default()).await;
    let channel = connect(port).await;
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    // Field 4 (a string) holding bytes that are not UTF-8.
    let malformed = vec![0x22, 0x03, 0xff, 0xfe, 0xfd];
    let mut responses = grpc
        .streaming(
            tonic::Request::new(futures_util::stream::iter([malformed])),
            PathAndQuery::from_static("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let status = responses.message().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    // The connection goes on serving.
    let answers = ask(channel, vec![MessageRequest::ListServices(String::new())]).await;
    assert_eq!(services(&answers[0]).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_that_never_reads_answers_is_stopped_by_flow_control() {
    let port = start_echo_server(ServerConfig::default()).await;
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let question = || {
        request(MessageRequest::FileContainingSymbol(
            "echo.EchoRequest".into(),
        ))
    };
    let requests = futures_util::stream::repeat_with(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        question()
    });
    let mut responses = ServerReflectionClient::new(connect(port).await)
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    let settled = settle(&pulled).await;
    let answer_len = responses.message().await.unwrap().unwrap().encoded_len();
    eprintln!(
        "a gRPC client that never reads: {settled} requests taken ({} bytes each; answers \
         of {answer_len} bytes)",
        question().encoded_len()
    );
    // HTTP/2's windows (the server's receive window and what rdmarpc-grpc buffers, the
    // client's window for the answers) hold a few MiB at most.
    assert!(settled < 1_000_000, "{settled} requests taken");
    let mut read = 0;
    while pulled.load(Ordering::Relaxed) == settled {
        responses.message().await.unwrap().unwrap();
        read += 1;
        assert!(
            read < 10 * settled,
            "{read} answers read, the client still stopped"
        );
    }
    eprintln!("the client sent again after {read} answers were read");
}

/// Waits until `count` stops growing (for 300 ms), at most 10 s; returns it.
async fn settle(count: &AtomicUsize) -> usize {
    let mut last = usize::MAX;
    for _ in 0..34 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = count.load(Ordering::Relaxed);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the client kept sending: {last} requests taken");
}
