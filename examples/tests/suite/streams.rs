//! Streaming calls, generic over the transport: the interop cases, flow control between
//! streams, cancellation from each side, deadlines over a whole stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use examples::grpc_testing::test_service_client::TestServiceClient;
use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::grpc_testing::{
    EchoStatus, ResponseParameters, StreamingInputCallRequest, StreamingOutputCallRequest,
};
use examples::interop::{self, request_channel, InteropClients, InteropProbe, InteropService};
use rdmarpc_core::{Code, Request, Server, ServerConfig};

use super::Harness;

/// The interop server, counting its live handlers into the returned probe.
pub fn interop_server(config: ServerConfig) -> (Server, Arc<InteropProbe>) {
    let probe = Arc::new(InteropProbe::default());
    let service = InteropService::with_probe(probe.clone());
    let (_reporter, health) = rdmarpc_health::health_reporter();
    let server = Server::builder()
        .add_service(TestServiceServer::new(service))
        .unwrap()
        .add_service(health)
        .unwrap()
        .config(config)
        .build();
    (server, probe)
}

/// Waits (up to 10 s) for the server's handlers to be gone.
async fn released(probe: &InteropProbe) {
    let start = Instant::now();
    while probe.running() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} handlers still running",
            probe.running()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn output(sizes: impl IntoIterator<Item = i32>, interval_us: i32) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: sizes
            .into_iter()
            .map(|size| ResponseParameters {
                size,
                interval_us,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Every interop case passes, one after the other on one channel.
pub async fn interop_cases_pass<H: Harness>(h: H) {
    let (server, probe) = interop_server(ServerConfig::default());
    let addr = h.start(server).await;
    let clients = InteropClients::new(h.connect(&addr, 16 << 20).await);
    for case in interop::CASES {
        let outcome = interop::run_case(&clients, case).await;
        assert!(outcome.is_ok(), "{case}: {}", outcome.unwrap_err());
    }
    released(&probe).await;
}

/// A stream whose reader stops reading fills its window and waits there; other streams
/// and unary calls on the same connection go on.
pub async fn a_slow_reader_does_not_stall_other_streams<H: Harness>(h: H) {
    let (server, probe) = interop_server(ServerConfig::default());
    let addr = h.start(server).await;
    let client = TestServiceClient::new(h.connect(&addr, 16 << 20).await);
    // 64 MiB offered on stream A, far beyond its window (1 MiB); nobody reads it.
    let mut stalled = client
        .streaming_output_call(output(std::iter::repeat_n(64 << 10, 1024), 0))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let others = async {
        for round in 0..3 {
            let mut stream = client
                .streaming_output_call(output(std::iter::repeat_n(32 << 10, 100), 0))
                .await
                .unwrap()
                .into_inner();
            let mut n = 0;
            while let Some(response) = stream.message().await.unwrap() {
                assert_eq!(response.payload.unwrap().body.len(), 32 << 10);
                n += 1;
            }
            assert_eq!(n, 100, "round {round}");
            client
                .empty_call(examples::grpc_testing::Empty {})
                .await
                .unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), others)
        .await
        .expect("streams beside a stalled one are served");
    // The stalled stream still delivers everything, in order, once read.
    let mut n = 0;
    while let Some(response) = stalled.message().await.unwrap() {
        assert_eq!(response.payload.unwrap().body.len(), 64 << 10);
        n += 1;
    }
    assert_eq!(n, 1024);
    released(&probe).await;
}

/// Dropping a stream on the client releases the server's handler (and its buffers); a
/// server that ends a stream with an error releases it too, and the client's request
/// stream stops.
pub async fn cancelled_streams_release_their_handlers<H: Harness>(h: H) {
    let (server, probe) = interop_server(ServerConfig::default());
    let addr = h.start(server).await;
    let client = TestServiceClient::new(h.connect(&addr, 16 << 20).await);

    // Client side, bidirectional: drop after the first response, request stream open.
    let (tx, requests) = request_channel();
    tx.send(output([1000], 0)).await.unwrap();
    let mut responses = client
        .full_duplex_call(requests)
        .await
        .unwrap()
        .into_inner();
    responses.message().await.unwrap().unwrap();
    assert!(probe.running() > 0);
    drop(responses);
    released(&probe).await;
    // Dropping the stream aborts its request task; the abort completes when the runtime
    // next runs that task, which may come after the server's release (seen in the guest).
    tokio::time::timeout(Duration::from_secs(10), tx.closed())
        .await
        .expect("the request stream's task stopped");

    // Client side, server stream: a long slow stream dropped mid-way.
    let mut responses = client
        .streaming_output_call(output(std::iter::repeat_n(10, 1000), 10_000))
        .await
        .unwrap()
        .into_inner();
    responses.message().await.unwrap().unwrap();
    drop(responses);
    released(&probe).await;

    // Client side, client stream: dropped before it ends (the handler waits for more).
    let (tx, requests) = request_channel();
    tx.send(StreamingInputCallRequest::default()).await.unwrap();
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.streaming_input_call(requests).await }
    });
    let start = Instant::now();
    while probe.running() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "handler never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call.abort();
    released(&probe).await;
    drop(tx);

    // Server side: the handler ends the call with a status while the client still sends.
    let (tx, requests) = request_channel();
    tx.send(output([10], 0)).await.unwrap();
    let mut responses = client
        .full_duplex_call(requests)
        .await
        .unwrap()
        .into_inner();
    responses.message().await.unwrap().unwrap();
    tx.send(StreamingOutputCallRequest {
        response_status: Some(EchoStatus {
            code: Code::Aborted as i32,
            message: "stop".into(),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let status = responses.message().await.unwrap_err();
    assert_eq!((status.code(), status.message()), (Code::Aborted, "stop"));
    released(&probe).await;
    // The request stream is no longer pulled: its channel closes once the call is gone.
    let start = Instant::now();
    while !tx.is_closed() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "request task still running"
        );
        let _ = tx.try_send(output([1], 0));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The channel is fine.
    client
        .empty_call(examples::grpc_testing::Empty {})
        .await
        .unwrap();
}

/// A deadline covers the whole stream: a server stream that outlives it ends with
/// DEADLINE_EXCEEDED at the client, and the server drops its handler at the deadline
/// even while the client does not read.
pub async fn a_stream_past_its_deadline_ends_on_both_sides<H: Harness>(h: H) {
    let (server, probe) = interop_server(ServerConfig::default());
    let addr = h.start(server).await;
    let client = TestServiceClient::new(h.connect(&addr, 16 << 20).await);
    let mut request = Request::new(output(std::iter::repeat_n(100, 1000), 20_000));
    request.set_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let mut responses = client
        .streaming_output_call(request)
        .await
        .unwrap()
        .into_inner();
    responses.message().await.unwrap().unwrap();
    // Not reading: the server's own deadline ends the handler.
    tokio::time::sleep(Duration::from_millis(500)).await;
    released(&probe).await;
    let mut received = 1;
    let status = loop {
        match responses.message().await {
            Ok(Some(_)) => received += 1,
            Ok(None) => panic!("the stream ended OK after {received} messages"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(received < 1000);
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A bidirectional stream whose client keeps it open but idle.
    let (tx, requests) = request_channel();
    let mut request = Request::new(requests);
    request.set_timeout(Duration::from_millis(200));
    let mut responses = client.full_duplex_call(request).await.unwrap().into_inner();
    tx.send(output([10], 0)).await.unwrap();
    responses.message().await.unwrap().unwrap();
    let status = responses.message().await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    released(&probe).await;
}

/// The kv store's Watch: changes under the prefix, in order, with revisions; large
/// values announced by size.
pub async fn kv_watch_streams_changes_under_a_prefix<H: Harness>(h: H) {
    use examples::kv::kv_client::KvClient;
    use examples::kv::kv_server::KvServer;
    use examples::kv::{DeleteRequest, PutRequest, WatchRequest};
    let server = Server::builder()
        .add_service(KvServer::new(examples::KvStore::default()))
        .unwrap()
        .build();
    let addr = h.start(server).await;
    let client = KvClient::new(h.connect(&addr, 16 << 20).await);
    let put = |key: &str, len: usize| PutRequest {
        key: key.into(),
        value: bytes::Bytes::from(vec![b'v'; len]),
    };
    client.put(put("a/0", 1)).await.unwrap(); // before the watch: not seen
    let mut changes = client
        .watch(WatchRequest {
            prefix: "a/".into(),
        })
        .await
        .unwrap()
        .into_inner();
    client.put(put("a/1", 5)).await.unwrap();
    client.put(put("b/1", 5)).await.unwrap();
    client
        .delete(DeleteRequest { key: "a/1".into() })
        .await
        .unwrap();
    client
        .put(put("a/2", examples::WATCH_VALUE_MAX + 1))
        .await
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = changes.message().await.unwrap().unwrap();
        seen.push((e.revision, e.key, e.deleted, e.value.len(), e.value_size));
    }
    let big = examples::WATCH_VALUE_MAX as u64 + 1;
    assert_eq!(
        seen,
        [
            (2, "a/1".to_owned(), false, 5, 5),
            (4, "a/1".to_owned(), true, 0, 0),
            (5, "a/2".to_owned(), false, 0, big),
        ]
    );
}

/// The chat room: members see joins, each other's posts (numbered, in one order) and
/// leaves.
pub async fn chat_members_see_each_others_posts<H: Harness>(h: H) {
    use examples::chat::chat_client::ChatClient;
    use examples::chat::chat_server::ChatServer;
    use examples::chat::{event::Kind, Post};
    let server = Server::builder()
        .add_service(ChatServer::new(examples::ChatRoom::default()))
        .unwrap()
        .build();
    let addr = h.start(server).await;
    let join = |name: &str| {
        let (tx, posts) = request_channel::<Post>();
        let mut request = Request::new(posts);
        request.metadata_mut().insert(examples::NAME_KEY, name);
        (tx, request)
    };
    let client = ChatClient::new(h.connect(&addr, 1 << 20).await);
    let (alice_tx, request) = join("alice");
    let mut alice = client.join(request).await.unwrap().into_inner();
    let next = async |events: &mut rdmarpc_core::Streaming<examples::chat::Event>| {
        let e = events.message().await.unwrap().unwrap();
        (e.seq, e.from.clone(), e.kind(), e.text.clone())
    };
    assert_eq!(
        next(&mut alice).await,
        (1, "alice".into(), Kind::Joined, "".into())
    );
    let other = ChatClient::new(h.connect(&addr, 1 << 20).await);
    let (bob_tx, request) = join("bob");
    let mut bob = other.join(request).await.unwrap().into_inner();
    let joined = (2, "bob".into(), Kind::Joined, "".into());
    assert_eq!(next(&mut alice).await, joined);
    assert_eq!(next(&mut bob).await, joined);
    alice_tx
        .send(Post {
            text: "hi bob".into(),
        })
        .await
        .unwrap();
    let post = (3, "alice".into(), Kind::Posted, "hi bob".into());
    assert_eq!(next(&mut alice).await, post);
    assert_eq!(next(&mut bob).await, post);
    drop(bob_tx); // bob leaves
    assert_eq!(
        next(&mut alice).await,
        (4, "bob".into(), Kind::Left, "".into())
    );
    assert!(bob.message().await.unwrap().is_none(), "bob's stream ended");
    // A nameless member is refused.
    let (_tx, posts) = request_channel::<Post>();
    let status = client.join(posts).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    drop(alice_tx);
}

/// The echo service's `Chat` (the ping-pong benchmark's method): each request message
/// answered by one reply carrying its payload, in order, whether sent one at a time (each
/// after the reply to the one before) or all at once; the replies end with the requests.
pub async fn echo_chat_answers_each_message_in_order<H: Harness>(h: H) {
    use examples::echo::echo_client::EchoClient;
    use examples::echo::echo_server::EchoServer;
    use examples::echo::EchoRequest;
    let server = Server::builder()
        .add_service(EchoServer::new(examples::EchoService))
        .unwrap()
        .build();
    let addr = h.start(server).await;
    let client = EchoClient::new(h.connect(&addr, 1 << 20).await);
    let request = |i: usize| EchoRequest {
        payload: format!("ping {i}").into_bytes().into(),
        ..Default::default()
    };
    // One at a time: the first sent before the call's response headers are awaited.
    let (tx, requests) = request_channel::<EchoRequest>();
    tx.send(request(0)).await.unwrap();
    let mut replies = client.chat(requests).await.unwrap().into_inner();
    for i in 0..10 {
        if i > 0 {
            tx.send(request(i)).await.unwrap();
        }
        let reply = replies
            .message()
            .await
            .unwrap()
            .expect("a reply per request");
        assert_eq!(reply.payload, request(i).payload, "reply {i}");
    }
    drop(tx);
    assert!(replies.message().await.unwrap().is_none(), "ends with them");
    // All at once.
    let all = futures_util::stream::iter((0..100).map(request));
    let mut replies = client.chat(all).await.unwrap().into_inner();
    for i in 0..100 {
        let reply = replies
            .message()
            .await
            .unwrap()
            .expect("a reply per request");
        assert_eq!(reply.payload, request(i).payload, "reply {i}");
    }
    assert!(replies.message().await.unwrap().is_none(), "ends with them");
}
