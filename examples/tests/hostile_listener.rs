//! Hostile peers against the listener of a real `echo-server` process (on 127.0.0.1):
//! sockets that never send a byte, hundreds at once from one address, each re-opened as
//! soon as the server closes it, must not keep a well-behaved client out, whether it
//! comes from another address or from the attackers' own. The handshake table is fair
//! (`max_handshakes_per_peer`) and a new socket displaces the oldest handshake of the
//! address holding the most, so only displacement (the handshake timeout is set far
//! beyond the calls' deadlines) can let the good client in. Each test prints its figures
//! (`hostile: …`); see `docs/limits.md`, "Listener".
//!
//! `HOSTILE_SERVER_BIN` runs them against another `echo-server` build (e.g. an older
//! one, to measure the "before" figures).

#[allow(dead_code)] // the tools of hostile.rs, of which this suite uses some
mod peer;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::EchoRequest;
use peer::*;
use rdmarpc_core::{Channel, ClientConfig};
use rdmarpc_transport_tcp::{TcpConfig, TcpConnection};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// Sockets each attacker holds.
const SILENT: usize = 300;
/// Rounds of calls of the good client, and calls in each.
const ROUNDS: usize = 3;
const CALLS: usize = 20;
/// Each good call's deadline (connect, handshake and the call), far below the handshake
/// timeout the server is given (10 s): only displacement lets the client in. Not 2 s: under
/// the churn the kernel's accept queue overflows now and then (`ListenOverflows`) and a
/// SYN dropped there is sent again after 1 s, then 2 s more.
const DEADLINE: Duration = Duration::from_secs(4);

/// A TCP socket from `source` (any port) to `server`.
async fn dial_from(source: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(server).await
}

/// `n` sockets from `source` that never send a byte, each re-opened as soon as the
/// server closes it, until the flood is stopped; `opened` counts the sockets opened. On a
/// thread and runtime of its own, like an attacker's process: the good client's tasks do
/// not wait behind the attacker's in one runtime's queue.
struct SilentFlood {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    opened: Arc<AtomicU64>,
}

impl SilentFlood {
    fn start(source: IpAddr, server: SocketAddr, n: usize) -> SilentFlood {
        let opened = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let counter = opened.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut flood = JoinSet::new();
                for _ in 0..n {
                    flood.spawn(silent_socket(source, server, counter.clone()));
                }
                let _ = stopped.await;
                flood.abort_all();
                while flood.join_next().await.is_some() {}
            });
        });
        SilentFlood {
            stop: Some(stop),
            thread: Some(thread),
            opened,
        }
    }

    fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Closes every socket of the flood.
    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

impl Drop for SilentFlood {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One silent socket from `source`, re-opened each time the server closes it.
async fn silent_socket(source: IpAddr, server: SocketAddr, opened: Arc<AtomicU64>) {
    loop {
        let Ok(mut socket) = dial_from(source, server).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        // Until the server closes it.
        let _ = socket.read(&mut [0u8; 1]).await;
    }
}

/// One echo call over a fresh connection from `source`, content checked.
async fn call_from(source: IpAddr, server: SocketAddr) -> Result<(), String> {
    let stream = dial_from(source, server).await.map_err(|e| e.to_string())?;
    let conn =
        TcpConnection::from_stream(stream, &TcpConfig::default()).map_err(|e| e.to_string())?;
    let client = EchoClient::new(Channel::with_config(conn, ClientConfig::default()));
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let reply = client
        .echo(EchoRequest {
            payload: payload.clone().into(),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(reply.into_inner().payload, payload, "echoed content");
    Ok(())
}

/// One echo call within [`DEADLINE`]: once, or, with `retry`, on a new connection 20 ms
/// after each failed one until the deadline (as a client with retries does); the time taken and
/// the connections used.
async fn call_within(
    source: IpAddr,
    server: SocketAddr,
    retry: bool,
) -> Result<(Duration, usize), String> {
    let started = Instant::now();
    let mut attempts = 0;
    let call = async {
        loop {
            attempts += 1;
            match call_from(source, server).await {
                Ok(()) => return Ok(started.elapsed()),
                Err(e) if !retry => return Err(e),
                // A client's backoff before it connects again.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    match tokio::time::timeout(DEADLINE, call).await {
        Ok(Ok(took)) => Ok((took, attempts)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "not served within {DEADLINE:?} ({attempts} connections)"
        )),
    }
}

/// What the good client got: calls served, the slowest, the calls that took more than
/// one connection, the first failure.
struct Served {
    ok: usize,
    worst: Duration,
    retried: usize,
    failure: Option<String>,
}

/// [`ROUNDS`] rounds of [`CALLS`] calls from `source`, one after the other.
async fn good_rounds(source: IpAddr, server: SocketAddr, retry: bool) -> Served {
    let mut served = Served {
        ok: 0,
        worst: Duration::ZERO,
        retried: 0,
        failure: None,
    };
    for _ in 0..ROUNDS {
        for _ in 0..CALLS {
            match call_within(source, server, retry).await {
                Ok((took, attempts)) => {
                    served.ok += 1;
                    served.worst = served.worst.max(took);
                    served.retried += usize::from(attempts > 1);
                }
                Err(e) => {
                    served.failure.get_or_insert(e);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    served
}

/// Runs [`SILENT`] silent sockets from `attacker` against a server started with `env`,
/// the good client calling from `good` meanwhile; checks that every call is served and
/// that the server's descriptors return to their baseline once the attacker leaves.
async fn flood_and_call(what: &str, env: &[(&str, &str)], attacker: &str, good: &str, retry: bool) {
    let mut server = ServerProcess::start(env);
    let addr: SocketAddr = server.addr().parse().unwrap();
    let (attacker, good): (IpAddr, IpAddr) = (attacker.parse().unwrap(), good.parse().unwrap());
    let fds0 = settled_fds(&server).await;
    let mut flood = SilentFlood::start(attacker, addr, SILENT);
    let deadline = Instant::now() + Duration::from_secs(20);
    while flood.opened() < (SILENT as u64) {
        assert!(Instant::now() < deadline, "the attacker's sockets open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = server.fds();
    let started = Instant::now();
    let served = good_rounds(good, addr, retry).await;
    let took = started.elapsed();
    let churn = flood.opened();
    flood.stop();
    let released = server.wait_fds_at_most(fds0, Duration::from_secs(10)).await;
    report(&format!(
        "listener, {what}: {SILENT} silent sockets from {attacker} ({churn} opened in all, server holding {} fds): {} of {} calls from {good} served within {DEADLINE:?} ({} of them on a second connection or later; slowest {:?}, all rounds in {took:?}; first failure {:?}); fds back to {fds0} after {released:?}",
        held.saturating_sub(fds0),
        served.ok,
        ROUNDS * CALLS,
        served.retried,
        served.worst,
        served.failure,
    ));
    assert!(server.is_alive(), "the server survives");
    assert_eq!(served.ok, ROUNDS * CALLS, "every good call is served");
    released.expect("every silent socket released");
}

/// An address holding hundreds of silent sockets (at the global cap) does not keep
/// another address out: the newcomer displaces the heaviest address's oldest handshake,
/// and the lighter address's handshakes are never displaced: every call is served on its
/// first connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_from_another_address_do_not_keep_a_client_out() {
    let env = [
        ("RPC_MAX_HANDSHAKES", "64"),
        ("RPC_HANDSHAKE_TIMEOUT_MS", "10000"),
    ];
    flood_and_call("another address", &env, "127.0.0.2", "127.0.0.1", false).await;
}

/// Silent sockets from the client's own address do not keep it out either: its new
/// socket displaces the oldest of its own address's handshakes (the address is the
/// heaviest at the cap). That socket is in turn the oldest after `max_handshakes - 1` newer
/// ones of the address, so under the attacker's churn (thousands of sockets a second) a
/// connection whose first bytes come late can be displaced: the client connects again
/// within the call's deadline, as a client with retries does (the figure tells how often).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_from_the_same_address_do_not_keep_its_client_out() {
    let env = [
        ("RPC_MAX_HANDSHAKES", "64"),
        ("RPC_HANDSHAKE_TIMEOUT_MS", "10000"),
    ];
    flood_and_call("the same address", &env, "127.0.0.3", "127.0.0.3", true).await;
}
