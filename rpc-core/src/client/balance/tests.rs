//! The balanced channel's failure modes, over the in-memory transport (and a real
//! dnsmasq for DNS): each test shows one behaviour a review found broken, now fixed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::endpoint::{Health as HealthState, Phase};
use super::health::HealthCheckResponse;
use super::*;
use crate::client::connection::Watcher;
use crate::memory::{self, MemoryConnection};
use crate::service::{
    BoxMessage, MethodDescriptor, MethodKind, Service, ServiceFuture, StreamRequest,
    StreamResponse, StreamingFuture,
};
use crate::{
    Channel, ClientConfig, Code, Endpoint, EndpointStatus, LbStrategy, Request, Response, Server,
};

static SLEEP: MethodDescriptor = MethodDescriptor::new("/t.T/Sleep");
static WATCH: MethodDescriptor =
    MethodDescriptor::with_kind("/grpc.health.v1.Health/Watch", MethodKind::ServerStreaming);

/// `/t.T/Sleep`: sleeps the request's ms, then answers it or (fail) UNAVAILABLE.
#[derive(Clone)]
struct Backend {
    calls: Arc<AtomicUsize>,
    fail: bool,
}

impl Service for Backend {
    fn name(&self) -> &'static str {
        "t.T"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        std::slice::from_ref(&SLEEP)
    }
    fn call(&self, _: usize, request: Request<crate::Payload<'_>>) -> ServiceFuture {
        let ms: u32 = request.into_inner().decode().unwrap_or(0);
        let calls = self.calls.clone();
        let fail = self.fail;
        Box::pin(async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms.into())).await;
            if fail {
                return Err(crate::Status::unavailable("this backend fails"));
            }
            Ok(Response::new(Box::new(ms) as BoxMessage))
        })
    }
}

/// `grpc.health.v1.Health/Watch`: answers SERVING once and keeps the stream open, or
/// (silent) never answers.
struct Health {
    silent: bool,
}

impl Service for Health {
    fn name(&self) -> &'static str {
        "grpc.health.v1.Health"
    }
    fn methods(&self) -> &'static [MethodDescriptor] {
        std::slice::from_ref(&WATCH)
    }
    fn call(&self, _: usize, _: Request<crate::Payload<'_>>) -> ServiceFuture {
        Box::pin(std::future::ready(Err(crate::Status::internal("unary"))))
    }
    fn call_streaming(&self, _: usize, _: Request<StreamRequest<'_>>) -> StreamingFuture {
        let silent = self.silent;
        Box::pin(async move {
            let stream: crate::service::BoxMessageStream = if silent {
                Box::pin(futures_util::stream::pending())
            } else {
                let first = HealthCheckResponse { status: 1 };
                Box::pin(
                    futures_util::stream::once(async move { Ok(Box::new(first) as BoxMessage) })
                        .chain(futures_util::stream::pending()),
                )
            };
            Ok(Response::new(StreamResponse::Stream(stream)))
        })
    }
}

#[derive(Clone, Copy)]
enum Dial {
    /// Connects to a server.
    Ok,
    /// Fails at once.
    Refused,
    /// The first dial fails at once, every later one hangs (a host that went dark).
    RefusedThenHang,
    /// Connects, and the server closes the connection at once (a hostile or broken
    /// server that accepts and hangs up).
    AcceptAndClose,
}

struct World {
    servers: HashMap<String, (Server, Dial)>,
    calls: HashMap<String, Arc<AtomicUsize>>,
    dials: Arc<AtomicUsize>,
}

fn ep(host: &str) -> Endpoint {
    format!("tcp://{host}:1").parse().unwrap()
}

fn world(spec: &[(&str, Dial, bool, Option<bool>)]) -> World {
    let mut servers = HashMap::new();
    let mut calls = HashMap::new();
    for &(host, dial, fail, health) in spec {
        let counter = Arc::new(AtomicUsize::new(0));
        let mut builder = Server::builder()
            .add_service(Backend {
                calls: counter.clone(),
                fail,
            })
            .unwrap();
        if let Some(silent) = health {
            builder = builder.add_service(Health { silent }).unwrap();
        }
        servers.insert(ep(host).address, (builder.build(), dial));
        calls.insert(host.to_owned(), counter);
    }
    World {
        servers,
        calls,
        dials: Arc::new(AtomicUsize::new(0)),
    }
}

fn channel_over(
    world: &World,
    config: ClientConfig,
) -> (
    Channel<MemoryConnection>,
    tokio::sync::mpsc::UnboundedSender<Vec<Endpoint>>,
) {
    let servers = Arc::new(world.servers.clone());
    let dials = world.dials.clone();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Endpoint>>();
    let updates =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|set| (set, rx)) },
        );
    let seen: Arc<parking_lot::Mutex<HashMap<String, usize>>> = Arc::default();
    let channel = Channel::balanced_with(config, updates, move |endpoint: &Endpoint| {
        dials.fetch_add(1, Ordering::SeqCst);
        let (server, dial) = servers[&endpoint.address].clone();
        let n = {
            let mut seen = seen.lock();
            let n = seen.entry(endpoint.address.clone()).or_default();
            *n += 1;
            *n
        };
        async move {
            match (dial, n) {
                (Dial::Ok, _) => {
                    let (client, server_end) = memory::pair(1 << 20);
                    tokio::spawn(async move { server.serve_connection(server_end).await });
                    Ok(client)
                }
                (Dial::AcceptAndClose, _) => {
                    let (client, server_end) = memory::pair(1 << 20);
                    drop(server_end);
                    drop(server);
                    Ok(client)
                }
                (Dial::Refused, _) | (Dial::RefusedThenHang, 1) => {
                    Err(crate::TransportError::Other("refused".into()))
                }
                (Dial::RefusedThenHang, _) => std::future::pending().await,
            }
        }
    });
    (channel, tx)
}

async fn sleep_call(
    channel: &Channel<MemoryConnection>,
    ms: u32,
    timeout: Option<Duration>,
) -> Result<u32, crate::Status> {
    let mut request = Request::new(ms);
    if let Some(t) = timeout {
        request.set_timeout(t);
    }
    channel
        .unary::<u32, u32>(request, &SLEEP)
        .await
        .map(Response::into_inner)
}

async fn until(
    channel: &Channel<MemoryConnection>,
    what: &str,
    f: impl Fn(&[EndpointStatus]) -> bool,
) {
    let start = Instant::now();
    while !f(&channel.endpoints()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {:?}",
            channel.endpoints()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A channel's default call timeout does not apply to its health watches (once it did:
/// the watch died every `timeout`, the endpoint flapped to NOT_SERVING and calls failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_call_timeout_does_not_cut_the_health_watch() {
    let w = world(&[("a", Dial::Ok, false, Some(false))]);
    let mut config = ClientConfig::default();
    config.health_check("");
    config.timeout(Duration::from_millis(300));
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("a")]).unwrap();
    sleep_call(&channel, 0, None).await.unwrap();
    let start = Instant::now();
    let (mut ok, mut failed, mut not_serving_seen) = (0, Vec::new(), 0);
    while start.elapsed() < Duration::from_secs(3) {
        if channel.endpoints()[0].serving == Some(false) {
            not_serving_seen += 1;
        }
        match sleep_call(&channel, 0, None).await {
            Ok(_) => ok += 1,
            Err(status) => failed.push(status),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!(
        "ok {ok}, failed {}, NOT_SERVING seen {not_serving_seen} times; first failure: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(failed.is_empty(), "a healthy server's calls failed");
}

/// A health watch that never answers leaves the endpoint unknown only for the connect
/// timeout: then a fail-fast call without a deadline fails (once it waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_health_watch_does_not_hang_fail_fast_calls() {
    let w = world(&[
        ("a", Dial::Ok, false, Some(true)),
        ("b", Dial::Refused, false, None),
    ]);
    let mut config = ClientConfig::default();
    config.health_check("");
    // A first health answer is due within the connect timeout.
    config.connect_timeout = Duration::from_secs(1);
    assert!(!config.wait_for_ready);
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("a"), ep("b")]).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3), sleep_call(&channel, 0, None)).await;
    eprintln!("endpoints: {:?}", channel.endpoints());
    let status = outcome
        .expect("a fail-fast call still waits after 3 s")
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("1 not serving"), "{status:?}");
}

/// Every endpoint failed and one re-dial hangs (a host gone dark): a fail-fast call fails
/// at once instead of waiting for that dial (as gRPC's TRANSIENT_FAILURE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_calls_do_not_wait_for_redials_of_failing_endpoints() {
    let w = world(&[
        ("a", Dial::Refused, false, None),
        ("b", Dial::RefusedThenHang, false, None),
    ]);
    let (channel, tx) = channel_over(&w, ClientConfig::default());
    tx.send(vec![ep("a"), ep("b")]).unwrap();
    let first = sleep_call(&channel, 0, None).await.unwrap_err();
    assert_eq!(first.code(), Code::Unavailable);
    tokio::time::sleep(Duration::from_millis(500)).await; // b's back-off is over: re-dial hangs
    let started = Instant::now();
    let second = sleep_call(&channel, 0, Some(Duration::from_secs(3)))
        .await
        .unwrap_err();
    eprintln!("second call: {second:?} after {:?}", started.elapsed());
    assert_eq!(
        second.code(),
        Code::Unavailable,
        "fail-fast call waited {:?}",
        started.elapsed()
    );
}

/// Round robin shares a down endpoint's turns among all the others (once, the next one
/// in order took them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_is_even_next_to_a_down_endpoint() {
    let w = world(&[
        ("a", Dial::Ok, false, None),
        ("b", Dial::Refused, false, None),
        ("c", Dial::Ok, false, None),
    ]);
    let mut config = ClientConfig::default();
    config.lb_strategy(LbStrategy::RoundRobin);
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("a"), ep("b"), ep("c")]).unwrap();
    let _ = sleep_call(&channel, 0, None).await;
    until(&channel, "a and c up", |e| {
        e.iter().filter(|e| e.connected).count() == 2
    })
    .await;
    let before = (
        w.calls["a"].load(Ordering::SeqCst),
        w.calls["c"].load(Ordering::SeqCst),
    );
    for _ in 0..300 {
        sleep_call(&channel, 0, None).await.unwrap();
    }
    let a = w.calls["a"].load(Ordering::SeqCst) - before.0;
    let c = w.calls["c"].load(Ordering::SeqCst) - before.1;
    eprintln!("a {a}, c {c}");
    assert!(a.abs_diff(c) < 30, "round robin is uneven: a {a}, c {c}");
}

/// pick_first sends every call to the first usable endpoint in the resolver's order,
/// passing over one that does not connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pick_first_uses_the_first_usable_endpoint_only() {
    let w = world(&[
        ("a", Dial::Refused, false, None),
        ("b", Dial::Ok, false, None),
        ("c", Dial::Ok, false, None),
    ]);
    let mut config = ClientConfig::default();
    config.lb_strategy(LbStrategy::PickFirst);
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("a"), ep("b"), ep("c")]).unwrap();
    let _ = sleep_call(&channel, 0, None).await;
    until(&channel, "b and c up", |e| {
        e.iter().filter(|e| e.connected).count() == 2
    })
    .await;
    // Once both are up (before, whichever connected first was the first usable).
    let before = (
        w.calls["b"].load(Ordering::SeqCst),
        w.calls["c"].load(Ordering::SeqCst),
    );
    for _ in 0..50 {
        sleep_call(&channel, 0, None).await.unwrap();
    }
    assert_eq!(w.calls["b"].load(Ordering::SeqCst) - before.0, 50);
    assert_eq!(
        w.calls["c"].load(Ordering::SeqCst) - before.1,
        0,
        "c is not picked"
    );
    assert_eq!("pick_first".parse(), Ok(LbStrategy::PickFirst));
    assert_eq!(LbStrategy::PickFirst.to_string(), "pick_first");
}

/// An endpoint removed while failing calls are in flight on it is not ejected by them
/// (once that held a place of the ejection budget forever, and no endpoint could be
/// ejected again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_endpoint_with_failing_calls_in_flight_keeps_the_ejection_budget() {
    let w = world(&[
        ("x", Dial::Ok, true, None),
        ("g", Dial::Ok, false, None),
        ("y", Dial::Ok, true, None),
    ]);
    let mut config = ClientConfig::default();
    config.lb_strategy(LbStrategy::RoundRobin);
    config.balance.eject_after_failures = 2;
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("x"), ep("g")]).unwrap();
    let _ = sleep_call(&channel, 0, None).await;
    until(&channel, "x and g up", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    // Two slow calls on x (and two on g) in flight...
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let channel = channel.clone();
            tokio::spawn(async move { sleep_call(&channel, 300, None).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...when x leaves the set.
    tx.send(vec![ep("g"), ep("y")]).unwrap();
    for call in calls {
        let _ = call.await.unwrap();
    }
    until(&channel, "g and y up", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    let y_before = w.calls["y"].load(Ordering::SeqCst);
    for _ in 0..100 {
        let _ = sleep_call(&channel, 0, None).await;
    }
    let y_calls = w.calls["y"].load(Ordering::SeqCst) - y_before;
    eprintln!(
        "y (fails every call) got {y_calls} of 100; endpoints {:?}",
        channel.endpoints()
    );
    assert!(y_calls <= 2, "y was never ejected");
}

/// A success after an ejection ended resets the streak: the next ejection is short
/// again, not ten times longer.
#[test]
fn a_success_after_an_ejection_resets_the_streak() {
    let budget = Arc::new(EjectionBudget::default());
    budget.endpoints.store(4, Ordering::Relaxed);
    let state = EndpointState::for_test(Phase::Ready, HealthState::Serving, budget.clone());
    state.record(Code::Unavailable);
    state.record(Code::Unavailable);
    assert_eq!(state.streak.load(Ordering::Relaxed), 1);
    // The rest ends; the endpoint then serves a million calls.
    state.ejection.lock().until = Some(Instant::now() - Duration::from_millis(1));
    assert!(!state.is_ejected(Instant::now()));
    for _ in 0..1000 {
        state.record(Code::Ok);
    }
    assert_eq!(
        state.streak.load(Ordering::Relaxed),
        0,
        "ejection streak not reset by successes"
    );
}

/// A removed endpoint's late failures do not eject it (the budget leak above, without
/// timing).
#[test]
fn a_removed_endpoint_is_not_ejected_again() {
    let budget = Arc::new(EjectionBudget::default());
    budget.endpoints.store(2, Ordering::Relaxed);
    let state = EndpointState::for_test(Phase::Ready, HealthState::Serving, budget.clone());
    state.remove(); // removed from the set (Sub::stop)
    state.record(Code::Unavailable); // calls that were in flight on it fail
    state.record(Code::Unavailable);
    drop(state);
    assert_eq!(
        budget.ejected.load(Ordering::Relaxed),
        0,
        "a dropped endpoint is still counted as ejected"
    );
}

/// A failing endpoint is ejected after two failures in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_endpoint_is_ejected() {
    let w = world(&[("g", Dial::Ok, false, None), ("y", Dial::Ok, true, None)]);
    let mut config = ClientConfig::default();
    config.lb_strategy(LbStrategy::RoundRobin);
    config.balance.eject_after_failures = 2;
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("g"), ep("y")]).unwrap();
    let _ = sleep_call(&channel, 0, None).await;
    until(&channel, "g and y up", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    let y_before = w.calls["y"].load(Ordering::SeqCst);
    for _ in 0..100 {
        let _ = sleep_call(&channel, 0, None).await;
    }
    let y_calls = w.calls["y"].load(Ordering::SeqCst) - y_before;
    eprintln!("control: y got {y_calls} of 100");
    assert!(y_calls <= 2);
}

/// After the last clone is dropped, connectors stop dialling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connectors_stop_with_the_channel() {
    let w = world(&[
        ("a", Dial::Refused, false, None),
        ("g", Dial::Ok, false, Some(false)),
    ]);
    let mut config = ClientConfig::default();
    config.health_check("");
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("a"), ep("g")]).unwrap();
    sleep_call(&channel, 0, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = channel.clone();
    drop(channel);
    drop(client);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let dials = w.dials.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        w.dials.load(Ordering::SeqCst),
        dials,
        "dials after the channel was dropped"
    );
    drop(tx);
}

/// An SRV target without an address is left out; the others are kept.
#[tokio::test]
async fn an_unresolvable_srv_target_loses_only_itself() {
    let dns = test_dns::Dnsmasq::start(
        "127.0.0.1 a.t\n",
        &[
            "--srv-host=_s._tcp.t,a.t,1001,0,10".to_owned(),
            "--srv-host=_s._tcp.t,gone.t,1002,0,10".to_owned(),
            "--local=/t/".to_owned(),
        ],
    );
    let target =
        super::dns::DnsTarget::parse(&format!("dns://127.0.0.1:{}/_s._tcp.t", dns.port())).unwrap();
    let resolver = target.resolver().unwrap();
    let resolved = target.resolve(&resolver, "tcp", usize::MAX, 0).await;
    eprintln!("{resolved:?}");
    assert!(resolved.is_ok(), "a.t:1001 is lost with gone.t");
}

/// A name with thousands of addresses: the channel keeps a subset of `max_endpoints`,
/// the same one on every refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_addresses_give_at_most_max_endpoints() {
    let mut hosts = String::new();
    for i in 0..3000u32 {
        hosts.push_str(&format!(
            "10.{}.{}.{} big.t\n",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        ));
    }
    let dns = test_dns::Dnsmasq::start(&hosts, &[]);
    let target =
        super::dns::DnsTarget::parse(&format!("dns://127.0.0.1:{}/big.t:1", dns.port())).unwrap();
    let resolver = target.resolver().unwrap();
    let resolved = target
        .resolve(&resolver, "tcp", usize::MAX, 0)
        .await
        .unwrap();
    assert_eq!(resolved.len(), 3000, "the test needs a large answer");
    // Cut before conversion: the subset of a seed, the same on every resolution.
    let cut = target.resolve(&resolver, "tcp", 64, 7).await.unwrap();
    assert_eq!(cut.len(), 64);
    assert_eq!(cut, target.resolve(&resolver, "tcp", 64, 7).await.unwrap());
    assert_ne!(cut, target.resolve(&resolver, "tcp", 64, 8).await.unwrap());
    let mut config = ClientConfig::default();
    config.balance.dns_refresh = Duration::from_millis(200);
    config.balance.max_endpoints = 64;
    let dials = Arc::new(AtomicUsize::new(0));
    let counted = dials.clone();
    let url = format!("dns://127.0.0.1:{}/big.t:1", dns.port());
    let channel = Channel::<MemoryConnection>::connect_lazy_dialing(&url, config, move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Err(crate::TransportError::Other("unreachable".into())) }
    })
    .unwrap();
    let status = sleep_call(&channel, 0, Some(Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let first: std::collections::BTreeSet<String> = channel
        .endpoints()
        .iter()
        .map(|e| e.endpoint.to_string())
        .collect();
    assert_eq!(first.len(), 64);
    tokio::time::sleep(Duration::from_millis(600)).await; // a few refreshes
    let later: std::collections::BTreeSet<String> = channel
        .endpoints()
        .iter()
        .map(|e| e.endpoint.to_string())
        .collect();
    assert_eq!(first, later, "the subset changed between refreshes");
    // First dials plus back-off re-dials, of the 64 only.
    assert!(
        dials.load(Ordering::SeqCst) < 64 * 8,
        "{} dials",
        dials.load(Ordering::SeqCst)
    );
}

/// Retry throttling: with 10 tokens, a server failing every call gets three attempts of
/// the first call, two of the second, then one of each (23 for 20 calls, not 60).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_throttled_when_most_calls_fail() {
    let w = world(&[("a", Dial::Ok, true, None)]);
    let mut config = ClientConfig::default();
    config.balance.eject_after_failures = 0;
    let mut policy = crate::RetryPolicy::default();
    policy.methods(["*"]);
    policy.max_tokens = 10;
    policy.initial_backoff = Duration::from_millis(1);
    config.retry(policy);
    let (channel, tx) = channel_over(&w, config);
    tx.send(vec![ep("a")]).unwrap();
    for _ in 0..20 {
        let status = sleep_call(&channel, 0, None).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
    }
    assert_eq!(w.calls["a"].load(Ordering::SeqCst), 23);
}

/// An endpoint that accepts and hangs up at once gets no dial storm: each connection that
/// ends within a second counts as a failed dial, so dials back off (100 ms, x1.6, ...).
/// Calls go to the good endpoint meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_accepts_and_hangs_up_is_redialled_with_back_off() {
    let w = world(&[
        ("good", Dial::Ok, false, None),
        ("rude", Dial::AcceptAndClose, false, None),
    ]);
    let (channel, tx) = channel_over(&w, ClientConfig::default());
    tx.send(vec![ep("good"), ep("rude")]).unwrap();
    let start = Instant::now();
    let mut failed = 0;
    while start.elapsed() < Duration::from_millis(1500) {
        if sleep_call(&channel, 1, None).await.is_err() {
            failed += 1;
        }
    }
    // The good endpoint's first dial, then the rude one's: about 1 + 6 in 1.5 s with the
    // back-off; thousands without it.
    let dials = w.dials.load(Ordering::SeqCst);
    assert!(dials <= 12, "{dials} dials in 1.5 s");
    assert!(failed <= 3, "{failed} calls failed");
    assert!(w.calls["good"].load(Ordering::SeqCst) > 100);
}

/// A retry goes to another endpoint than the one whose failure it retries, when another
/// is usable: beside an endpoint failing every call (not ejected here, so that only the
/// retry's choice can help), every call with two attempts succeeds. Picking afresh,
/// a retry went back to the failing endpoint about half the time (P2C over two idle
/// endpoints is a coin toss), failing about a quarter of the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_goes_to_another_endpoint_than_the_one_that_failed() {
    let w = world(&[
        ("bad", Dial::Ok, true, None),
        ("good", Dial::Ok, false, None),
    ]);
    for strategy in [LbStrategy::PowerOfTwoChoices, LbStrategy::RoundRobin] {
        let mut config = ClientConfig::default();
        config.balance.strategy = strategy;
        config.balance.eject_after_failures = 0;
        let mut policy = crate::RetryPolicy::default();
        policy.methods(["*"]);
        policy.max_attempts = 2;
        policy.max_tokens = 0;
        policy.initial_backoff = Duration::from_millis(1);
        config.retry(policy);
        let (channel, tx) = channel_over(&w, config);
        tx.send(vec![ep("bad"), ep("good")]).unwrap();
        let mut failed = 0;
        for _ in 0..100 {
            if sleep_call(&channel, 0, None).await.is_err() {
                failed += 1;
            }
        }
        assert_eq!(failed, 0, "{strategy:?}");
        assert!(
            w.calls["bad"].load(Ordering::SeqCst) > 0,
            "both were picked"
        );
    }
}
