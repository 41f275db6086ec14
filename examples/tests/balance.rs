//! Balanced channels over several servers on 127.0.0.1 (real sockets), with endpoints from
//! a list or from a real DNS server (dnsmasq) whose records change during the test.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::echo_server::{Echo, EchoServer};
use examples::echo::{EchoReply, EchoRequest, RepeatRequest};
use examples::EchoService;
use rdmarpc_core::{
    Channel, ClientConfig, Code, LbStrategy, Request, Response, RetryPolicy, Server, Status,
    Streaming,
};
use rdmarpc_health::HealthReporter;
use rdmarpc_health::ServingStatus;
use rdmarpc_transport::AnyConnection;
use rdmarpc_transport_tcp::{TcpConfig, TcpListener};

/// One in-process server: its address, the calls it served, its health reporter.
struct Backend {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    health: HealthReporter,
    /// Starts a graceful shutdown: the listener closes, clients get GOAWAY.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The echo service, each echo call answered after `0`.
#[derive(Clone)]
struct Delayed(Duration);

impl Echo for Delayed {
    type RepeatStream = rdmarpc_core::BoxStream<EchoReply>;
    type ChatStream = rdmarpc_core::BoxStream<EchoReply>;

    async fn repeat(
        &self,
        request: Request<RepeatRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        EchoService.repeat(request).await
    }

    async fn chat(
        &self,
        request: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        EchoService.chat(request).await
    }

    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        tokio::time::sleep(self.0).await;
        EchoService.echo(request).await
    }
}

/// An echo server (with a health service) on `ip`, port `port` (0: any), counting the
/// echo calls it serves; `fail` makes it answer every echo call `UNAVAILABLE`.
async fn backend_on(ip: &str, port: u16, fail: bool) -> Backend {
    backend_with(ip, port, fail, Duration::ZERO).await
}

/// [`backend_on`], each echo call answered after `delay`.
async fn backend_with(ip: &str, port: u16, fail: bool, delay: Duration) -> Backend {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let echo = EchoServer::with_interceptor(Delayed(delay), move |request| {
        counted.fetch_add(1, Ordering::Relaxed);
        if fail {
            return Err(Status::unavailable("this backend fails every call"));
        }
        Ok(request)
    });
    let (health, health_service) = rdmarpc_health::health_reporter();
    let server = Server::builder()
        .add_service(echo)
        .unwrap()
        .add_service(health_service)
        .unwrap()
        .build();
    let listener = TcpListener::bind(&format!("{ip}:{port}"), TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_socket_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        server
            .serve_with_shutdown(listener, async move {
                let _ = stopped.await;
            })
            .await
    });
    Backend {
        addr,
        calls,
        health,
        stop: Some(stop),
    }
}

async fn backend() -> Backend {
    backend_on("127.0.0.1", 0, false).await
}

fn list(backends: &[&Backend]) -> String {
    let addrs: Vec<String> = backends.iter().map(|b| b.addr.to_string()).collect();
    format!("tcp://{}", addrs.join(","))
}

fn echo(payload: &[u8]) -> EchoRequest {
    EchoRequest {
        payload: payload.to_vec().into(),
        ..Default::default()
    }
}

/// Waits (up to 10 s) until `ready` holds for the channel's endpoints.
async fn until_endpoints(
    channel: &Channel<AnyConnection>,
    what: &str,
    ready: impl Fn(&[rdmarpc_core::EndpointStatus]) -> bool,
) {
    let start = Instant::now();
    loop {
        let endpoints = channel.endpoints();
        if ready(&endpoints) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: endpoints are {endpoints:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn counts(backends: &[&Backend]) -> Vec<usize> {
    backends
        .iter()
        .map(|b| b.calls.load(Ordering::Relaxed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_gives_each_server_its_turn() {
    let backends = [backend().await, backend().await, backend().await];
    let all: Vec<&Backend> = backends.iter().collect();
    let mut config = ClientConfig::default();
    config.lb_strategy(LbStrategy::RoundRobin);
    let channel = Channel::<AnyConnection>::connect_with(&list(&all), config)
        .await
        .unwrap();
    until_endpoints(&channel, "all connected", |e| {
        e.len() == 3 && e.iter().all(|e| e.connected)
    })
    .await;
    let client = EchoClient::new(channel);
    for i in 0..300u32 {
        let reply = client.echo(echo(&i.to_le_bytes())).await.unwrap();
        assert_eq!(reply.into_inner().payload, i.to_le_bytes()[..]);
    }
    assert_eq!(counts(&all), [100, 100, 100]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_spreads_over_every_server() {
    let backends = [backend().await, backend().await, backend().await];
    let all: Vec<&Backend> = backends.iter().collect();
    // The default strategy: power of two choices on calls in flight.
    let channel = Channel::<AnyConnection>::connect(&list(&all))
        .await
        .unwrap();
    until_endpoints(&channel, "all connected", |e| {
        e.len() == 3 && e.iter().all(|e| e.connected)
    })
    .await;
    let client = EchoClient::new(channel);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..60 {
                    let mut request = echo(b"spread");
                    request.delay_ms = 1;
                    client.echo(request).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let counts = counts(&all);
    assert_eq!(counts.iter().sum::<usize>(), 960);
    // Evenly would be 320 each; power of two choices keeps each well within that.
    assert!(counts.iter().all(|&n| n >= 160), "uneven: {counts:?}");
}

/// Runs `workers` callers of 20 ms echo calls until `stop`; returns the failures' codes.
fn load(
    client: &EchoClient<AnyConnection>,
    workers: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
    ok: Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Vec<Status>>> {
    (0..workers)
        .map(|_| {
            let client = client.clone();
            let stop = stop.clone();
            let ok = ok.clone();
            tokio::spawn(async move {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut request = echo(b"under load");
                    request.delay_ms = 20;
                    match client.echo(request).await {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(status) => failures.push(status),
                    }
                }
                failures
            })
        })
        .collect()
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `echo-server` in a process of its own on `port`, once it accepts connections.
fn echo_server_process(port: u16) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_echo-server"))
        .args(["--addr", &format!("tcp://127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "echo-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Two servers in this process and one in a child process, 16 callers of 20 ms calls; the
/// child is killed (SIGKILL) under load. Returns the failures, the calls that succeeded
/// after the kill, and the most calls that were in flight on the child.
async fn kill_one_under_load(retry: Option<RetryPolicy>) -> (Vec<Status>, usize) {
    let a = backend().await;
    let b = backend().await;
    let port = free_port();
    let mut child = echo_server_process(port);
    let target = format!("tcp://{},{},127.0.0.1:{port}", a.addr, b.addr);
    let mut config = ClientConfig::default();
    if let Some(retry) = retry {
        config.retry(retry);
    }
    let channel = Channel::<AnyConnection>::connect_with(&target, config)
        .await
        .unwrap();
    until_endpoints(&channel, "all connected", |e| {
        e.len() == 3 && e.iter().all(|e| e.connected)
    })
    .await;
    let client = EchoClient::new(channel.clone());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let workers = load(&client, 16, stop.clone(), ok.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let ok_at_kill = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for worker in workers {
        failures.extend(worker.await.unwrap());
    }
    let after = ok.load(Ordering::Relaxed) - ok_at_kill;
    assert!(
        ok_at_kill > 0 && after > 0,
        "calls went on: {ok_at_kill} before, {after} after"
    );
    // The dead endpoint is no longer used.
    let dead = channel
        .endpoints()
        .into_iter()
        .find(|e| e.endpoint.address.ends_with(&format!(":{port}")))
        .unwrap();
    assert!(!dead.connected, "{dead:?}");
    (failures, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_only_the_calls_in_flight_on_it() {
    let (failures, after) = kill_one_under_load(None).await;
    eprintln!(
        "{} calls failed at the kill, {after} succeeded after it",
        failures.len()
    );
    // At most the 16 callers' calls, each in flight on the killed server once; every one
    // UNAVAILABLE.
    // 16 callers of 20 ms calls keep several in flight on each server: some fail.
    assert!(
        (1..=16).contains(&failures.len()),
        "{} failed: {failures:?}",
        failures.len()
    );
    assert!(
        failures.iter().all(|s| s.code() == Code::Unavailable),
        "{failures:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_no_call_of_an_idempotent_method_under_a_retry_policy() {
    // `Echo` is `idempotency_level = IDEMPOTENT` in echo.proto: the default policy
    // retries it.
    let (failures, after) = kill_one_under_load(Some(RetryPolicy::default())).await;
    eprintln!(
        "{} calls failed at the kill, {after} succeeded after it",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reporting_not_serving_gets_no_new_calls() {
    let backends = [backend().await, backend().await, backend().await];
    let all: Vec<&Backend> = backends.iter().collect();
    let mut config = ClientConfig::default();
    config.health_check("");
    let channel = Channel::<AnyConnection>::connect_with(&list(&all), config)
        .await
        .unwrap();
    until_endpoints(&channel, "all serving", |e| {
        e.len() == 3 && e.iter().all(|e| e.connected && e.serving == Some(true))
    })
    .await;
    let client = EchoClient::new(channel.clone());
    backends[1]
        .health
        .set_service_status("", ServingStatus::NotServing);
    let sick = backends[1].addr.to_string();
    until_endpoints(&channel, "one not serving", |e| {
        e.iter()
            .any(|e| e.endpoint.address == sick && e.serving == Some(false))
    })
    .await;
    let before = counts(&all);
    for _ in 0..200 {
        client.echo(echo(b"healthy only")).await.unwrap();
    }
    let after = counts(&all);
    assert_eq!(after[1], before[1], "calls reached the NOT_SERVING server");
    assert_eq!(after[0] + after[2] - before[0] - before[2], 200);
    // Serving again, it gets calls again.
    backends[1]
        .health
        .set_service_status("", ServingStatus::Serving);
    until_endpoints(&channel, "serving again", |e| {
        e.iter().all(|e| e.serving == Some(true))
    })
    .await;
    for _ in 0..200 {
        client.echo(echo(b"all")).await.unwrap();
    }
    assert!(counts(&all)[1] > after[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_every_call_is_ejected() {
    let good = backend().await;
    let bad = backend_on("127.0.0.1", 0, true).await;
    let mut config = ClientConfig::default();
    config.balance.eject_after_failures = 5;
    config.balance.ejection_time = Duration::from_secs(60);
    let channel = Channel::<AnyConnection>::connect_with(&list(&[&good, &bad]), config)
        .await
        .unwrap();
    until_endpoints(&channel, "both connected", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    let client = EchoClient::new(channel.clone());
    let mut failed = 0;
    for _ in 0..300 {
        if let Err(status) = client.echo(echo(b"x")).await {
            assert_eq!(status.code(), Code::Unavailable);
            failed += 1;
        }
    }
    // Five failures in a row on the bad server eject it; the rest go to the good one.
    assert_eq!(failed, 5);
    assert_eq!(bad.calls.load(Ordering::Relaxed), 5);
    assert_eq!(good.calls.load(Ordering::Relaxed), 295);
    assert!(channel.endpoints().iter().any(|e| e.ejected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_shutting_down_drains_without_failing_calls() {
    let a = backend().await;
    let b = backend().await;
    let channel = Channel::<AnyConnection>::connect(&list(&[&a, &b]))
        .await
        .unwrap();
    until_endpoints(&channel, "both connected", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    let client = EchoClient::new(channel.clone());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let workers = load(&client, 8, stop.clone(), ok.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // GOAWAY: calls in flight finish there, new ones go to the other server.
    let mut a = a;
    a.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let a_calls = a.calls.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for worker in workers {
        failures.extend(worker.await.unwrap());
    }
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        a.calls.load(Ordering::Relaxed),
        a_calls,
        "calls reached the drained server"
    );
    assert!(b.calls.load(Ordering::Relaxed) > 0);
}

/// Three servers on one port of 127.0.0.2, .3 and .4.
async fn backends_on_one_port() -> (u16, Vec<Backend>) {
    for _ in 0..20 {
        let first = backend_on("127.0.0.2", 0, false).await;
        let port = first.addr.port();
        let mut backends = vec![first];
        for ip in ["127.0.0.3", "127.0.0.4"] {
            match TcpListener::bind(&format!("{ip}:{port}"), TcpConfig::default()).await {
                Ok(probe) => {
                    drop(probe);
                    backends.push(backend_on(ip, port, false).await);
                }
                Err(_) => break,
            }
        }
        if backends.len() == 3 {
            return (port, backends);
        }
    }
    panic!("no port free on 127.0.0.2, .3 and .4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_records_added_and_removed_are_followed_within_one_refresh() {
    let (port, backends) = backends_on_one_port().await;
    let all: Vec<&Backend> = backends.iter().collect();
    let dns = test_dns::Dnsmasq::start("127.0.0.2 backend.test\n127.0.0.3 backend.test\n", &[]);
    let refresh = Duration::from_millis(500);
    let mut config = ClientConfig::default();
    config.balance.dns_refresh = refresh;
    config.balance.dns_scheme = "tcp".to_owned();
    let target = format!("dns://127.0.0.1:{}/backend.test:{port}", dns.port());
    let channel = Channel::<AnyConnection>::connect_with(&target, config)
        .await
        .unwrap();
    let client = EchoClient::new(channel.clone());
    until_endpoints(&channel, "two from DNS", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    for _ in 0..100 {
        client.echo(echo(b"two")).await.unwrap();
    }
    let c = counts(&all);
    assert!(c[0] > 0 && c[1] > 0 && c[2] == 0, "{c:?}");

    // A third record: its server gets calls within one refresh (plus a dial).
    dns.set_hosts("127.0.0.2 backend.test\n127.0.0.3 backend.test\n127.0.0.4 backend.test\n");
    let added = Instant::now();
    while backends[2].calls.load(Ordering::Relaxed) == 0 {
        client.echo(echo(b"three")).await.unwrap();
        assert!(
            added.elapsed() < refresh + Duration::from_secs(3),
            "the added server got no call within {:?}",
            added.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!(
        "added server's first call {:?} after the record (refresh {refresh:?})",
        added.elapsed()
    );

    // A record removed: its server gets no new calls after one refresh.
    dns.set_hosts("127.0.0.3 backend.test\n127.0.0.4 backend.test\n");
    let removed = "127.0.0.2";
    until_endpoints(&channel, "record removed", |e| {
        e.len() == 2 && e.iter().all(|e| !e.endpoint.address.starts_with(removed))
    })
    .await;
    let before = counts(&all);
    for _ in 0..100 {
        client.echo(echo(b"after removal")).await.unwrap();
    }
    let after = counts(&all);
    assert_eq!(after[0], before[0], "the removed server got calls");
    assert_eq!(after[1] + after[2] - before[1] - before[2], 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_srv_records_give_hosts_and_ports() {
    let a = backend().await;
    let b = backend().await;
    let srv = |b: &Backend, host: &str| {
        format!(
            "--srv-host=_echo._tcp.backend.test,{host},{},0,10",
            b.addr.port()
        )
    };
    let dns = test_dns::Dnsmasq::start(
        "127.0.0.1 a.backend.test\n127.0.0.1 b.backend.test\n",
        &[srv(&a, "a.backend.test"), srv(&b, "b.backend.test")],
    );
    let mut config = ClientConfig::default();
    config.balance.dns_scheme = "tcp".to_owned();
    config.lb_strategy(LbStrategy::RoundRobin);
    let target = format!("dns://127.0.0.1:{}/_echo._tcp.backend.test", dns.port());
    let channel = Channel::<AnyConnection>::connect_with(&target, config)
        .await
        .unwrap();
    until_endpoints(&channel, "both from SRV", |e| {
        e.len() == 2 && e.iter().all(|e| e.connected)
    })
    .await;
    let mut addresses: Vec<String> = channel
        .endpoints()
        .iter()
        .map(|e| e.endpoint.to_string())
        .collect();
    addresses.sort();
    let mut expected = vec![format!("tcp://{}", a.addr), format!("tcp://{}", b.addr)];
    expected.sort();
    assert_eq!(addresses, expected);
    let client = EchoClient::new(channel);
    for _ in 0..10 {
        client.echo(echo(b"srv")).await.unwrap();
    }
    assert_eq!(
        (
            a.calls.load(Ordering::Relaxed),
            b.calls.load(Ordering::Relaxed)
        ),
        (5, 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_from_a_stream_the_application_supplies() {
    let a = backend().await;
    let b = backend().await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<rdmarpc_core::Endpoint>>();
    let updates =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|set| (set, rx)) },
        );
    let channel = Channel::<AnyConnection>::balanced(ClientConfig::default(), updates);
    let client = EchoClient::new(channel.clone());
    let url = |b: &Backend| format!("tcp://{}", b.addr).parse().unwrap();
    tx.send(vec![url(&a)]).unwrap();
    for _ in 0..20 {
        client.echo(echo(b"a")).await.unwrap();
    }
    tx.send(vec![url(&b)]).unwrap();
    until_endpoints(&channel, "switched to b", |e| {
        e.len() == 1 && e[0].endpoint.address == b.addr.to_string() && e[0].connected
    })
    .await;
    for _ in 0..20 {
        client.echo(echo(b"b")).await.unwrap();
    }
    assert_eq!(
        (
            a.calls.load(Ordering::Relaxed),
            b.calls.load(Ordering::Relaxed)
        ),
        (20, 20)
    );
    // A set without endpoints: calls fail fast with UNAVAILABLE.
    tx.send(Vec::new()).unwrap();
    until_endpoints(&channel, "none", |e| e.is_empty()).await;
    let status = client.echo(echo(b"none")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_of_two_choices_sends_less_to_a_slow_server() {
    let fast = backend().await;
    let slow = backend_with("127.0.0.1", 0, false, Duration::from_millis(20)).await;
    let target = list(&[&fast, &slow]);
    for strategy in [LbStrategy::PowerOfTwoChoices, LbStrategy::RoundRobin] {
        let before = (
            fast.calls.load(Ordering::Relaxed),
            slow.calls.load(Ordering::Relaxed),
        );
        let mut config = ClientConfig::default();
        config.lb_strategy(strategy);
        let channel = Channel::<AnyConnection>::connect_with(&target, config)
            .await
            .unwrap();
        until_endpoints(&channel, "both connected", |e| {
            e.len() == 2 && e.iter().all(|e| e.connected)
        })
        .await;
        let client = EchoClient::new(channel);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    for _ in 0..40 {
                        client.echo(echo(b"x")).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let f = fast.calls.load(Ordering::Relaxed) - before.0;
        let s = slow.calls.load(Ordering::Relaxed) - before.1;
        eprintln!("{strategy}: fast {f}, slow {s}");
        assert_eq!(f + s, 320);
        match strategy {
            // Calls pile up on the slow one: most go to the fast one.
            LbStrategy::PowerOfTwoChoices => assert!(s * 3 < f, "fast {f}, slow {s}"),
            // Each in turn, whatever their speed.
            _ => assert!(s.abs_diff(f) <= 16, "fast {f}, slow {s}"),
        }
    }
}
