//! Channel behaviour against servers that hang, and across a graceful shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::memory::{self, MemoryConnection};
use crate::outbound::{send_control, send_frame};
use crate::service::{BoxMessage, MethodDescriptor, Service, ServiceFuture};
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Channel, ClientConfig, Code, Connection, Metadata, Request, Response, Server};

pub(super) static SLEEP: MethodDescriptor = MethodDescriptor::new("/t.T/Sleep");

/// Sleeps for the request's `u32` value in ms (a `UInt32Value`), then echoes it, and
/// counts its calls.
#[derive(Default, Clone)]
pub(super) struct Sleeper {
    calls: Arc<AtomicUsize>,
}

impl Service for Sleeper {
    fn name(&self) -> &'static str {
        "t.T"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        std::slice::from_ref(&SLEEP)
    }
    fn call(&self, _: usize, request: Request<crate::Payload<'_>>) -> ServiceFuture {
        let ms: u32 = request.into_inner().decode().unwrap_or(0);
        let calls = self.calls.clone();
        Box::pin(async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms.into())).await;
            Ok(Response::new(Box::new(ms) as BoxMessage))
        })
    }
}

async fn sleep_call(channel: &Channel<MemoryConnection>, ms: u32) -> Result<u32, crate::Status> {
    channel
        .unary::<u32, u32>(Request::new(ms), &SLEEP)
        .await
        .map(Response::into_inner)
}

fn keepalive(interval_ms: u64, timeout_ms: u64) -> ClientConfig {
    let mut config = ClientConfig::default();
    config.keepalive(
        Some(Duration::from_millis(interval_ms)),
        Duration::from_millis(timeout_ms),
    );
    config
}

#[tokio::test]
async fn a_silent_server_fails_calls_after_an_unanswered_ping() {
    let (client, _hung) = memory::pair(1 << 20);
    let channel = Channel::with_config(client, keepalive(100, 200));
    let started = std::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(10), sleep_call(&channel, 0))
        .await
        .expect("keepalive ends the call")
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("ping"), "{}", status.message());
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "not before interval + timeout"
    );
}

#[tokio::test]
async fn a_slow_server_that_answers_pings_keeps_its_calls() {
    let (client, server_end) = memory::pair(1 << 20);
    let channel = Channel::with_config(client, keepalive(50, 100));
    // A hand-written server: answers pings, and the call after 600 ms.
    tokio::spawn(async move {
        let mut call = None;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(600);
        loop {
            let buf = tokio::select! {
                buf = server_end.recv() => buf.unwrap().unwrap(),
                () = tokio::time::sleep_until(deadline), if call.is_some() => break,
            };
            let header = Frame::parse(&buf).unwrap().header;
            match header.kind {
                FrameKind::Ping => send_control(&server_end, FrameKind::Pong, header.call_id)
                    .await
                    .unwrap(),
                FrameKind::Request => call = Some(header.call_id),
                _ => {}
            }
        }
        let mut header = Header::new(FrameKind::Response, call.unwrap());
        header.flags = Flags::END_STREAM;
        send_frame(&server_end, header, &Metadata::new(), |_| {})
            .await
            .unwrap();
        // Keep the connection open until the client is done.
        let _ = server_end.recv().await;
    });
    assert_eq!(sleep_call(&channel, 0).await.unwrap(), 0);
}

#[tokio::test]
async fn after_goaway_calls_move_to_a_new_connection_and_none_is_lost() {
    let old_service = Sleeper::default();
    let old_calls = old_service.calls.clone();
    let old = Server::builder().add_service(old_service).unwrap().build();
    let fresh_service = Sleeper::default();
    let fresh_calls = fresh_service.calls.clone();
    let fresh = Server::builder()
        .add_service(fresh_service)
        .unwrap()
        .build();
    let (old_listener, old_connector) = memory::listener(1 << 20);
    let (fresh_listener, fresh_connector) = memory::listener(1 << 20);
    let (stop_old, stopped) = tokio::sync::oneshot::channel::<()>();
    let old_serving = tokio::spawn(async move {
        old.serve_with_shutdown(old_listener, async {
            let _ = stopped.await;
        })
        .await
    });
    tokio::spawn(async move { fresh.serve(fresh_listener).await });
    let dials = Arc::new(AtomicUsize::new(0));
    let channel = Channel::with_reconnect(ClientConfig::default(), move || {
        let n = dials.fetch_add(1, Ordering::SeqCst);
        let connector = if n == 0 {
            old_connector.clone()
        } else {
            fresh_connector.clone()
        };
        async move { connector.connect().await }
    })
    .await
    .unwrap();

    // Calls in flight when the old server starts draining, and more started during it.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..50u32 {
        let channel = channel.clone();
        calls.spawn(async move { sleep_call(&channel, 200 + i).await });
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop_old.send(()).unwrap();
    for i in 0..50u32 {
        let channel = channel.clone();
        calls.spawn(async move { sleep_call(&channel, i % 5).await });
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut ok = 0;
    while let Some(result) = calls.join_next().await {
        result
            .unwrap()
            .expect("no call fails across a graceful shutdown");
        ok += 1;
    }
    assert_eq!(ok, 100);
    let (old_calls, fresh_calls) = (
        old_calls.load(Ordering::SeqCst),
        fresh_calls.load(Ordering::SeqCst),
    );
    assert!(fresh_calls > 0, "later calls went to the new server");
    assert_eq!(
        old_calls + fresh_calls,
        100,
        "refused calls never ran twice"
    );
    old_serving.await.unwrap().unwrap();
}

/// A lazy channel dials on its first call, not before; a dial slower than the calls'
/// deadlines is not abandoned with them (it runs on its own task), so the channel
/// connects and later calls succeed; concurrent first calls share one dial.
#[tokio::test]
async fn a_lazy_channel_dials_once_on_first_use_even_when_calls_time_out_first() {
    let server = Server::builder()
        .add_service(Sleeper::default())
        .unwrap()
        .build();
    let (listener, connector) = memory::listener(1 << 20);
    tokio::spawn(async move { server.serve(listener).await });
    let dials = Arc::new(AtomicUsize::new(0));
    let counted = dials.clone();
    let channel = Channel::lazy(ClientConfig::default(), move || {
        counted.fetch_add(1, Ordering::SeqCst);
        let connector = connector.clone();
        async move {
            // A slow handshake.
            tokio::time::sleep(Duration::from_millis(300)).await;
            connector.connect().await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        dials.load(Ordering::SeqCst),
        0,
        "nothing dialled before a call"
    );
    assert!(channel.connection().is_none() && !channel.is_closed());
    assert_eq!(channel.peer(), "not connected");

    // Ten calls at once, each with a deadline shorter than the dial.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let channel = channel.clone();
        calls.spawn(async move {
            let mut request = Request::new(1u32);
            request.set_timeout(Duration::from_millis(50));
            tokio::time::timeout(
                Duration::from_millis(50),
                channel.unary::<u32, u32>(request, &SLEEP),
            )
            .await
        });
    }
    while let Some(result) = calls.join_next().await {
        // Each ends by its deadline (DEADLINE_EXCEEDED) or by the timeout around it.
        let ended = result.unwrap();
        assert!(
            !matches!(ended, Ok(Ok(_))),
            "no call can finish before the dial"
        );
    }
    // The dial went on without them.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        channel.connection().is_some(),
        "the abandoned dial connected"
    );
    assert_eq!(sleep_call(&channel, 3).await.unwrap(), 3);
    assert_eq!(
        dials.load(Ordering::SeqCst),
        1,
        "one dial for every first call"
    );
}

static TOLD: MethodDescriptor = MethodDescriptor::new("/t.T/Told");

/// Answers with the timeout the server was told, in ms (0 for none).
struct Told;

impl Service for Told {
    fn name(&self) -> &'static str {
        "t.T"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        std::slice::from_ref(&TOLD)
    }
    fn call(&self, _: usize, request: Request<crate::Payload<'_>>) -> ServiceFuture {
        let told = request.timeout().map_or(0, |t| t.as_millis() as u32);
        Box::pin(async move { Ok(Response::new(Box::new(told) as BoxMessage)) })
    }
}

/// A call that waited in a client layer tells the server the time it has left, not its
/// whole timeout: behind a layer that holds each call 300 ms, a call of 1 s tells at most
/// 700 ms (without a layer, the whole second, less the memory transport's microseconds).
#[tokio::test]
async fn the_server_is_told_the_time_left_after_the_client_layers() {
    use tower::ServiceExt;
    let server = Server::builder().add_service(Told).unwrap().build();
    let (client, served) = memory::pair(1 << 20);
    tokio::spawn(async move { server.serve_connection(served).await });
    let channel = Channel::new(client);
    let told = |channel: Channel<MemoryConnection>| async move {
        let mut request = Request::new(0u32);
        request.set_timeout(Duration::from_secs(1));
        channel
            .unary::<u32, u32>(request, &TOLD)
            .await
            .unwrap()
            .into_inner()
    };
    let plain = told(channel.clone()).await;
    assert!((500..=1000).contains(&plain), "told {plain} ms");
    let slow = channel.layer(tower::layer::layer_fn(
        |inner: crate::layer::ClientStack| {
            tower::service_fn(move |request| {
                let inner = inner.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    inner.oneshot(request).await
                }
            })
        },
    ));
    let layered = told(slow).await;
    assert!((1..=700).contains(&layered), "told {layered} ms");
}
