//! A unary call that the transport lets poll for its response
//! ([`Connection::spin_until`]): the response found by the spin is the call's, and the
//! transport is told whether other calls still wait once the spin ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use super::tests::{Sleeper, SLEEP};
use crate::memory::{self, MemoryConnection};
use crate::transport::{Connection, TransportError};
use crate::{Channel, Request, Server};

/// A memory connection whose `spin_until` waits for `done` (its responses come from a
/// server on another thread) and records what each spin saw.
struct Spinning {
    inner: MemoryConnection,
    /// How long a spin lasts at most.
    bound: Duration,
    /// Set once a spin began.
    began: Arc<AtomicBool>,
    /// Per spin: whether `done` came, and what `others` said after; `None` for a
    /// waiter that was not alone (`others` true before: no spin).
    spins: Spins,
}

impl Connection for Spinning {
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
    fn close(&self) {
        self.inner.close();
    }
    fn peer(&self) -> String {
        self.inner.peer()
    }
    fn spin_until(&self, done: &mut dyn FnMut() -> bool, others: &dyn Fn() -> bool) -> bool {
        if others() {
            self.spins.lock().push(None);
            return false;
        }
        self.began.store(true, Ordering::SeqCst);
        let until = Instant::now() + self.bound;
        let got = loop {
            if done() {
                break true;
            }
            if Instant::now() >= until {
                break false;
            }
            std::thread::yield_now();
        };
        self.spins.lock().push(Some((got, others())));
        got
    }
}

type Spins = Arc<Mutex<Vec<Option<(bool, bool)>>>>;

/// A channel whose server runs on a runtime of its own thread, so its responses come
/// while the caller spins (for `bound` at most).
fn spinning_channel(bound: Duration) -> (Channel<Spinning>, Spins, Arc<AtomicBool>) {
    let (client, served) = memory::pair(1 << 20);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let server = Server::builder()
            .add_service(Sleeper::default())
            .unwrap()
            .build();
        runtime.block_on(server.serve_connection(served));
    });
    let (spins, began) = (Spins::default(), Arc::<AtomicBool>::default());
    let conn = Spinning {
        inner: client,
        bound,
        began: Arc::clone(&began),
        spins: Arc::clone(&spins),
    };
    (Channel::new(conn), spins, began)
}

async fn echo(channel: &Channel<Spinning>, ms: u32) -> u32 {
    channel
        .unary::<u32, u32>(Request::new(ms), &SLEEP)
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_call_takes_the_response_its_spin_found() {
    let (channel, spins, _) = spinning_channel(Duration::from_millis(20));
    for i in 0..20 {
        assert_eq!(echo(&channel, 0).await, 0, "call {i}");
    }
    // A response slower than the spin is awaited after it.
    assert_eq!(echo(&channel, 100).await, 100);
    let spins: Vec<(bool, bool)> = spins.lock().iter().map(|s| s.expect("alone")).collect();
    assert_eq!(spins.len(), 21, "every lone call spins: {spins:?}");
    // Nobody else waits, found or not (a caller whose response did not come is the
    // transport's to know of).
    assert!(spins.iter().all(|&(_, others)| !others), "{spins:?}");
    assert!(spins[..20].iter().any(|&(got, _)| got), "{spins:?}");
    assert_eq!(spins[20], (false, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_ending_with_calls_in_flight_says_so() {
    let (channel, spins, began) = spinning_channel(Duration::from_secs(5));
    // The first call is alone and spins (on a worker of its own); the second starts
    // while it spins, is not alone and does not spin (but tells the transport that it
    // waits); the first's response comes first: its spin ends with another call
    // waiting.
    let first = tokio::spawn({
        let channel = channel.clone();
        async move { echo(&channel, 100).await }
    });
    while !began.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(echo(&channel, 600).await, 600);
    assert_eq!(first.await.unwrap(), 100);
    assert_eq!(*spins.lock(), vec![None, Some((true, true))]);
}
