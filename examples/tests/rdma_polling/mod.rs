//! A caller alone on its connection polls the completion queue for its response itself
//! (`Connection::spin_until`): counted by `RdmaCounters::found_by_spin`. The driver
//! stands aside meanwhile (callers' mode), and takes over for everything else on the
//! connection: streams, concurrent calls, a caller whose response outlasts its spin.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use examples::echo::echo_client::EchoClient;
use examples::echo::echo_server::EchoServer;
use examples::echo::EchoRequest;
use rdmarpc_core::Server;

use examples::interop::request_channel;
use rdmarpc_transport::AnyConnection;

use super::suite::Harness;
use super::{rdma_channel, settings, skip, wait_for_port, Rdma, BIG, NETWORK, SERVER_IP};

fn echo_server() -> Server {
    Server::builder()
        .add_service(EchoServer::new(examples::EchoService))
        .unwrap()
        .build()
}

fn request(i: usize, delay_ms: u32) -> EchoRequest {
    EchoRequest {
        payload: format!("call {i}").into_bytes().into(),
        delay_ms,
        ..Default::default()
    }
}

/// The RDMA counters of a client's connection.
pub(super) fn counters(client: &EchoClient<AnyConnection>) -> rdmarpc_transport_rdma::RdmaCounters {
    client
        .channel()
        .connection()
        .unwrap()
        .rdma_counters()
        .unwrap()
}

/// An echo-server process on rxe1 with its Prometheus metrics on 127.0.0.1, killed on
/// drop: a process of its own, so that its reader's spin and the test's callers' do not
/// share the process's spinners.
struct ServerProcess {
    child: Child,
    addr: String,
    metrics: String,
}

impl ServerProcess {
    /// With the environment's settings `env` (`RPC_SERVER_*`, `RPC_RDMA_*`).
    async fn start_with(port: u16, env: &[(&str, &str)]) -> ServerProcess {
        let addr = format!("{SERVER_IP}:{port}");
        let metrics = format!("127.0.0.1:{}", port + 1);
        let child = Command::new(env!("CARGO_BIN_EXE_echo-server"))
            .args([
                "--addr",
                &format!("rdma://{addr}"),
                "--metrics-addr",
                &metrics,
            ])
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .expect("start echo-server");
        wait_for_port(&addr).await;
        ServerProcess {
            child,
            addr,
            metrics,
        }
    }

    /// The value of counter `name` on its metrics page (published every second).
    async fn counter(&self, name: &str) -> u64 {
        let mut stream = tokio::net::TcpStream::connect(&self.metrics).await.unwrap();
        let get = format!(
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.metrics
        );
        stream.write_all(get.as_bytes()).await.unwrap();
        let mut page = String::new();
        stream.read_to_string(&mut page).await.unwrap();
        page.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_callers_and_an_idle_server_poll_for_their_frames_and_streams_still_flow() {
    if skip() {
        return;
    }
    // Alone: no other test's tasks take this process's spinner.
    let _net = NETWORK.write().await;
    // Spins of 20 ms, not 1: under load the guest's round trips outlast a millisecond.
    let server = ServerProcess::start_with(47211, &[("RPC_RDMA_AWAIT_SPIN_US", "20000")]).await;
    let mut spinning = settings(BIG);
    spinning.rdma.await_spin = Duration::from_millis(20);
    let client = EchoClient::new(rdma_channel(&server.addr, BIG, &spinning).await);
    for i in 0..100 {
        let reply = client.echo(request(i, 0)).await.unwrap().into_inner();
        assert_eq!(reply.payload, request(i, 0).payload);
    }
    let polled = counters(&client).found_by_spin;
    assert!(polled > 0, "no response was found by its caller's poll");
    // The server's reader, idle between calls, found requests by its own poll.
    let mut served = 0;
    for _ in 0..50 {
        served = server.counter("rpc_rdma_found_by_spin_total").await;
        if served > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(served > 0, "no request was found by the server's poll");
    // A response slower than the spin: awaited after it, the driver polling.
    let reply = client.echo(request(100, 60)).await.unwrap().into_inner();
    assert_eq!(reply.payload, request(100, 60).payload);
    // A stream opened after lone calls (the driver stood aside for them), with lone
    // calls and concurrent calls beside it: its replies come from the driver.
    let (tx, requests) = request_channel::<EchoRequest>();
    tx.send(request(0, 0)).await.unwrap();
    let mut replies = client.chat(requests).await.unwrap().into_inner();
    let calls = {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                let pair = tokio::join!(
                    client.echo(request(i, 0)),
                    client.echo(request(i + 1000, 1))
                );
                assert_eq!(pair.0.unwrap().into_inner().payload, request(i, 0).payload);
                let second = pair.1.unwrap().into_inner().payload;
                assert_eq!(second, request(i + 1000, 1).payload);
            }
        })
    };
    for i in 0..50 {
        if i > 0 {
            tx.send(request(i, 0)).await.unwrap();
        }
        let reply = tokio::time::timeout(Duration::from_secs(10), replies.message())
            .await
            .expect("the stream's reply came")
            .unwrap()
            .expect("a reply per request");
        assert_eq!(reply.payload, request(i, 0).payload, "reply {i}");
    }
    drop(tx);
    calls.await.unwrap();
    assert_eq!(counters(&client).errors, 0);
}

/// On a runtime of one thread a spinning caller would hold everything else: no caller
/// polls there, the driver does.
#[tokio::test(flavor = "current_thread")]
async fn no_caller_polls_on_a_runtime_of_one_thread() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = Rdma.start(echo_server()).await;
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    for i in 0..50 {
        let reply = client.echo(request(i, 0)).await.unwrap().into_inner();
        assert_eq!(reply.payload, request(i, 0).payload);
    }
    assert_eq!(counters(&client).found_by_spin, 0);
}

/// A client that calls one call after another without pause keeps the server's reader
/// of its connection busy polling for its next request: the reader must still go
/// through its timers (the connection is retired at `max_connection_age`, 500 ms here,
/// and the client moves on to new connections with every call answered) and leave the
/// server's other worker to a second client, whose calls, one every 20 ms, all come
/// back within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_without_pause_neither_outlives_its_connection_age_nor_starves_others() {
    if skip() {
        return;
    }
    let _net = NETWORK.write().await;
    let server = ServerProcess::start_with(
        47213,
        &[
            ("RPC_SERVER_MAX_CONNECTION_AGE_MS", "500"),
            ("RPC_SERVER_MAX_CONNECTION_AGE_GRACE_MS", "500"),
        ],
    )
    .await;
    let url = format!("rdma://{}", server.addr);
    // The busy caller, on a runtime of its own (its calls and the second client's
    // are on different runtimes; the process's spinners are shared).
    let busy = {
        let url = url.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let channel = rdmarpc_core::Channel::<AnyConnection>::connect(&url)
                    .await
                    .unwrap();
                let client = EchoClient::new(channel);
                let mut connections: Vec<std::sync::Arc<AnyConnection>> = Vec::new();
                let mut calls = 0;
                // Calls that failed UNAVAILABLE as their retired connection closed (seen
                // once in the TCG guest: a known bug, see issue 28's note); made again.
                let mut lost = 0;
                let started = std::time::Instant::now();
                while started.elapsed() < Duration::from_secs(3) {
                    let reply = match client.echo(request(calls, 0)).await {
                        Ok(reply) => reply.into_inner(),
                        Err(status) if status.code() == rdmarpc_core::Code::Unavailable => {
                            lost += 1;
                            assert!(lost <= 2, "{lost} calls lost to closing connections");
                            continue;
                        }
                        Err(status) => panic!("{status:?}"),
                    };
                    assert_eq!(reply.payload, request(calls, 0).payload);
                    calls += 1;
                    let now = client.channel().connection().unwrap();
                    if !connections.iter().any(|c| std::sync::Arc::ptr_eq(c, &now)) {
                        connections.push(now);
                    }
                }
                (calls, connections.len())
            })
        })
    };
    let other = EchoClient::new(
        rdmarpc_core::Channel::<AnyConnection>::connect(&url)
            .await
            .unwrap(),
    );
    let mut slowest = Duration::ZERO;
    for i in 0..100 {
        let started = std::time::Instant::now();
        let reply = other.echo(request(i, 0)).await.unwrap().into_inner();
        assert_eq!(reply.payload, request(i, 0).payload);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (calls, connections) = busy.join().unwrap();
    eprintln!(
        "busy caller: {calls} calls on {connections} connections in 3 s; the other's slowest call {slowest:?}"
    );
    assert!(calls > 100, "the busy caller made {calls} calls");
    assert!(
        connections >= 3,
        "3 s of calls at a 500 ms connection age went over {connections} connections"
    );
    assert!(slowest < Duration::from_secs(1), "a call took {slowest:?}");
}

/// Once an RDMA device is open, the per-call paths' clock (`rdmarpc_core::clock`) is the
/// cycle counter: in the guest (an emulated HPET as the system's clock source, an
/// emulated TSC) it must still tell the system clock's time, within a millisecond, over
/// its re-anchoring every 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_call_clock_agrees_with_the_system_clock() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = Rdma.start(echo_server()).await;
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    let margin = Duration::from_millis(1);
    for i in 0..40 {
        let reply = client.echo(request(i, 0)).await.unwrap().into_inner();
        assert_eq!(reply.payload, request(i, 0).payload);
        let before = std::time::Instant::now();
        let told = rdmarpc_core::clock::now();
        let after = std::time::Instant::now();
        assert!(
            told + margin >= before && told <= after + margin,
            "call {i}: {told:?} not within {before:?}..{after:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
