//! Regressions found in review: each of these failed before its fix.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BufMut;
use futures_util::StreamExt;

use crate::memory;
use crate::outbound::{send_control, send_frame};
use crate::service::{
    BoxMessage, MethodDescriptor, MethodKind, Service, ServiceFuture, StreamRequest,
    StreamResponse, StreamingFuture,
};
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Channel, Code, Connection, Metadata, Request, Response, Server, ServerConfig, Status};

static METHODS: [MethodDescriptor; 4] = [
    MethodDescriptor::with_kind("/r.R/Endless", MethodKind::ServerStreaming),
    MethodDescriptor::new("/r.R/Unary"),
    MethodDescriptor::with_kind("/r.R/Echo", MethodKind::Streaming),
    MethodDescriptor::with_kind("/r.R/Sum", MethodKind::ClientStreaming),
];

static DROPPED: AtomicBool = AtomicBool::new(false);
static ECHO_STARTED: AtomicUsize = AtomicUsize::new(0);

struct Flag;
impl Drop for Flag {
    fn drop(&mut self) {
        DROPPED.store(true, Ordering::SeqCst);
    }
}

struct Svc;
impl Service for Svc {
    fn name(&self) -> &'static str {
        "r.R"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        &METHODS
    }
    fn call(&self, _i: usize, _r: Request<crate::Payload<'_>>) -> ServiceFuture {
        Box::pin(async { Ok(Response::new(Box::new(vec![7u8]) as BoxMessage)) })
    }
    fn call_streaming(&self, index: usize, request: Request<StreamRequest<'_>>) -> StreamingFuture {
        match (index, request.into_inner()) {
            (0, StreamRequest::Message(_)) => {
                let flag = Flag;
                let stream = futures_util::stream::iter(0u64..).map(move |_| {
                    let _keep = &flag;
                    Ok(Box::new(vec![1u8; 1000]) as BoxMessage)
                });
                Box::pin(async move { Ok(Response::new(StreamResponse::Stream(Box::pin(stream)))) })
            }
            (2, StreamRequest::Stream(requests)) => {
                ECHO_STARTED.fetch_add(1, Ordering::SeqCst);
                let stream = requests.map(|m| m.map(|b| Box::new(b.to_vec()) as BoxMessage));
                Box::pin(async move { Ok(Response::new(StreamResponse::Stream(Box::pin(stream)))) })
            }
            (3, StreamRequest::Stream(mut requests)) => Box::pin(async move {
                let mut n = 0u64;
                while let Some(m) = requests.message().await? {
                    n += m.len() as u64;
                }
                Ok(Response::new(StreamResponse::Message(Box::new(
                    n.to_le_bytes().to_vec(),
                ))))
            }),
            _ => Box::pin(std::future::ready(Err(Status::internal("bad")))),
        }
    }
}

fn server(config: ServerConfig) -> memory::MemoryConnection {
    let server = Server::builder()
        .add_service(Svc)
        .unwrap()
        .config(config)
        .build();
    let (client, end) = memory::pair(1 << 20);
    tokio::spawn(async move { server.serve_connection(end).await });
    client
}

/// Doc of Streaming: "past [the deadline], the next read fails with DEADLINE_EXCEEDED".
#[tokio::test]
async fn the_client_deadline_holds_while_messages_are_queued() {
    let channel = Channel::new(server(ServerConfig::default()));
    let mut req = Request::new(Vec::<u8>::new());
    req.set_timeout(Duration::from_millis(200));
    let mut stream = channel
        .server_streaming::<Vec<u8>, Vec<u8>>(req, &METHODS[0])
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // well past the deadline
    let mut after = 0;
    let err = loop {
        match stream.message().await {
            Ok(Some(_)) => after += 1,
            Ok(None) => panic!("ended"),
            Err(e) => break e,
        }
    };
    assert_eq!(
        after, 0,
        "read {after} messages after the deadline had passed"
    );
    assert_eq!(err.code(), Code::DeadlineExceeded);
}

/// A unary caller of a server-streaming method: the headers frame completes the unary
/// call with a default message, no CANCEL is sent, and the server stream stays stuck.
#[tokio::test]
async fn a_unary_call_of_a_streaming_method_fails_and_cancels_the_stream() {
    let mut config = ServerConfig::default();
    config.max_open_streams_per_connection(1);
    let channel = Channel::new(server(config));
    let wrong = MethodDescriptor::new("/r.R/Endless"); // a stale client: unary kind
    let got = channel
        .unary::<Vec<u8>, Vec<u8>>(Request::new(vec![]), &wrong)
        .await;
    assert_eq!(
        got.unwrap_err().code(),
        Code::Internal,
        "a kind mismatch, not a message"
    );
    // The server's stream was cancelled: its slot is free for the next stream.
    let mut req = Request::new(vec![]);
    req.set_timeout(Duration::from_secs(5));
    let mut next = channel
        .server_streaming::<Vec<u8>, Vec<u8>>(req, &METHODS[0])
        .await
        .unwrap()
        .into_inner();
    next.message().await.unwrap().unwrap();
    assert!(
        DROPPED.load(Ordering::SeqCst),
        "the server stream was dropped"
    );
}

/// A client that reuses a cancelled call's id at once (hostile): the old task removes the
/// new call's stream entry.
#[tokio::test]
async fn a_cancelled_calls_task_leaves_a_reused_ids_stream_alone() {
    let conn = server(ServerConfig::default());
    async fn open(c: &memory::MemoryConnection) -> Result<(), crate::TransportError> {
        let mut h = Header::new(FrameKind::Request, 1);
        h.method_id = METHODS[2].id;
        h.credits = 1 << 20;
        send_frame(c, h, &Metadata::new(), |_| {}).await
    }
    open(&conn).await.unwrap();
    for _ in 0..2 {
        conn.recv().await.unwrap().unwrap(); // window update + headers
    }
    send_control(&conn, FrameKind::Cancel, 1).await.unwrap();
    open(&conn).await.unwrap();
    let mut h = Header::new(FrameKind::Message, 1);
    h.payload_len = 3;
    // wait for the new call's grant before sending
    loop {
        let buf = conn.recv().await.unwrap().unwrap();
        let f = Frame::parse(&buf).unwrap();
        if f.header.kind == FrameKind::WindowUpdate {
            break;
        }
        if f.header.flags.contains(Flags::END_STREAM) {
            panic!("new call ended: {:?}", Code::from_u8(f.header.status));
        }
    }
    send_frame(&conn, h, &Metadata::new(), |b| b.put_slice(b"abc"))
        .await
        .unwrap();
    let mut echoed = false;
    while let Ok(Ok(Some(buf))) =
        tokio::time::timeout(Duration::from_millis(500), conn.recv()).await
    {
        let f = Frame::parse(&buf).unwrap();
        if f.header.kind == FrameKind::Message {
            echoed = true;
        }
    }
    assert!(
        echoed,
        "the reused id's new call was killed by the old task"
    );
}

/// The pump swallows a per-frame TooLarge from the transport: the call hangs (no
/// half-close, no failure) until its deadline, where a unary call fails at once.
#[tokio::test]
async fn a_request_over_the_transports_frame_fails_the_stream_at_once() {
    let server = Server::builder().add_service(Svc).unwrap().build();
    let (client, end) = memory::pair(1024);
    tokio::spawn(async move { server.serve_connection(end).await });
    let channel = Channel::new(client);
    let unary = channel
        .unary::<Vec<u8>, Vec<u8>>(Request::new(vec![0; 300_000]), &METHODS[1])
        .await;
    assert_eq!(
        unary.unwrap_err().code(),
        Code::ResourceExhausted,
        "over the transport's frame: this message fails, as gRPC's over its send limit"
    );
    let mut req = Request::new(futures_util::stream::iter(vec![vec![0u8; 300_000]]));
    req.set_timeout(Duration::from_secs(1));
    let start = std::time::Instant::now();
    let got = channel
        .client_streaming::<_, Vec<u8>>(req, &METHODS[3])
        .await;
    assert_eq!(got.unwrap_err().code(), Code::ResourceExhausted);
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "failed at once, not at the deadline"
    );
}

/// A response message over the client's maximum: the client fails the stream with
/// RESOURCE_EXHAUSTED, then `calls.remove` overwrites it with CANCELLED.
#[tokio::test]
async fn an_oversized_stream_message_fails_with_resource_exhausted() {
    let server = Server::builder().add_service(Svc).unwrap().build();
    let (client, end) = memory::pair(500); // the 1000-byte messages are discarded
    tokio::spawn(async move { server.serve_connection(end).await });
    let channel = Channel::new(client);
    let mut stream = channel
        .server_streaming::<Vec<u8>, Vec<u8>>(Request::new(vec![]), &METHODS[0])
        .await
        .unwrap()
        .into_inner();
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
}
