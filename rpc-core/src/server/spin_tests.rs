//! An idle server connection whose transport lets it poll for its next request
//! ([`Connection::spin_until`]): a client that calls one call after another, each
//! request there before the spin ends, must not keep the reader from its timers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::tests::{code, next, request, TestService, SLEEP};
use crate::memory::{self, MemoryConnection};
use crate::transport::{Connection, TransportError};
use crate::wire::FrameKind;
use crate::{Code, Server, ServerConfig};

/// The server's end of a memory pair, whose spin waits up to a second for `done` (a
/// transport that polls as fast as the peer sends) and whose ready frames come one at
/// a time (never a run, so the reader never pauses its spins on its own).
struct Polling {
    inner: MemoryConnection,
    /// Spins that found their frame.
    found: Arc<AtomicUsize>,
}

impl Connection for Polling {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        self.inner.alloc(len).await
    }
    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        self.inner.send(frame).await
    }
    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        self.inner.recv().await
    }
    fn recv_ready(&self, out: &mut Vec<Bytes>, _max: usize) {
        self.inner.recv_ready(out, 1);
    }
    fn close(&self) {
        self.inner.close();
    }
    fn peer(&self) -> String {
        self.inner.peer()
    }
    fn spin_until(&self, done: &mut dyn FnMut() -> bool, others: &dyn Fn() -> bool) -> bool {
        if others() {
            return false;
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            if done() {
                self.found.fetch_add(1, Ordering::SeqCst);
                return true;
            }
            std::thread::yield_now();
        }
        false
    }
}

/// The client calls without pause from a thread of its own (its wake-ups do not wait
/// for the server's worker); the connection's age is 200 ms: its GOAWAY must come in
/// time although every request is found by the reader's spin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_calling_without_pause_still_gets_its_goaway_at_the_connection_age() {
    let mut config = ServerConfig::default();
    config.max_connection_age(
        Some(Duration::from_millis(200)),
        Some(Duration::from_millis(200)),
    );
    let server = Server::builder()
        .add_service(TestService::default())
        .unwrap()
        .config(config)
        .build();
    let (client, served) = memory::pair(1 << 20);
    let found = Arc::<AtomicUsize>::default();
    let conn = Polling {
        inner: served,
        found: Arc::clone(&found),
    };
    tokio::spawn(async move { server.serve_connection(conn).await });
    let calls = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let opened = Instant::now();
            let mut calls = 0;
            while opened.elapsed() < Duration::from_secs(5) {
                request(&client, calls + 1, SLEEP, 0, Duration::ZERO).await;
                let (header, _) = next(&client).await.expect("not closed yet");
                if header.kind == FrameKind::GoAway {
                    return (calls, Some(opened.elapsed()));
                }
                assert_eq!((header.call_id, code(&header)), (calls + 1, Code::Ok));
                calls += 1;
            }
            (calls, None)
        })
    });
    let (calls, goaway) = tokio::task::spawn_blocking(move || calls.join().unwrap())
        .await
        .unwrap();
    let found = found.load(Ordering::SeqCst);
    // Every request but those after a turn through `select!` is found by a spin.
    assert!(
        found as u64 * 2 >= calls && calls > 0,
        "{found} of {calls} requests found by the spin"
    );
    let goaway = goaway.unwrap_or_else(|| panic!("no GOAWAY within 5 s, {calls} calls"));
    assert!(
        goaway < Duration::from_secs(2),
        "GOAWAY after {goaway:?} at an age of 200 ms ({calls} calls)"
    );
}
