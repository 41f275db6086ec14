//! Reflection end to end through this framework's own client, over TCP on 127.0.0.1 and
//! over the in-memory transport: what a client learns, and what a hostile one cannot do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DescriptorPool, Value};
use rdmarpc_core::{memory, Channel, Code, Connection, Server, ServerConfig, Streaming};
use rdmarpc_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use rdmarpc_reflection::pb::v1::server_reflection_request::MessageRequest;
use rdmarpc_reflection::pb::v1::server_reflection_response::MessageResponse;
use rdmarpc_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use rdmarpc_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient as V1alphaClient;
use rdmarpc_transport_tcp::{TcpConfig, TcpConnection, TcpListener};
use tokio::sync::mpsc;

/// The encoded set of the test protos: `acme/shop.proto` and its imports.
fn shop_set() -> Vec<u8> {
    let mut compiler =
        protox::Compiler::new([concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proto")]).unwrap();
    compiler
        .include_imports(true)
        .include_source_info(true)
        .open_files(["acme/shop.proto"])
        .unwrap();
    compiler.encode_file_descriptor_set()
}

/// A server with reflection (both versions) and health, and `config`.
fn server(config: ServerConfig) -> Server {
    let reflection = rdmarpc_reflection::Builder::new()
        .register_encoded_file_descriptor_set(shop_set())
        .register_encoded_file_descriptor_set(rdmarpc_health::FILE_DESCRIPTOR_SET)
        .build()
        .unwrap();
    let (_reporter, health) = rdmarpc_health::health_reporter();
    Server::builder()
        .add_service(reflection.v1())
        .unwrap()
        .add_service(reflection.v1alpha())
        .unwrap()
        .add_service(health)
        .unwrap()
        .config(config)
        .build()
}

/// [`server`] on a TCP port of 127.0.0.1, and a channel to it.
async fn tcp(config: ServerConfig) -> Channel<TcpConnection> {
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_socket_addr().unwrap();
    let server = server(config);
    tokio::spawn(async move { server.serve(listener).await });
    let conn = TcpConnection::connect(addr, &TcpConfig::default())
        .await
        .unwrap();
    Channel::new(conn)
}

fn request(message: MessageRequest) -> ServerReflectionRequest {
    ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    }
}

/// One reflection stream, driven a request at a time.
struct Session {
    requests: mpsc::Sender<ServerReflectionRequest>,
    responses: Streaming<ServerReflectionResponse>,
}

impl Session {
    async fn v1<C: Connection>(channel: Channel<C>) -> Session {
        let (requests, rx) = mpsc::channel(1);
        let responses = ServerReflectionClient::new(channel)
            .server_reflection_info(receiver_stream(rx))
            .await
            .unwrap()
            .into_inner();
        Session {
            requests,
            responses,
        }
    }

    async fn v1alpha<C: Connection>(channel: Channel<C>) -> Session {
        let (requests, rx) = mpsc::channel(1);
        let responses = V1alphaClient::new(channel)
            .server_reflection_info(receiver_stream(rx))
            .await
            .unwrap()
            .into_inner();
        Session {
            requests,
            responses,
        }
    }

    async fn ask(&mut self, message: MessageRequest) -> MessageResponse {
        self.requests.send(request(message.clone())).await.unwrap();
        let response = self.responses.message().await.unwrap().unwrap();
        assert_eq!(
            response.original_request.and_then(|r| r.message_request),
            Some(message)
        );
        response.message_response.unwrap()
    }

    async fn services(&mut self) -> Vec<String> {
        match self.ask(MessageRequest::ListServices(String::new())).await {
            MessageResponse::ListServicesResponse(list) => {
                list.service.into_iter().map(|s| s.name).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    async fn files(&mut self, message: MessageRequest) -> Vec<Bytes> {
        match self.ask(message).await {
            MessageResponse::FileDescriptorResponse(files) => files.file_descriptor_proto,
            other => panic!("{other:?}"),
        }
    }
}

fn receiver_stream<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
}

/// A descriptor pool of `files` alone, as a client without the `.proto` files builds it.
fn pool(files: &[Bytes]) -> DescriptorPool {
    // A `FileDescriptorSet` of the files as they came (decoding them into prost_types
    // first would drop custom options).
    let mut encoded = Vec::new();
    for file in files {
        prost::encoding::bytes::encode(1, file, &mut encoded);
    }
    DescriptorPool::decode(encoded.as_slice()).unwrap()
}

fn error_code(response: &MessageResponse) -> Code {
    match response {
        MessageResponse::ErrorResponse(e) => Code::from_u8(e.error_code as u8),
        other => panic!("not an error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_lists_services_then_builds_a_service_from_one_answer() {
    let mut session = Session::v1(tcp(ServerConfig::default()).await).await;
    assert_eq!(
        session.services().await,
        [
            "acme.shop.Shop",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ]
    );
    let files = session
        .files(MessageRequest::FileContainingSymbol(
            "acme.shop.Shop".into(),
        ))
        .await;
    assert_eq!(files.len(), 4, "shop.proto and its three imports");
    let pool = pool(&files);
    let shop = pool.get_service_by_name("acme.shop.Shop").unwrap();
    let buy = shop.methods().find(|m| m.name() == "Buy").unwrap();
    assert_eq!(buy.input().full_name(), "acme.shop.Order");
    assert_eq!(buy.output().full_name(), "acme.shop.Receipt");
    assert_eq!(
        pool.get_message_by_name("acme.shop.Order.Line")
            .unwrap()
            .get_field_by_name("price")
            .unwrap()
            .kind()
            .as_message()
            .unwrap()
            .full_name(),
        "acme.common.Money"
    );
    // The custom option came through: files are served as registered, byte for byte.
    let idempotent = pool
        .get_extension_by_name("acme.options.idempotent")
        .unwrap();
    assert_eq!(
        buy.options().get_extension(&idempotent).as_ref(),
        &Value::Bool(true)
    );
    // Health is described as well, and the reflection service describes itself.
    let health = session
        .files(MessageRequest::FileContainingSymbol(
            "grpc.health.v1.Health.Check".into(),
        ))
        .await;
    assert!(pool_of_one(&health, "grpc.health.v1.Health"));
    let reflection = session
        .files(MessageRequest::FileByFilename(
            "grpc/reflection/v1/reflection.proto".into(),
        ))
        .await;
    assert!(pool_of_one(
        &reflection,
        "grpc.reflection.v1.ServerReflection"
    ));
}

fn pool_of_one(files: &[Bytes], service: &str) -> bool {
    pool(files).get_service_by_name(service).is_some()
}

#[tokio::test]
async fn v1alpha_answers_the_same_over_the_in_memory_transport() {
    let (client_end, server_end) = memory::pair(1 << 20);
    let server = server(ServerConfig::default());
    tokio::spawn(async move { server.serve_connection(server_end).await });
    let channel = Channel::new(client_end);
    let mut alpha = Session::v1alpha(channel.clone()).await;
    let mut v1 = Session::v1(channel).await;
    assert_eq!(alpha.services().await, v1.services().await);
    for question in [
        MessageRequest::FileByFilename("acme/shop.proto".into()),
        MessageRequest::FileContainingSymbol("acme.shop.Order.FAST".into()),
        MessageRequest::FileContainingExtension(rdmarpc_reflection::pb::v1::ExtensionRequest {
            containing_type: "acme.options.Extendable".into(),
            extension_number: 101,
        }),
        MessageRequest::AllExtensionNumbersOfType("google.protobuf.MethodOptions".into()),
        MessageRequest::FileContainingSymbol("acme.shop.Nope".into()),
    ] {
        assert_eq!(alpha.ask(question.clone()).await, v1.ask(question).await);
    }
    let unknown = alpha
        .ask(MessageRequest::FileContainingSymbol(
            "acme.shop.Nope".into(),
        ))
        .await;
    assert_eq!(error_code(&unknown), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_symbol_gets_an_error_and_the_stream_goes_on() {
    let mut session = Session::v1(tcp(ServerConfig::default()).await).await;
    session
        .requests
        .send(request(MessageRequest::FileContainingSymbol(
            "a.".repeat(1 << 19),
        )))
        .await
        .unwrap();
    let response = session.responses.message().await.unwrap().unwrap();
    let answer = response.message_response.as_ref().unwrap();
    assert_eq!(error_code(answer), Code::InvalidArgument, "{answer:?}");
    assert!(response.original_request.is_none(), "not echoed back");
    assert!(response.encoded_len() < 200);
    // The same stream answers the next request.
    assert_eq!(session.services().await.len(), 4);
}

/// A message whose field 4 (`file_containing_symbol`, a string) is not UTF-8: the
/// encoding of no `ServerReflectionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct Malformed {
    #[prost(bytes = "vec", tag = "4")]
    symbol: Vec<u8>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_ends_the_stream_with_invalid_argument() {
    let channel = tcp(ServerConfig::default()).await;
    let malformed = Malformed {
        symbol: vec![0xff, 0xfe, 0xfd],
    };
    let mut responses = channel
        .streaming::<_, ServerReflectionResponse>(
            futures_util::stream::iter([malformed]),
            &rdmarpc_reflection::pb::v1::server_reflection_methods::METHODS[0],
        )
        .await
        .unwrap()
        .into_inner();
    let status = responses.message().await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // The connection serves the next stream.
    let mut session = Session::v1(channel).await;
    assert_eq!(session.services().await.len(), 4);
}

/// How many requests a client that never reads answers gets the server to take: the
/// server reads a request only when the previous answer went out, and answers go out
/// only within the client's window, so the client's sends stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_answers_is_stopped_by_the_windows() {
    let mut config = ServerConfig::default();
    config.stream_window(64 << 10);
    let channel = tcp(config).await;
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let question = || {
        request(MessageRequest::FileContainingSymbol(
            "acme.common.Money".into(),
        ))
    };
    let requests = futures_util::stream::repeat_with(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        question()
    });
    let mut responses = ServerReflectionClient::new(channel)
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    let settled = settle(&pulled).await;
    let request_len = question().encoded_len();
    let answer_len = responses.message().await.unwrap().unwrap().encoded_len();
    eprintln!(
        "a client that never reads: {settled} requests taken ({request_len} bytes each, a \
         64 KiB request window; answers of {answer_len} bytes, a {} KiB response window)",
        rdmarpc_core::DEFAULT_STREAM_WINDOW >> 10
    );
    // At most the request window's worth (counted in whole frames, so fewer than its
    // bytes / request), the answers in the client's window, and one being answered.
    let bound =
        (64 << 10) / request_len + rdmarpc_core::DEFAULT_STREAM_WINDOW as usize / answer_len;
    assert!(
        settled <= bound + 1,
        "{settled} requests taken, more than {bound}"
    );
    // Reading answers lets the client send again.
    let mut read = 0;
    while pulled.load(Ordering::Relaxed) == settled {
        let answer = responses.message().await.unwrap().unwrap();
        assert!(matches!(
            answer.message_response,
            Some(MessageResponse::FileDescriptorResponse(_))
        ));
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
