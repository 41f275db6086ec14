//! [`RdmaCounters`]: what a connection did, for tests, logs and load reports; and
//! [`process_counters`]: what every connection of the process did, for metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// A snapshot of one connection's transport counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaCounters {
    /// Frames sent eagerly: encoded into a send slot, one SEND (or several frames in one
    /// SEND: `batches`).
    pub eager_sends: u64,
    /// Frames sent by rendezvous: a descriptor by SEND, the frame pulled by the peer.
    pub rendezvous_sends: u64,
    /// Frames this side pulled with RDMA READ.
    pub rendezvous_reads: u64,
    /// Bytes pulled with RDMA READ.
    pub bytes_read: u64,
    /// Frames received eagerly.
    pub eager_receives: u64,
    /// Messages that carried several eager frames (frames that waited behind sends in
    /// flight, then went as one message).
    pub batches: u64,
    /// Control messages sent (credit returns, read-done, ping, pong).
    pub control_sends: u64,
    /// Times a sender had to wait for a credit or a free send slot.
    pub credit_stalls: u64,
    /// Rendezvous buffers registered (registration happens once per buffer, then reuse).
    pub registrations: u64,
    /// Send slots now (the send ring grows with the peer's grants).
    pub send_slots: u64,
    /// Receive slots posted for the peer now (the ring grows when the peer runs short).
    pub recv_slots: u64,
    /// Fatal errors (the connection failed).
    pub errors: u64,
    /// Received rendezvous frames handed to the application as kept memory (their
    /// `bytes` fields are slices of the READ target, not copies).
    pub kept_frames: u64,
    /// Frames sent with their large field lent from a kept received frame (a gathered
    /// send of a message that forwards or echoes what it received): no copy.
    pub lent_in_place: u64,
    /// Registered bytes of kept frames the application holds now (at most
    /// [`RdmaConfig::keep_bytes`](crate::RdmaConfig::keep_bytes)).
    pub kept_bytes: u64,
    /// Frames found by the task waiting for them, polling the completion queue itself
    /// ([`Connection::spin_until`](rdmarpc_core::Connection::spin_until)): a lone
    /// caller's response, an idle server connection's next request. No task hop, no
    /// wake-up.
    pub found_by_spin: u64,
    /// Rendezvous frames pulled through the connection's send slots into unpinned heap
    /// memory, slot by slot, because this process could not pin a buffer to receive them
    /// into (its locked-memory limit was spent): served, more slowly.
    pub bounced_reads: u64,
    /// Rendezvous frames this side pushed in pieces through its send slots because it
    /// could not pin a buffer to lend them from (its locked-memory limit was spent).
    pub pushed_sends: u64,
    /// Pushed frames received (the peer could not pin a buffer to lend them from).
    pub pushed_receives: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) eager_sends: AtomicU64,
    pub(crate) rendezvous_sends: AtomicU64,
    pub(crate) rendezvous_reads: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) eager_receives: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) control_sends: AtomicU64,
    pub(crate) credit_stalls: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) kept_frames: AtomicU64,
    pub(crate) lent_in_place: AtomicU64,
    pub(crate) found_by_spin: AtomicU64,
    pub(crate) bounced_reads: AtomicU64,
    pub(crate) pushed_sends: AtomicU64,
    pub(crate) pushed_receives: AtomicU64,
}

/// Every connection's counters, and what those that are gone counted: a connection's
/// counters are folded into the totals, under this one lock, once the registry holds the
/// last reference, so that none is counted twice or missed.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    retired: ProcessCounters::ZERO,
});

struct Registry {
    live: Vec<Arc<Counters>>,
    retired: ProcessCounters,
}

impl Registry {
    /// Folds the counters of connections that are gone into `retired`.
    fn prune(&mut self) {
        let retired = &mut self.retired;
        self.live.retain(|counters| {
            if Arc::strong_count(counters) > 1 {
                return true;
            }
            retired.add(counters);
            false
        });
    }
}

/// What every RDMA connection of this process counted, those that are gone included
/// ([`process_counters`]): the monotonic [`RdmaCounters`] fields, and how many
/// connections are live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessCounters {
    /// See [`RdmaCounters::eager_sends`].
    pub eager_sends: u64,
    /// See [`RdmaCounters::rendezvous_sends`].
    pub rendezvous_sends: u64,
    /// See [`RdmaCounters::rendezvous_reads`].
    pub rendezvous_reads: u64,
    /// See [`RdmaCounters::bytes_read`].
    pub bytes_read: u64,
    /// See [`RdmaCounters::eager_receives`].
    pub eager_receives: u64,
    /// See [`RdmaCounters::batches`].
    pub batches: u64,
    /// See [`RdmaCounters::control_sends`].
    pub control_sends: u64,
    /// See [`RdmaCounters::credit_stalls`].
    pub credit_stalls: u64,
    /// See [`RdmaCounters::errors`].
    pub errors: u64,
    /// See [`RdmaCounters::kept_frames`].
    pub kept_frames: u64,
    /// See [`RdmaCounters::lent_in_place`].
    pub lent_in_place: u64,
    /// See [`RdmaCounters::found_by_spin`].
    pub found_by_spin: u64,
    /// See [`RdmaCounters::bounced_reads`].
    pub bounced_reads: u64,
    /// See [`RdmaCounters::pushed_sends`].
    pub pushed_sends: u64,
    /// See [`RdmaCounters::pushed_receives`].
    pub pushed_receives: u64,
    /// Bytes of locked memory the RDMA transport has pinned or reserved now (every
    /// connection's reserve, and registrations beyond it).
    pub locked_bytes: u64,
    /// What this process may lock (`RLIMIT_MEMLOCK`, less what was locked before the
    /// transport), bytes; `None`: no limit applies (`CAP_IPC_LOCK`, `unlimited`) or it
    /// is not known.
    pub locked_limit: Option<u64>,
    /// RDMA connections whose state is still held (open, or closed with frames the
    /// application still holds).
    pub live_connections: u64,
}

impl ProcessCounters {
    const ZERO: ProcessCounters = ProcessCounters {
        eager_sends: 0,
        rendezvous_sends: 0,
        rendezvous_reads: 0,
        bytes_read: 0,
        eager_receives: 0,
        batches: 0,
        control_sends: 0,
        credit_stalls: 0,
        errors: 0,
        kept_frames: 0,
        lent_in_place: 0,
        found_by_spin: 0,
        bounced_reads: 0,
        pushed_sends: 0,
        pushed_receives: 0,
        locked_bytes: 0,
        locked_limit: None,
        live_connections: 0,
    };

    fn add(&mut self, c: &Counters) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.eager_sends += get(&c.eager_sends);
        self.rendezvous_sends += get(&c.rendezvous_sends);
        self.rendezvous_reads += get(&c.rendezvous_reads);
        self.bytes_read += get(&c.bytes_read);
        self.eager_receives += get(&c.eager_receives);
        self.batches += get(&c.batches);
        self.control_sends += get(&c.control_sends);
        self.credit_stalls += get(&c.credit_stalls);
        self.errors += get(&c.errors);
        self.kept_frames += get(&c.kept_frames);
        self.lent_in_place += get(&c.lent_in_place);
        self.found_by_spin += get(&c.found_by_spin);
        self.bounced_reads += get(&c.bounced_reads);
        self.pushed_sends += get(&c.pushed_sends);
        self.pushed_receives += get(&c.pushed_receives);
    }
}

/// What every RDMA connection of this process counted so far, closed ones included:
/// what a metrics exporter publishes (`rdmarpc_transport::publish_rdma_metrics`). Costs a
/// lock and a pass over the live connections; nothing on the data path.
pub fn process_counters() -> ProcessCounters {
    let mut registry = REGISTRY.lock();
    registry.prune();
    let mut total = registry.retired;
    for counters in &registry.live {
        total.add(counters);
        total.live_connections += 1;
    }
    drop(registry);
    let budget = crate::memlock::Budget::process();
    total.locked_bytes = budget.used();
    total.locked_limit = budget.room();
    total
}

impl Counters {
    /// Counters of a new connection, counted in [`process_counters`].
    pub(crate) fn registered() -> Arc<Counters> {
        let counters = Arc::new(Counters::default());
        let mut registry = REGISTRY.lock();
        registry.prune();
        registry.live.push(counters.clone());
        counters
    }

    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(
        &self,
        registrations: u64,
        slots: (u32, u32),
        kept_bytes: u64,
    ) -> RdmaCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RdmaCounters {
            eager_sends: get(&self.eager_sends),
            rendezvous_sends: get(&self.rendezvous_sends),
            rendezvous_reads: get(&self.rendezvous_reads),
            bytes_read: get(&self.bytes_read),
            eager_receives: get(&self.eager_receives),
            batches: get(&self.batches),
            control_sends: get(&self.control_sends),
            credit_stalls: get(&self.credit_stalls),
            registrations,
            send_slots: u64::from(slots.0),
            recv_slots: u64::from(slots.1),
            errors: get(&self.errors),
            kept_frames: get(&self.kept_frames),
            lent_in_place: get(&self.lent_in_place),
            kept_bytes,
            found_by_spin: get(&self.found_by_spin),
            bounced_reads: get(&self.bounced_reads),
            pushed_sends: get(&self.pushed_sends),
            pushed_receives: get(&self.pushed_receives),
        }
    }
}
