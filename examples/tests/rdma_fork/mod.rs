//! Registered memory across `fork` (issue 29): a process that serves and makes RDMA calls
//! while it starts child processes every 100 ms loses none and corrupts none. Half of the
//! children are started by a real `fork` (a `Command` with a uid set cannot use
//! `posix_spawn`, which shares the address space until `exec`): each one makes the
//! parent's private pages copy-on-write, registered buffers among them, at an arbitrary
//! point of the calls in flight.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::echo_server::EchoServer;
use examples::echo::EchoRequest;
use rdmarpc_core::Server;

use super::suite::Harness;
use super::{skip, Rdma, BIG, NETWORK};

/// The figures: a child every 100 ms, for 30 s.
const EVERY: Duration = Duration::from_millis(100);
const FOR: Duration = Duration::from_secs(30);

/// Call `i`'s payload: eager (3,000 bytes) or by rendezvous (300 KB), distinct per call.
fn payload(i: usize) -> Vec<u8> {
    let size = if i % 4 == 3 { 300_000 } else { 3_000 };
    (0..size).map(|k| (k * 31 + i * 7) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawning_children_while_serving_rdma_loses_and_corrupts_no_call() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let server = Server::builder()
        .add_service(EchoServer::new(examples::EchoService))
        .unwrap()
        .build();
    let addr = Rdma.start(server).await;
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    let done = Arc::new(AtomicBool::new(false));
    let spawner = {
        let done = done.clone();
        let uid = std::fs::metadata("/proc/self").expect("procfs").uid();
        std::thread::spawn(move || {
            let (mut forked, mut spawned) = (0u32, 0u32);
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                // On a schedule: one child per 100 ms however long the last one took.
                let next = start + EVERY * (forked + spawned);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                let mut child = Command::new("true");
                if (forked + spawned) % 2 == 0 {
                    // The same uid: allowed, and it rules posix_spawn out.
                    child.uid(uid);
                    forked += 1;
                } else {
                    spawned += 1;
                }
                let status = child.status().expect("start a child");
                assert!(status.success(), "true failed: {status}");
            }
            (forked, spawned)
        })
    };
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < FOR {
        // Four calls in flight at once, one of them by rendezvous.
        let replies = futures_util::future::join_all((calls..calls + 4).map(|i| {
            let client = client.clone();
            async move {
                let request = EchoRequest {
                    payload: payload(i).into(),
                    ..Default::default()
                };
                (i, client.echo(request).await)
            }
        }))
        .await;
        for (i, reply) in replies {
            let reply = reply.unwrap_or_else(|e| panic!("call {i}: {e}"));
            assert!(
                reply.into_inner().payload[..] == payload(i)[..],
                "call {i}: the reply is not its payload"
            );
        }
        calls += 4;
    }
    done.store(true, Ordering::Relaxed);
    let (forked, spawned) = spawner.join().expect("the spawner");
    eprintln!("{calls} calls, none lost or corrupted, while {forked} children were forked and {spawned} spawned");
    // 300 on schedule; an emulated guest may lag behind it.
    assert!(forked >= 100, "only {forked} forks in {FOR:?}");
    assert!(calls >= 100, "only {calls} calls in {FOR:?}");
    let counters = super::rdma_polling::counters(&client);
    assert!(
        counters.rendezvous_sends > 0 && counters.rendezvous_reads > 0,
        "no rendezvous both ways: {counters:?}"
    );
}
