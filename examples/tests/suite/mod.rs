//! The end-to-end suite, generic over the transport: every test runs over TCP on
//! 127.0.0.1 and over the in-memory transport (and, in the RDMA crate, over verbs).

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use examples::echo::echo_client::EchoClient;
use examples::echo::echo_server::{Echo, EchoServer};
use examples::echo::{EchoReply, EchoRequest};
use examples::kv::kv_client::KvClient;
use examples::kv::kv_server::KvServer;
use examples::kv::{GetRequest, PutRequest, ScanRequest};
use examples::KvStore;
use rdmarpc_core::codegen::MethodDescriptor;
use rdmarpc_core::{
    Channel, Code, Connection, Request, Response, Server, ServerConfig, Status, Streaming,
};
use tokio::sync::mpsc;

mod streams;
pub use streams::*;

/// Starts servers and connects channels over one transport.
pub trait Harness: Send + Sync + 'static {
    type Conn: Connection;
    /// Starts `server` on a fresh listener; returns what `connect` needs.
    fn start(&self, server: Server) -> impl Future<Output = String> + Send;
    /// A channel to the server at `addr` (client limit `max_message_size`).
    fn connect(
        &self,
        addr: &str,
        max_message_size: usize,
    ) -> impl Future<Output = Channel<Self::Conn>> + Send;
}

pub const BIG: usize = 64 << 20;

/// An echo service that counts handlers running, records the largest concurrency seen,
/// echoes metadata, and reports when a handler's future is dropped before finishing.
#[derive(Clone, Default)]
pub struct Probe {
    pub running: Arc<AtomicUsize>,
    pub peak: Arc<AtomicUsize>,
    pub dropped: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

struct DropSignal {
    tag: Vec<u8>,
    finished: bool,
    running: Arc<AtomicUsize>,
    tx: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        if !self.finished {
            if let Some(tx) = &self.tx {
                let _ = tx.send(self.tag.clone());
            }
        }
    }
}

impl Echo for Probe {
    type RepeatStream = rdmarpc_core::BoxStream<EchoReply>;
    type ChatStream = rdmarpc_core::BoxStream<EchoReply>;

    async fn repeat(
        &self,
        request: Request<examples::echo::RepeatRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        Ok(Response::new(examples::repeat(request.into_inner())))
    }

    async fn chat(
        &self,
        request: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        Ok(Response::new(examples::echo_each(request.into_inner())))
    }

    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let (metadata, message, _) = request.into_parts();
        let mut guard = DropSignal {
            tag: message.payload.to_vec(),
            finished: false,
            running: self.running.clone(),
            tx: self.dropped.clone(),
        };
        if message.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(message.delay_ms.into())).await;
        }
        guard.finished = true;
        if metadata.get("fail") == Some("not-found") {
            return Err(Status::not_found("asked to fail"));
        }
        let mut response = Response::new(EchoReply {
            payload: message.payload,
        });
        for (k, v) in metadata.iter() {
            response.metadata_mut().append(format!("echo-{k}"), v);
        }
        Ok(response)
    }
}

pub fn server_with(probe: Probe, config: ServerConfig) -> Server {
    Server::builder()
        .add_service(EchoServer::new(probe))
        .unwrap()
        .add_service(KvServer::new(KvStore::default()))
        .unwrap()
        .config(config)
        .build()
}

pub fn big_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.max_message_size(BIG);
    config
}

fn payload(i: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7) ^ (j >> 8)) as u8)
        .collect()
}

pub async fn thousand_concurrent_calls_on_one_connection<H: Harness>(h: H) {
    let addr = h.start(server_with(Probe::default(), big_config())).await;
    let client = EchoClient::new(h.connect(&addr, BIG).await);
    let calls = (0..1000).map(|i| {
        let client = client.clone();
        tokio::spawn(async move {
            let sent = payload(i, 16 + i % 300);
            let reply = client
                .echo(EchoRequest {
                    payload: sent.clone().into(),
                    delay_ms: (i % 5) as u32,
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(reply.into_inner().payload, sent, "reply of call {i}");
        })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.unwrap();
    }
}

pub async fn large_value_put_then_get<H: Harness>(h: H, size: usize) {
    let addr = h.start(server_with(Probe::default(), big_config())).await;
    let client = KvClient::new(h.connect(&addr, BIG).await);
    let value = payload(7, size);
    client
        .put(PutRequest {
            key: "big".into(),
            value: value.clone().into(),
        })
        .await
        .unwrap();
    let got = client
        .get(GetRequest { key: "big".into() })
        .await
        .unwrap()
        .into_inner()
        .value;
    assert!(
        got == value,
        "value differs after a round trip of {size} bytes"
    );
    let missing = client
        .get(GetRequest { key: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let scan = client
        .scan(ScanRequest {
            prefix: "b".into(),
            limit: 0,
            keys_only: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(scan.entries.len(), 1);
}

pub async fn deadline_fails_one_call_not_the_others<H: Harness>(h: H) {
    let addr = h.start(server_with(Probe::default(), big_config())).await;
    let client = EchoClient::new(h.connect(&addr, BIG).await);
    let mut slow = Request::new(EchoRequest {
        payload: b"slow".to_vec().into(),
        delay_ms: 5_000,
        ..Default::default()
    });
    slow.set_timeout(Duration::from_millis(200));
    let slow = tokio::spawn({
        let client = client.clone();
        async move { client.echo(slow).await }
    });
    let fast: Vec<_> = (0..20)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let sent = payload(i, 100);
                let reply = client
                    .echo(EchoRequest {
                        payload: sent.clone().into(),
                        delay_ms: 10,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                assert_eq!(reply.into_inner().payload, sent);
            })
        })
        .collect();
    let status = slow.await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    for f in fast {
        f.await.unwrap();
    }
    // The connection is still good after the expired call.
    let reply = client
        .echo(EchoRequest {
            payload: b"after".to_vec().into(),
            delay_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload, &b"after"[..]);
}

pub async fn dropping_the_call_cancels_the_handler<H: Harness>(h: H) {
    let (tx, mut dropped) = mpsc::unbounded_channel();
    let probe = Probe {
        dropped: Some(tx),
        ..Probe::default()
    };
    let running = probe.running.clone();
    let addr = h.start(server_with(probe, big_config())).await;
    let client = EchoClient::new(h.connect(&addr, BIG).await);
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .echo(EchoRequest {
                    payload: b"cancel-me".to_vec().into(),
                    delay_ms: 60_000,
                    ..Default::default()
                })
                .await
        }
    });
    // Wait until the handler runs, then drop the caller's future.
    tokio::time::timeout(Duration::from_secs(10), async {
        while running.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("handler never started");
    call.abort();
    let tag = tokio::time::timeout(Duration::from_secs(10), dropped.recv())
        .await
        .expect("the server did not drop the handler of a cancelled call")
        .unwrap();
    assert_eq!(tag, b"cancel-me");
    assert_eq!(running.load(Ordering::SeqCst), 0);
}

static UNKNOWN: MethodDescriptor = MethodDescriptor::new("/echo.Echo/NoSuchMethod");

/// Encodes as field 1 with wire type varint, which EchoRequest (bytes field 1) rejects.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NotAnEchoRequest {
    #[prost(uint64, tag = "1")]
    pub number: u64,
}

pub async fn bad_requests_get_their_status<H: Harness>(h: H) {
    let mut config = ServerConfig::default();
    config.max_message_size(1 << 20);
    let addr = h.start(server_with(Probe::default(), config)).await;
    // The client allows more than the server, so the server's limit is what answers.
    let channel = h.connect(&addr, BIG).await;
    let client = EchoClient::new(channel.clone());

    let status = channel
        .unary::<_, EchoReply>(Request::new(EchoRequest::default()), &UNKNOWN)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status}");

    let oversized = EchoRequest {
        payload: vec![1; (1 << 20) + 1].into(),
        delay_ms: 0,
        ..Default::default()
    };
    let status = client.echo(oversized).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");

    let garbage = NotAnEchoRequest { number: 42 };
    let status = channel
        .unary::<_, EchoReply>(
            Request::new(garbage),
            &examples::echo::echo_methods::METHODS[0],
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status}");

    let mut failing = Request::new(EchoRequest {
        payload: b"x".to_vec().into(),
        delay_ms: 0,
        ..Default::default()
    });
    failing.metadata_mut().insert("fail", "not-found");
    assert_eq!(
        client.echo(failing).await.unwrap_err().code(),
        Code::NotFound
    );

    // The connection survived all of it, and metadata travels both ways.
    let mut request = Request::new(EchoRequest {
        payload: b"fine".to_vec().into(),
        delay_ms: 0,
        ..Default::default()
    });
    request.metadata_mut().insert("trace-id", "abc123");
    let reply = client.echo(request).await.unwrap();
    assert_eq!(reply.metadata().get("echo-trace-id"), Some("abc123"));
    assert_eq!(reply.into_inner().payload, &b"fine"[..]);

    // A client-side limit fails locally.
    let small = EchoClient::new(h.connect(&addr, 1000).await);
    let status = small
        .echo(EchoRequest {
            payload: vec![0; 2000].into(),
            delay_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
}

pub async fn concurrency_limit_is_respected<H: Harness>(h: H) {
    let probe = Probe::default();
    let peak = probe.peak.clone();
    let mut config = big_config();
    config.max_concurrent_calls(3);
    let addr = h.start(server_with(probe, config)).await;
    let client = EchoClient::new(h.connect(&addr, BIG).await);
    let calls: Vec<_> = (0..12)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .echo(EchoRequest {
                        payload: vec![i as u8].into(),
                        delay_ms: 30,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    for c in calls {
        c.await.unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=3).contains(&peak),
        "peak concurrency {peak} with a limit of 3"
    );
}

/// An `echo.Echo` service written against the runtime's `Service` trait, so that it sees
/// the request's payload as the transport handed it: it checks that a large request was
/// kept (its `bytes` field decoded as a slice of the frame), keeps every request's
/// payload, and answers with it (sent by gathered write where the transport has one).
#[derive(Clone, Default)]
pub struct Keeper {
    /// Request payloads held by the service, in arrival order.
    pub held: Arc<parking_lot::Mutex<Vec<bytes::Bytes>>>,
    /// Requests whose payload was not kept, or whose field was not a slice of it.
    pub copied: Arc<AtomicUsize>,
}

impl rdmarpc_core::codegen::NamedService for Keeper {
    const NAME: &'static str = "echo.Echo";
}

impl rdmarpc_core::codegen::Service for Keeper {
    fn name(&self) -> &'static str {
        "echo.Echo"
    }

    fn methods(&self) -> &'static [MethodDescriptor] {
        &examples::echo::echo_methods::METHODS
    }

    fn call(
        &self,
        _: usize,
        request: Request<rdmarpc_core::Payload<'_>>,
    ) -> rdmarpc_core::codegen::ServiceFuture {
        let payload = request.into_inner();
        let shared = match &payload {
            rdmarpc_core::Payload::Shared(frame) => Some(frame.as_ptr_range()),
            rdmarpc_core::Payload::Borrowed(_) => None,
        };
        let message: EchoRequest = match payload.decode() {
            Ok(m) => m,
            Err(e) => {
                let status = Status::invalid_argument(e.to_string());
                return Box::pin(std::future::ready(Err(status)));
            }
        };
        let inside = shared.is_some_and(|frame| {
            let field = message.payload.as_ptr_range();
            frame.start <= field.start && field.end <= frame.end
        });
        if !inside {
            self.copied.fetch_add(1, Ordering::SeqCst);
        }
        self.held.lock().push(message.payload.clone());
        let reply = EchoReply {
            payload: message.payload,
        };
        Box::pin(std::future::ready(Ok(Response::new(
            Box::new(rdmarpc_core::codegen::Gathered(reply)) as rdmarpc_core::codegen::BoxMessage,
        ))))
    }
}

/// Large requests and replies are not copied above the transport: the server's decoded
/// field is a slice of the received frame, and so is the client's; both sides hold what
/// they received across later calls (which would reuse the memory were it released) and
/// find it intact; and dropping it all releases it (the calls after still work). With
/// `kept` false (a payload under the transport's size for keeping) the fields are copies
/// instead, and everything else holds the same.
pub async fn large_payloads_are_slices_of_the_frames_and_stay_valid_while_held<H: Harness>(
    h: H,
    size: usize,
    calls: usize,
    kept: bool,
) -> Channel<H::Conn> {
    let keeper = Keeper::default();
    let server = Server::builder()
        .add_service(keeper.clone())
        .unwrap()
        .config(big_config())
        .build();
    let addr = h.start(server).await;
    let channel = h.connect(&addr, BIG).await;
    let method = &examples::echo::echo_methods::METHODS[0];
    let mut held = Vec::new();
    for i in 0..calls {
        let sent = bytes::Bytes::from(payload(i, size));
        let request = Request::new(EchoRequest {
            payload: sent.clone(),
            ..Default::default()
        });
        let mut slice = false;
        let reply: EchoReply = channel
            .unary_gathered_with(request, method, |payload| {
                let frame = payload.as_slice().as_ptr_range();
                let reply: EchoReply = payload.decode()?;
                let field = reply.payload.as_ptr_range();
                slice = frame.start <= field.start && field.end <= frame.end;
                Ok(reply)
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            slice, kept,
            "call {i}: is the reply's field a slice of its frame?"
        );
        assert_eq!(reply.payload, sent, "call {i}: reply differs");
        held.push((i, reply.payload));
    }
    assert_eq!(
        keeper.copied.load(Ordering::SeqCst),
        if kept { 0 } else { calls },
        "requests whose field was copied out of the frame"
    );
    // Everything held on both sides is as it arrived.
    for (i, bytes) in &held {
        assert!(
            bytes[..] == payload(*i, size)[..],
            "reply {i} changed while held"
        );
    }
    for (i, bytes) in keeper.held.lock().iter().enumerate() {
        assert!(
            bytes[..] == payload(i, size)[..],
            "request {i} changed while held"
        );
    }
    drop(held);
    keeper.held.lock().clear();
    // Released memory is reused without harm.
    for i in calls..calls + 4 {
        let sent = bytes::Bytes::from(payload(i, size));
        let request = Request::new(EchoRequest {
            payload: sent.clone(),
            ..Default::default()
        });
        let reply: Response<EchoReply> = channel.unary_gathered(request, method).await.unwrap();
        assert_eq!(reply.into_inner().payload, sent);
    }
    channel
}

/// Who the token interceptor let in, for the handler (a request extension).
#[derive(Clone, Debug, PartialEq)]
pub struct Caller(pub String);

/// The server's interceptor: refuses calls without the token; tells the handler who
/// called through the request's extensions.
pub fn require_token(mut request: Request<()>) -> Result<Request<()>, Status> {
    match request.metadata().get("authorization") {
        Some("Bearer s3cret") => {
            request.extensions_mut().insert(Caller("ada".into()));
            Ok(request)
        }
        Some(_) => Err(Status::unauthenticated("bad token")),
        None => Err(Status::unauthenticated("a token is required")),
    }
}

/// Echoes `caller=<name>` from the extension the interceptor set, and counts handlers
/// started (a refused call must start none).
#[derive(Clone, Default)]
pub struct WhoCalled {
    pub started: Arc<AtomicUsize>,
}

impl Echo for WhoCalled {
    type RepeatStream = rdmarpc_core::BoxStream<EchoReply>;
    type ChatStream = rdmarpc_core::BoxStream<EchoReply>;

    async fn repeat(
        &self,
        request: Request<examples::echo::RepeatRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(examples::repeat(request.into_inner())))
    }

    async fn chat(
        &self,
        request: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(examples::echo_each(request.into_inner())))
    }

    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let caller = request.extensions().get::<Caller>().cloned();
        let name = caller.map_or_else(|| "none".to_owned(), |c| c.0);
        Ok(Response::new(EchoReply {
            payload: format!("caller={name}").into_bytes().into(),
        }))
    }
}

/// A server-side interceptor refuses calls without a token with UNAUTHENTICATED (unary
/// and streaming; no handler starts), lets a client whose channel interceptor adds the
/// token through, and passes what it learned to the handler in the extensions; a client
/// interceptor's own refusal ends the call before it is sent.
pub async fn an_interceptor_requires_a_token<H: Harness>(h: H) {
    let service = WhoCalled::default();
    let started = service.started.clone();
    let server = Server::builder()
        .add_service(EchoServer::with_interceptor(service, require_token))
        .unwrap()
        .build();
    let addr = h.start(server).await;
    let channel = h.connect(&addr, BIG).await;

    let anonymous = EchoClient::new(channel.clone());
    let status = anonymous.echo(EchoRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(status.message(), "a token is required");
    let repeat = examples::echo::RepeatRequest {
        payload: b"x".to_vec().into(),
        count: 3,
    };
    let status = anonymous.repeat(repeat.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let mut wrong = Request::new(EchoRequest::default());
    wrong.metadata_mut().insert("authorization", "Bearer guess");
    let status = anonymous.echo(wrong).await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::Unauthenticated, "bad token")
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        0,
        "no handler ran for a refused call"
    );

    let authed = EchoClient::new(channel.with_interceptor(|mut request: Request<()>| {
        request
            .metadata_mut()
            .insert("authorization", "Bearer s3cret");
        Ok(request)
    }));
    let reply = authed.echo(EchoRequest::default()).await.unwrap();
    assert_eq!(&reply.into_inner().payload[..], b"caller=ada");
    let mut stream = authed.repeat(repeat).await.unwrap().into_inner();
    let mut n = 0;
    while let Some(reply) = stream.message().await.unwrap() {
        assert_eq!(&reply.payload[..], b"x");
        n += 1;
    }
    assert_eq!(n, 3);
    assert_eq!(started.load(Ordering::SeqCst), 2);
    // The anonymous clone is unchanged; interceptors chain in order.
    assert!(anonymous.echo(EchoRequest::default()).await.is_err());
    let refusing =
        EchoClient::new(channel.with_interceptor(|_: Request<()>| {
            Err(Status::permission_denied("not from this client"))
        }));
    let status = refusing.echo(EchoRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(
        started.load(Ordering::SeqCst),
        2,
        "refused before it was sent"
    );
}

/// Twelve concurrent 300 ms calls of `client`; the peak concurrency `probe` saw. (300 ms, not
/// less: in the emulated guest twelve RDMA calls took over 40 ms to reach the server, so a
/// shorter call could end before the last began.)
async fn peak_of_twelve<C: Connection>(client: &EchoClient<C>, peak: &AtomicUsize) -> usize {
    peak.store(0, Ordering::SeqCst);
    let calls: Vec<_> = (0..12)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .echo(EchoRequest {
                        payload: vec![i as u8].into(),
                        delay_ms: 300,
                        ..Default::default()
                    })
                    .await
            })
        })
        .collect();
    for c in calls {
        let reply = c.await.unwrap().unwrap();
        assert_eq!(reply.into_inner().payload.len(), 1);
    }
    peak.load(Ordering::SeqCst)
}

/// tower layers: a concurrency limit on the server holds (twelve concurrent calls, two
/// handlers at a time; without the layer all twelve run at once), a server timeout layer
/// answers DEADLINE_EXCEEDED, and on the client a concurrency-limit layer and a timeout
/// layer work through a generated client.
pub async fn tower_layers_hold<H: Harness>(h: H) {
    // Without a layer: all twelve run at once.
    let probe = Probe::default();
    let peak = probe.peak.clone();
    let addr = h.start(server_with(probe, big_config())).await;
    let plain = EchoClient::new(h.connect(&addr, BIG).await);
    assert_eq!(peak_of_twelve(&plain, &peak).await, 12);
    // The client's own concurrency limit: three at a time reach the server.
    let limited = EchoClient::new(
        h.connect(&addr, BIG)
            .await
            .layer(tower::limit::ConcurrencyLimitLayer::new(3)),
    );
    assert_eq!(peak_of_twelve(&limited, &peak).await, 3);
    // Time waiting in a client layer counts against the call's deadline: behind a call
    // holding the one permit for 400 ms, a call with a 100 ms timeout fails at 100 ms.
    let single = EchoClient::new(
        h.connect(&addr, BIG)
            .await
            .layer(tower::limit::ConcurrencyLimitLayer::new(1)),
    );
    let holder = {
        let single = single.clone();
        tokio::spawn(async move {
            single
                .echo(EchoRequest {
                    delay_ms: 400,
                    ..Default::default()
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut waiting = Request::new(EchoRequest::default());
    waiting.set_timeout(Duration::from_millis(100));
    // (Counted from the layer's start the call would wait ~350 ms, then succeed.)
    let status = single.echo(waiting).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    holder.await.unwrap().unwrap();
    // A client timeout layer: DEADLINE_EXCEEDED.
    let hasty = EchoClient::new(
        h.connect(&addr, BIG)
            .await
            .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(20))),
    );
    let status = hasty
        .echo(EchoRequest {
            delay_ms: 500,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");

    // On the server: two at a time, whatever the clients do.
    let probe = Probe::default();
    let peak = probe.peak.clone();
    let server = Server::builder()
        .layer(tower::limit::ConcurrencyLimitLayer::new(2))
        .add_service(EchoServer::new(probe))
        .unwrap()
        .build();
    let addr = h.start(server).await;
    let client = EchoClient::new(h.connect(&addr, BIG).await);
    assert_eq!(peak_of_twelve(&client, &peak).await, 2);
    // Streaming calls go through the layers too (a permit until the handler returns its
    // stream: layers do not cover the stream's body).
    let mut stream = client
        .repeat(examples::echo::RepeatRequest {
            payload: b"s".to_vec().into(),
            count: 2,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some());

    // A server timeout layer: the handler is dropped, the client sees DEADLINE_EXCEEDED.
    let server = Server::builder()
        .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(30)))
        .add_service(EchoServer::new(Probe::default()))
        .unwrap()
        .build();
    let addr = h.start(server).await;
    let client = EchoClient::new(h.connect(&addr, BIG).await);
    let status = client
        .echo(EchoRequest {
            delay_ms: 500,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let fast = client
        .echo(EchoRequest {
            payload: b"quick".to_vec().into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(&fast.into_inner().payload[..], b"quick");
}
