//! The server's bounds and failure handling, driven frame by frame over the in-memory
//! transport (the TCP suite in `examples/tests/hostile.rs` drives real processes).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::memory::{self, MemoryConnection};
use crate::outbound::{send_control, send_frame};
use crate::service::{BoxMessage, MethodDescriptor, Service, ServiceFuture};
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Code, Connection, Metadata, Request, Response, Server, ServerConfig, Status};

static METHODS: [MethodDescriptor; 4] = [
    MethodDescriptor::new("/t.T/Sleep"),
    MethodDescriptor::new("/t.T/PanicNow"),
    MethodDescriptor::new("/t.T/PanicLater"),
    MethodDescriptor::new("/t.T/Big"),
];
pub(super) const SLEEP: u32 = METHODS[0].id;
const PANIC_NOW: u32 = METHODS[1].id;
const PANIC_LATER: u32 = METHODS[2].id;
pub(super) const BIG: u32 = METHODS[3].id;

/// Sleep(ms), PanicNow, PanicLater, Big(len): the argument is a u32 LE payload.
#[derive(Default)]
pub(super) struct TestService {
    started: Arc<AtomicUsize>,
}

fn ok(message: Vec<u8>) -> Result<Response<BoxMessage>, Status> {
    Ok(Response::new(Box::new(message) as BoxMessage))
}

impl Service for TestService {
    fn name(&self) -> &'static str {
        "t.T"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        &METHODS
    }
    fn call(&self, index: usize, request: Request<crate::Payload<'_>>) -> ServiceFuture {
        let payload = request.into_inner();
        // The argument: the payload's first 4 bytes (the rest only makes the request
        // larger).
        let arg = payload
            .as_slice()
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes);
        let started = self.started.clone();
        Box::pin(async move {
            started.fetch_add(1, Ordering::SeqCst);
            match index {
                0 => {
                    if arg > 0 {
                        tokio::time::sleep(Duration::from_millis(arg.into())).await;
                    }
                    ok(arg.to_le_bytes().to_vec())
                }
                1 => panic!("handler panics on its first poll"),
                2 => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    panic!("handler panics after an await")
                }
                _ => ok(vec![7; arg as usize]),
            }
        })
    }
}

/// A server over one side of a fresh in-memory pair; returns the client side.
fn serve(config: ServerConfig, service: TestService) -> (Server, MemoryConnection) {
    let server = Server::builder()
        .add_service(service)
        .unwrap()
        .config(config)
        .build();
    let (client, server_end) = memory::pair(1 << 20);
    let s = server.clone();
    tokio::spawn(async move { s.serve_connection(server_end).await });
    (server, client)
}

pub(super) async fn request(
    conn: &MemoryConnection,
    call_id: u64,
    method: u32,
    arg: u32,
    timeout: Duration,
) {
    let mut header = Header::new(FrameKind::Request, call_id);
    header.flags = Flags::END_STREAM;
    header.method_id = method;
    header.timeout_us = timeout.as_micros() as u64;
    header.payload_len = 4;
    send_frame(conn, header, &Metadata::new(), |b| {
        bytes::BufMut::put_slice(b, &arg.to_le_bytes())
    })
    .await
    .unwrap();
}

/// The next frame, or None once the server closed the connection.
pub(super) async fn next(conn: &MemoryConnection) -> Option<(Header, Bytes)> {
    let buf = tokio::time::timeout(Duration::from_secs(10), conn.recv())
        .await
        .expect("the server answers within 10 s")
        .ok()??;
    let frame = Frame::parse(&buf).unwrap();
    let payload = Bytes::copy_from_slice(frame.payload);
    Some((frame.header, payload))
}

pub(super) fn code(header: &Header) -> Code {
    Code::from_u8(header.status)
}

#[tokio::test]
async fn a_panicking_handler_fails_its_own_call_only() {
    let (_server, conn) = serve(ServerConfig::default(), TestService::default());
    request(&conn, 1, PANIC_NOW, 0, Duration::ZERO).await;
    let (h, msg) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (1, Code::Internal), "{msg:?}");
    request(&conn, 2, PANIC_LATER, 0, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (2, Code::Internal));
    request(&conn, 3, SLEEP, 0, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (3, Code::Ok));
}

#[tokio::test]
async fn a_duplicate_call_id_closes_the_connection() {
    let (_server, conn) = serve(ServerConfig::default(), TestService::default());
    request(&conn, 9, SLEEP, 5_000, Duration::ZERO).await;
    request(&conn, 9, SLEEP, 0, Duration::ZERO).await;
    assert!(
        next(&conn).await.is_none(),
        "closed without answering either call"
    );
}

#[tokio::test]
async fn a_response_over_the_limit_is_answered_with_resource_exhausted() {
    let mut config = ServerConfig::default();
    config.max_message_size(1000);
    let (_server, conn) = serve(config, TestService::default());
    request(&conn, 1, BIG, 2000, Duration::ZERO).await;
    let (h, msg) = next(&conn).await.unwrap();
    assert_eq!(code(&h), Code::ResourceExhausted);
    assert!(std::str::from_utf8(&msg)
        .unwrap()
        .contains("response message of 2003 bytes"));
    request(&conn, 2, BIG, 900, Duration::ZERO).await;
    let (h, msg) = next(&conn).await.unwrap();
    assert_eq!((code(&h), msg.len()), (Code::Ok, 903));
}

#[tokio::test]
async fn a_response_larger_than_its_request_is_charged_and_refused_beyond_the_account() {
    let mut config = ServerConfig::default();
    config.max_held_bytes_per_connection(64 << 10);
    let (_server, conn) = serve(config, TestService::default());
    // A response larger than the whole account fits one that holds nothing else.
    request(&conn, 1, BIG, 100 << 10, Duration::ZERO).await;
    let (h, msg) = next(&conn).await.unwrap();
    assert_eq!((code(&h), msg.len()), (Code::Ok, (100 << 10) + 4));
    // A running call holds a request of 40 KiB for a second: a 40 KiB response (of a
    // 4-byte request) does not fit what is left, and is refused, not held.
    let mut header = Header::new(FrameKind::Request, 2);
    header.flags = Flags::END_STREAM;
    header.method_id = SLEEP;
    header.payload_len = 40 << 10;
    send_frame(&conn, header, &Metadata::new(), |b| {
        bytes::BufMut::put_slice(b, &1000u32.to_le_bytes());
        bytes::BufMut::put_bytes(b, 0, (40 << 10) - 4);
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    request(&conn, 3, BIG, 40 << 10, Duration::ZERO).await;
    let (h, msg) = next(&conn).await.unwrap();
    let msg = std::str::from_utf8(&msg).unwrap();
    assert_eq!((h.call_id, code(&h)), (3, Code::ResourceExhausted), "{msg}");
    assert!(msg.contains("a response of"), "{msg}");
    // One within what is left is answered.
    request(&conn, 4, BIG, 16 << 10, Duration::ZERO).await;
    let (h, msg) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, code(&h), msg.len()),
        (4, Code::Ok, (16 << 10) + 4)
    );
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (2, Code::Ok));
}

#[tokio::test]
async fn calls_beyond_the_connection_limit_wait_while_control_frames_are_read() {
    let mut config = ServerConfig::default();
    config
        .max_concurrent_calls(4)
        .max_concurrent_calls_per_connection(2)
        .max_queued_calls_per_connection(3);
    let service = TestService::default();
    let started = service.started.clone();
    let server = Server::builder()
        .add_service(service)
        .unwrap()
        .config(config)
        .build();
    let (a, a_server) = memory::pair(1 << 20);
    let (b, b_server) = memory::pair(1 << 20);
    for end in [a_server, b_server] {
        let s = server.clone();
        tokio::spawn(async move { s.serve_connection(end).await });
    }
    // Connection A: 2 calls run, 3 wait, the 6th is refused at once.
    for id in 1..=6 {
        request(&a, id, SLEEP, 400, Duration::ZERO).await;
    }
    let (h, _) = next(&a).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (6, Code::ResourceExhausted));
    assert!(h.flags.contains(Flags::REFUSED));
    // A's reader still reads: a cancel of a waiting call and a ping are handled while
    // its calls sleep.
    send_control(&a, FrameKind::Cancel, 3).await.unwrap();
    send_control(&a, FrameKind::Ping, 77).await.unwrap();
    let (h, _) = next(&a).await.unwrap();
    assert_eq!((h.kind, h.call_id), (FrameKind::Pong, 77));
    // Connection B is served meanwhile (the server has permits left).
    request(&b, 1, SLEEP, 0, Duration::ZERO).await;
    let (h, _) = next(&b).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (1, Code::Ok));
    // A's calls 1, 2, 4, 5 complete; 3 was cancelled before it started.
    let mut answered = Vec::new();
    for _ in 0..4 {
        let (h, _) = next(&a).await.unwrap();
        assert_eq!(code(&h), Code::Ok);
        answered.push(h.call_id);
    }
    answered.sort_unstable();
    assert_eq!(answered, [1, 2, 4, 5]);
    assert_eq!(started.load(Ordering::SeqCst), 5, "4 on A, 1 on B");
}

#[tokio::test]
async fn a_waiting_call_times_out_from_its_arrival() {
    let mut config = ServerConfig::default();
    config.max_concurrent_calls_per_connection(1);
    let (_server, conn) = serve(config, TestService::default());
    request(&conn, 1, SLEEP, 1_000, Duration::ZERO).await;
    request(&conn, 2, SLEEP, 0, Duration::from_millis(100)).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, code(&h)),
        (2, Code::DeadlineExceeded),
        "answered before call 1 frees the permit"
    );
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (1, Code::Ok));
}

/// A connection established but not yet taken by the server when its shutdown starts is
/// served draining, not dropped with its request unread: its request is answered (run, or
/// refused as not started: safe to send elsewhere). Which of the two depends on whether
/// the server's loop takes the connection or the signal first, so each round does both.
#[tokio::test]
async fn a_connection_queued_at_shutdown_is_answered_not_dropped() {
    for round in 0..20 {
        let server = Server::builder()
            .add_service(TestService::default())
            .unwrap()
            .build();
        let (listener, connector) = memory::listener(1 << 20);
        let conn = connector.connect().await.unwrap();
        request(&conn, 1, SLEEP, 0, Duration::ZERO).await;
        // The signal is already complete: the listener still holds the connection.
        let serving = tokio::spawn(async move {
            server
                .serve_with_shutdown(listener, std::future::ready(()))
                .await
        });
        let mut answered = None;
        while let Some((h, _)) = next(&conn).await {
            match h.kind {
                FrameKind::GoAway => send_control(&conn, FrameKind::GoAway, 0).await.unwrap(),
                FrameKind::Response => {
                    answered = Some((code(&h), h.flags.contains(Flags::REFUSED)))
                }
                _ => {}
            }
        }
        assert!(
            matches!(
                answered,
                Some((Code::Ok, false) | (Code::Unavailable, true))
            ),
            "round {round}: the request got {answered:?}"
        );
        serving.await.unwrap().unwrap();
        assert!(
            connector.connect().await.is_err(),
            "no connection after the stop"
        );
    }
}

#[tokio::test]
async fn a_draining_server_refuses_new_calls_and_finishes_running_ones() {
    let (server, conn) = serve(ServerConfig::default(), TestService::default());
    request(&conn, 1, SLEEP, 300, Duration::ZERO).await;
    tokio::task::yield_now().await;
    server.shutdown();
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(h.kind, FrameKind::GoAway);
    request(&conn, 2, SLEEP, 0, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (2, Code::Unavailable));
    assert!(h.flags.contains(Flags::REFUSED), "safe to send elsewhere");
    // The acknowledgement: this client sends no more requests here.
    send_control(&conn, FrameKind::GoAway, 0).await.unwrap();
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, code(&h)),
        (1, Code::Ok),
        "the running call finishes"
    );
    assert!(next(&conn).await.is_none(), "then the server closes");
}

#[tokio::test]
async fn an_old_connection_says_goaway_lets_its_grace_run_then_closes() {
    let mut config = ServerConfig::default();
    config.max_connection_age(
        Some(Duration::from_millis(300)),
        Some(Duration::from_millis(400)),
    );
    let (_server, conn) = serve(config, TestService::default());
    let opened = std::time::Instant::now();
    request(&conn, 1, SLEEP, 100, Duration::ZERO).await;
    request(&conn, 3, SLEEP, 10_000, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (1, Code::Ok), "served while young");
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(h.kind, FrameKind::GoAway);
    let aged = opened.elapsed();
    assert!(aged >= Duration::from_millis(270), "GOAWAY after {aged:?}");
    // A call that crossed the GOAWAY is refused, so the client may send it elsewhere.
    request(&conn, 5, SLEEP, 0, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!((h.call_id, code(&h)), (5, Code::Unavailable));
    assert!(h.flags.contains(Flags::REFUSED));
    // The long call does not finish within the grace: the connection closes under it.
    assert!(next(&conn).await.is_none(), "closed, call 3 unanswered");
    let closed = opened.elapsed();
    assert!(
        closed >= aged + Duration::from_millis(350),
        "closed {:?} after the GOAWAY",
        closed - aged
    );
}

#[tokio::test]
async fn without_a_grace_an_old_connections_calls_finish() {
    let mut config = ServerConfig::default();
    config.max_connection_age(Some(Duration::from_millis(100)), None);
    let (_server, conn) = serve(config, TestService::default());
    request(&conn, 1, SLEEP, 600, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(h.kind, FrameKind::GoAway);
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, code(&h)),
        (1, Code::Ok),
        "finished after the GOAWAY"
    );
    send_control(&conn, FrameKind::GoAway, 0).await.unwrap();
    assert!(next(&conn).await.is_none(), "closed once acknowledged");
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    let mut config = ServerConfig::default();
    config.max_connection_idle(Some(Duration::from_millis(200)));
    let (_server, conn) = serve(config, TestService::default());
    let opened = std::time::Instant::now();
    // Busy for 700 ms, three and a half idle periods, with one call running.
    request(&conn, 1, SLEEP, 700, Duration::ZERO).await;
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(
        (h.call_id, code(&h)),
        (1, Code::Ok),
        "not closed while busy"
    );
    let ended = opened.elapsed();
    // Pings are not calls: the connection goes idle all the same.
    send_control(&conn, FrameKind::Ping, 1).await.unwrap();
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(h.kind, FrameKind::Pong);
    let (h, _) = next(&conn).await.unwrap();
    assert_eq!(h.kind, FrameKind::GoAway);
    let idle = opened.elapsed() - ended;
    assert!(
        idle >= Duration::from_millis(180) && idle < Duration::from_millis(5_000),
        "GOAWAY {idle:?} after the last call ended"
    );
    send_control(&conn, FrameKind::GoAway, 0).await.unwrap();
    assert!(next(&conn).await.is_none());
}
