//! Streaming calls driven frame by frame over the in-memory transport: the server keeps
//! to the client's window, grants its own, enforces a deadline over the whole stream, and
//! closes the connection of a client that breaks the stream rules (and only that one).

use std::time::Duration;

use bytes::{BufMut, Bytes};
use futures_util::StreamExt;

use crate::memory::{self, MemoryConnection};
use crate::outbound::{send_control, send_frame};
use crate::service::{
    BoxMessage, MethodDescriptor, MethodKind, Service, ServiceFuture, StreamRequest,
    StreamResponse, StreamingFuture,
};
use crate::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN, MAX_STREAM_WINDOW};
use crate::{Code, Connection, Metadata, Request, Response, Server, ServerConfig, Status};

static METHODS: [MethodDescriptor; 3] = [
    MethodDescriptor::with_kind("/s.S/Count", MethodKind::ServerStreaming),
    MethodDescriptor::with_kind("/s.S/Sum", MethodKind::ClientStreaming),
    MethodDescriptor::with_kind("/s.S/Echo", MethodKind::Streaming),
];
const COUNT: u32 = METHODS[0].id;
const SUM: u32 = METHODS[1].id;
const ECHO: u32 = METHODS[2].id;
/// Each message of Count: 1000 bytes (a `Vec<u8>` message: 1003 encoded), so 1043-byte
/// frames.
const COUNT_MESSAGE: usize = 1000;
const COUNT_FRAME: u32 = (HEADER_LEN + COUNT_MESSAGE + 3) as u32;

/// Count(n): n messages of 1000 bytes. Sum: the total payload length of the request
/// stream, as u64 LE. Echo: each request back.
struct Streams;

impl Service for Streams {
    fn name(&self) -> &'static str {
        "s.S"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        &METHODS
    }
    fn call(&self, _index: usize, _request: Request<crate::Payload<'_>>) -> ServiceFuture {
        unreachable!("no unary methods")
    }
    fn call_streaming(&self, index: usize, request: Request<StreamRequest<'_>>) -> StreamingFuture {
        let body = request.into_inner();
        match (index, body) {
            (0, StreamRequest::Message(payload)) => {
                let n = u32::from_le_bytes(payload.as_slice().try_into().unwrap());
                let stream = futures_util::stream::iter(0..n)
                    .map(|i| Ok(Box::new(vec![i as u8; COUNT_MESSAGE]) as BoxMessage));
                Box::pin(async move { Ok(Response::new(StreamResponse::Stream(Box::pin(stream)))) })
            }
            (1, StreamRequest::Stream(mut requests)) => Box::pin(async move {
                let mut total = 0u64;
                while let Some(message) = requests.message().await? {
                    total += message.len() as u64;
                }
                let reply = total.to_le_bytes().to_vec();
                Ok(Response::new(StreamResponse::Message(Box::new(reply))))
            }),
            (2, StreamRequest::Stream(requests)) => Box::pin(async move {
                let stream = requests.map(|m| m.map(|b| Box::new(b.to_vec()) as BoxMessage));
                Ok(Response::new(StreamResponse::Stream(Box::pin(stream))))
            }),
            _ => Box::pin(std::future::ready(Err(Status::internal("bad test call")))),
        }
    }
}

fn serve(config: ServerConfig) -> MemoryConnection {
    let server = Server::builder()
        .add_service(Streams)
        .unwrap()
        .config(config)
        .build();
    let (client, server_end) = memory::pair(1 << 20);
    tokio::spawn(async move { server.serve_connection(server_end).await });
    client
}

/// Opens a streaming call: `message` for a server-streaming one.
async fn open(
    conn: &MemoryConnection,
    call_id: u64,
    method: u32,
    message: Option<&[u8]>,
    credits: u32,
    timeout: Duration,
) {
    let mut header = Header::new(FrameKind::Request, call_id);
    header.method_id = method;
    header.credits = credits;
    header.timeout_us = timeout.as_micros() as u64;
    if let Some(message) = message {
        header.flags = Flags::END_STREAM;
        header.payload_len = message.len() as u32;
    }
    send_frame(conn, header, &Metadata::new(), |b| {
        if let Some(message) = message {
            b.put_slice(message);
        }
    })
    .await
    .unwrap();
}

async fn message(conn: &MemoryConnection, call_id: u64, payload: &[u8], flags: Flags) {
    let mut header = Header::new(FrameKind::Message, call_id);
    header.flags = flags;
    header.payload_len = payload.len() as u32;
    send_frame(conn, header, &Metadata::new(), |b| b.put_slice(payload))
        .await
        .unwrap();
}

async fn window(conn: &MemoryConnection, call_id: u64, credits: u32) {
    let mut header = Header::new(FrameKind::WindowUpdate, call_id);
    header.credits = credits;
    send_frame(conn, header, &Metadata::new(), |_| {})
        .await
        .unwrap();
}

/// The next frame within `wait`: `Ok(None)` once the server closed the connection,
/// `Err(())` if nothing came.
async fn next_within(
    conn: &MemoryConnection,
    wait: Duration,
) -> Result<Option<(Header, Bytes)>, ()> {
    let Ok(received) = tokio::time::timeout(wait, conn.recv()).await else {
        return Err(());
    };
    Ok(received.ok().flatten().map(|buf| {
        let frame = Frame::parse(&buf).unwrap();
        (frame.header, Bytes::copy_from_slice(frame.payload))
    }))
}

async fn next(conn: &MemoryConnection) -> Option<(Header, Bytes)> {
    next_within(conn, Duration::from_secs(10))
        .await
        .expect("the server answers within 10 s")
}

/// Whether the server closed the connection (after any frames it still had queued).
async fn closed(conn: &MemoryConnection) -> bool {
    loop {
        match next_within(conn, Duration::from_secs(10)).await {
            Ok(None) => return true,
            Ok(Some(_)) => continue,
            Err(()) => return false,
        }
    }
}

/// The two frames that start an Echo call, in either order: the grant of the request
/// stream's window and the response headers.
async fn started(conn: &MemoryConnection) {
    let mut kinds = [
        next(conn).await.unwrap().0.kind,
        next(conn).await.unwrap().0.kind,
    ];
    kinds.sort_by_key(|k| *k as u8);
    assert_eq!(kinds, [FrameKind::Response, FrameKind::WindowUpdate]);
}

#[tokio::test]
async fn the_server_sends_within_the_clients_window_and_waits_for_updates() {
    let conn = serve(ServerConfig::default());
    open(
        &conn,
        1,
        COUNT,
        Some(&100u32.to_le_bytes()),
        10_000,
        Duration::ZERO,
    )
    .await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.kind, h.flags),
        (FrameKind::Response, Flags::default()),
        "headers"
    );
    // 10,000 bytes of window: 10 frames of 1,043 (the 10th overdraws), then nothing.
    for _ in 0..10 {
        let (h, payload) = next(&conn).await.unwrap();
        assert_eq!(
            (h.kind, h.call_id, h.frame_len()),
            (FrameKind::Message, 1, 1043)
        );
        assert_eq!(payload.len(), 1003);
    }
    let more = next_within(&conn, Duration::from_millis(200)).await;
    assert!(more.is_err(), "sent past the window: {more:?}");
    // Back to 10,000 - 10,430 + 2 x 1,043 = 1,656: two more.
    window(&conn, 1, 2 * COUNT_FRAME).await;
    for _ in 0..2 {
        assert_eq!(next(&conn).await.unwrap().0.kind, FrameKind::Message);
    }
    assert!(next_within(&conn, Duration::from_millis(200))
        .await
        .is_err());
    // A large grant lets the rest through, then the final status.
    window(&conn, 1, 1 << 20).await;
    let mut messages = 12;
    let end = loop {
        let (h, _) = next(&conn).await.unwrap();
        if h.kind == FrameKind::Message {
            messages += 1;
        } else {
            break h;
        }
    };
    assert_eq!(messages, 100);
    assert_eq!(
        (end.kind, Code::from_u8(end.status)),
        (FrameKind::Response, Code::Ok)
    );
    assert!(end.flags.contains(Flags::END_STREAM));
}

#[tokio::test]
async fn the_deadline_covers_the_whole_stream_on_the_server() {
    let conn = serve(ServerConfig::default());
    // An endless stream that the client keeps reading, within a 300 ms deadline.
    open(
        &conn,
        3,
        COUNT,
        Some(&u32::MAX.to_le_bytes()),
        1 << 20,
        Duration::from_millis(300),
    )
    .await;
    let start = std::time::Instant::now();
    let mut messages = 0u64;
    let end = loop {
        let (h, _) = next(&conn).await.unwrap();
        match h.kind {
            FrameKind::Message => {
                messages += 1;
                if messages.is_multiple_of(100) {
                    window(&conn, 3, 100 * COUNT_FRAME).await;
                }
            }
            FrameKind::Response if h.flags.contains(Flags::END_STREAM) => break h,
            _ => {}
        }
    };
    assert_eq!(Code::from_u8(end.status), Code::DeadlineExceeded);
    assert!(
        messages > 100,
        "the stream ran until the deadline: {messages}"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_client_stream_gets_its_window_when_the_call_starts_and_its_sum() {
    let mut config = ServerConfig::default();
    config.stream_window(4096);
    let conn = serve(config);
    open(&conn, 5, SUM, None, 0, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.kind, h.call_id, h.credits),
        (FrameKind::WindowUpdate, 5, 4096)
    );
    for len in [100, 200, 300] {
        message(&conn, 5, &vec![1; len], Flags::default()).await;
    }
    message(&conn, 5, &[], Flags::END_STREAM).await;
    let (h, payload) = next(&conn).await.unwrap();
    assert_eq!(
        (h.kind, Code::from_u8(h.status)),
        (FrameKind::Response, Code::Ok)
    );
    assert_eq!(
        &payload[2..],
        &600u64.to_le_bytes()[..],
        "a bytes field: tag, length"
    );
}

#[tokio::test]
async fn a_call_waiting_for_a_permit_is_granted_nothing() {
    let mut config = ServerConfig::default();
    config.max_open_streams_per_connection(1);
    let conn = serve(config);
    open(&conn, 1, ECHO, None, 1 << 20, Duration::ZERO).await;
    started(&conn).await;
    // Call 2 waits for call 1's permit: no window; a message for it is a violation.
    open(&conn, 2, SUM, None, 0, Duration::ZERO).await;
    assert!(
        next_within(&conn, Duration::from_millis(200))
            .await
            .is_err(),
        "no grant"
    );
    message(&conn, 2, b"early", Flags::default()).await;
    assert!(
        closed(&conn).await,
        "a message without a window closes the connection"
    );
}

/// One hostile frame after a healthy start; returns whether the server closed the
/// connection (and checks a second connection to the same server is served).
async fn violation(bad: impl AsyncFnOnce(&MemoryConnection)) -> bool {
    let server = Server::builder().add_service(Streams).unwrap().build();
    let (conn, end) = memory::pair(1 << 20);
    let (other, other_end) = memory::pair(1 << 20);
    for end in [end, other_end] {
        let server = server.clone();
        tokio::spawn(async move { server.serve_connection(end).await });
    }
    open(&conn, 1, ECHO, None, 1 << 20, Duration::ZERO).await;
    started(&conn).await;
    bad(&conn).await;
    let closed = closed(&conn).await;
    open(&other, 1, SUM, None, 0, Duration::ZERO).await;
    assert_eq!(next(&other).await.unwrap().0.kind, FrameKind::WindowUpdate);
    message(&other, 1, &[], Flags::END_STREAM).await;
    let (h, _) = next(&other).await.unwrap();
    assert_eq!(
        Code::from_u8(h.status),
        Code::Ok,
        "the other connection is served"
    );
    closed
}

#[tokio::test]
async fn clients_breaking_the_stream_rules_lose_their_connection_only() {
    // Past the window (1 MiB granted; the echo handler reads until its answers fill our
    // window of 1 MiB, which we never read, and grants that much back: 5 MiB sent).
    assert!(
        violation(async |c| {
            for _ in 0..80 {
                message(c, 1, &vec![0; 64 << 10], Flags::default()).await;
            }
        })
        .await
    );
    // A half-close with a payload; a message after the half-close; two half-closes.
    assert!(violation(async |c| message(c, 1, b"x", Flags::END_STREAM).await).await);
    assert!(
        violation(async |c| {
            message(c, 1, &[], Flags::END_STREAM).await;
            message(c, 1, b"late", Flags::default()).await;
        })
        .await
    );
    // A window update taking the window past 2^31 - 1.
    assert!(violation(async |c| window(c, 1, MAX_STREAM_WINDOW as u32).await).await);
}

#[tokio::test]
async fn stray_stream_frames_and_malformed_openings_are_answered_not_fatal() {
    let conn = serve(ServerConfig::default());
    // Messages and window updates for streams that do not exist are dropped.
    message(&conn, 99, b"stray", Flags::default()).await;
    window(&conn, 98, 1000).await;
    // A client-streaming call opened with a message; a server-streaming one without
    // END_STREAM.
    let mut header = Header::new(FrameKind::Request, 1);
    header.method_id = SUM;
    header.payload_len = 3;
    send_frame(&conn, header, &Metadata::new(), |b| b.put_slice(b"abc"))
        .await
        .unwrap();
    let (h, why) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, Code::from_u8(h.status)),
        (1, Code::InvalidArgument),
        "{why:?}"
    );
    open(&conn, 2, COUNT, None, 0, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, Code::from_u8(h.status)),
        (2, Code::InvalidArgument)
    );
    send_control(&conn, FrameKind::Ping, 7).await.unwrap();
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.kind, h.call_id), (FrameKind::Pong, 7), "still open");
}

#[tokio::test]
async fn a_cancelled_stream_stops_sending() {
    let conn = serve(ServerConfig::default());
    open(
        &conn,
        1,
        COUNT,
        Some(&u32::MAX.to_le_bytes()),
        5 * COUNT_FRAME,
        Duration::ZERO,
    )
    .await;
    for _ in 0..6 {
        next(&conn).await.unwrap(); // headers and 5 messages
    }
    send_control(&conn, FrameKind::Cancel, 1).await.unwrap();
    window(&conn, 1, 1 << 20).await; // too late: the stream is gone
    let more = next_within(&conn, Duration::from_millis(300)).await;
    assert!(more.is_err(), "nothing after the cancel: {more:?}");
}

/// The window the server grants stream `call_id` within `wait`, skipping other frames
/// (0 if none came); a PING sent first must be answered meanwhile.
async fn grant_within(
    conn: &MemoryConnection,
    call_id: u64,
    ping: u64,
    wait: Duration,
) -> (u32, bool) {
    send_control(conn, FrameKind::Ping, ping).await.unwrap();
    let until = tokio::time::Instant::now() + wait;
    let (mut credits, mut pong) = (0, false);
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match next_within(conn, left).await {
            Ok(Some((h, _))) if h.kind == FrameKind::Pong && h.call_id == ping => {
                pong = true;
                if credits > 0 {
                    return (credits, pong);
                }
            }
            Ok(Some((h, _))) if h.kind == FrameKind::WindowUpdate && h.call_id == call_id => {
                credits += h.credits;
                if pong {
                    return (credits, pong);
                }
            }
            Ok(Some(_)) => continue,
            Ok(None) | Err(()) => return (credits, pong),
        }
    }
}

/// Two Echo streams on one connection whose request windows (4 KiB each) do not both
/// fit in the connection's budget: the second is granted nothing until the first ends,
/// while the server keeps reading the connection (its PINGs are answered, its CANCEL is
/// seen). With the default budget both are granted at once.
async fn second_stream_grant(budget: Option<usize>) -> [(u32, bool); 3] {
    let mut config = ServerConfig::default();
    config.stream_window(4096);
    if let Some(bytes) = budget {
        config.max_stream_bytes_per_connection(bytes);
    }
    let conn = serve(config);
    open(&conn, 10, ECHO, None, 1, Duration::from_secs(30)).await;
    let first = grant_within(&conn, 10, 100, Duration::from_secs(5)).await;
    open(&conn, 11, ECHO, None, 1, Duration::from_secs(30)).await;
    let waiting = grant_within(&conn, 11, 101, Duration::from_millis(300)).await;
    send_control(&conn, FrameKind::Cancel, 10).await.unwrap();
    let wait = if budget.is_some() { 5 } else { 1 };
    let after = grant_within(&conn, 11, 102, Duration::from_secs(wait)).await;
    [first, waiting, after]
}

#[tokio::test]
async fn request_windows_come_from_the_connections_budget_and_reading_never_stops() {
    let bounded = second_stream_grant(Some(6000)).await;
    assert_eq!(
        bounded,
        [(4096, true), (0, true), (4096, true)],
        "6,000 bytes for the connection's windows"
    );
    let control = second_stream_grant(None).await;
    assert_eq!(
        control[..2],
        [(4096, true), (4096, true)],
        "the default budget"
    );
}
