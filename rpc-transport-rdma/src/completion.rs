//! Completion queues shared by many connections: a connection costs a QP and a little
//! state, not a CQ, a completion channel and a task of its own.
//!
//! Each device keeps, per tokio runtime, a pool of [`SharedCq`]s. A connection joins the
//! CQ with the fewest members that still has room for every completion its QP can have
//! outstanding (the sum of its send and receive queues' depths): a CQ never overflows,
//! which would move every QP on it to the error state. The first connections of a
//! runtime get a CQ each, up to one per CPU, on spread completion vectors; later ones
//! share them; a new CQ is made when every CQ is full.
//!
//! Whoever polls a shared CQ handles what it reaps for every member, in order, under the
//! CQ's poller lock: the CQ's driver task (below), or a task in `recv` that polls before
//! it waits. Completions are told apart by their QP number; those of a QP whose
//! connection is not started yet (the peer may send as soon as our QP is ready to
//! receive) wait in its member entry (at most its receive ring: nothing else is posted
//! before the start) and are handled when it starts.
//!
//! The driver task of a CQ polls while completions come, keeps polling for `poll_spin`
//! after the last one (`await_spin` while the members sent more frames than they
//! received: replies are due), then arms the CQ, polls once more and sleeps on the
//! completion channel. It ends when the CQ's last member is gone.
//!
//! The CQ's timer task runs its members' timers (pings after silence, the ping timeout,
//! the loan timeout): one task and one timer per CQ, not per connection.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};

use crate::connection::Inner;
use crate::device::Device;
use crate::protocol::session::Close;
use crate::verbs::{register_channel, wc_buffer, CompChannel, Completion, CompletionQueue, Event};

/// Completions reaped per poll.
const POLL_BATCH: usize = 32;
/// The members' timers are looked at no more often than this.
const MIN_TICK: Duration = Duration::from_millis(10);
/// Entries of a shared CQ at most (rxe keeps them in kernel memory; a hardware
/// provider may pin them: 32,768 entries of 64 bytes are 2 MiB).
const MAX_CQ_ENTRIES: u32 = 32 * 1024;

/// A completion queue shared by the connections of one device and runtime.
pub(crate) struct SharedCq {
    cq: Arc<CompletionQueue>,
    /// Entries of the CQ (the sum of the members' depths stays within it).
    capacity: u32,
    members: Mutex<Members>,
    poller: Mutex<Poller>,
    /// Frames the members sent and received: while more were sent, replies are due and
    /// the driver polls for `await_spin` rather than `poll_spin` before it sleeps.
    sent: AtomicU64,
    received: AtomicU64,
    poll_spin: Duration,
    await_spin: Duration,
    /// The CQ failed (its members with it): no connection joins it any more.
    failed: AtomicBool,
    /// Members started since the timer task last looked, and its wake-up.
    started: Mutex<Vec<u32>>,
    timers: Arc<Notify>,
    /// Dropped with the CQ: ends its driver task.
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for SharedCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members = self.members.lock();
        f.debug_struct("SharedCq")
            .field("capacity", &self.capacity)
            .field("used", &members.used)
            .field("members", &members.by_qp.len())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Members {
    /// Sum of the members' depths.
    used: u32,
    by_qp: HashMap<u32, Member>,
}

struct Member {
    /// Which membership this is (a QP number can be reused once its QP is destroyed).
    id: u64,
    /// Set when the connection starts.
    inner: Option<Weak<Inner>>,
    /// How often its timers are looked at, at least.
    period: Duration,
    /// Completions reaped before the start.
    early: Vec<Completion>,
}

/// What one poll needs: buffers reused from poll to poll.
struct Poller {
    wcs: Box<[rdma_sys::ibv_wc]>,
    reaped: Vec<Completion>,
    /// The connections with events in this batch, in the order first seen.
    batches: Vec<(u32, Arc<Inner>, Vec<Event>)>,
    spare: Vec<Vec<Event>>,
}

/// One connection's frames sent and received.
#[derive(Debug, Default)]
pub(crate) struct FrameCounts {
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
}

/// A pool entry: a CQ of one runtime.
#[derive(Debug)]
pub(crate) struct PoolEntry {
    runtime: tokio::runtime::Id,
    cq: Weak<SharedCq>,
}

/// A connection's place on a shared CQ: reserved before its QP exists, named by the QP
/// number once it does, given back when dropped (after the QP is destroyed: `Inner`
/// drops its rings first).
#[derive(Debug)]
pub(crate) struct Membership {
    shared: Arc<SharedCq>,
    depth: u32,
    qp_num: Option<u32>,
    id: u64,
}

/// Names memberships apart.
static NEXT_MEMBER: AtomicU64 = AtomicU64::new(1);

impl Membership {
    /// Reserves room for a QP with `depth` send and receive entries on a CQ of `device`
    /// for the current runtime, making a CQ (and its driver task) when none has room.
    ///
    /// # Errors
    /// Outside a tokio runtime, or creating the CQ failed.
    pub(crate) fn join(
        device: &Device,
        depth: u32,
        config: &crate::RdmaConfig,
    ) -> Result<Membership, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "RDMA connections need a tokio runtime".to_string())?;
        let id = runtime.id();
        let mut pool = device.cqs.lock();
        pool.retain(|e| e.cq.strong_count() > 0);
        let spread = std::thread::available_parallelism().map_or(1, |n| n.get());
        let live: Vec<Arc<SharedCq>> = pool
            .iter()
            .filter(|e| e.runtime == id)
            .filter_map(|e| e.cq.upgrade())
            .filter(|cq| !cq.failed.load(Ordering::Relaxed))
            .collect();
        let best = live
            .iter()
            .map(|cq| (cq, cq.members.lock().used))
            .filter(|(cq, used)| used + depth <= cq.capacity)
            .min_by_key(|(_, used)| *used)
            .map(|(cq, _)| cq.clone());
        let join = |cq: Arc<SharedCq>| {
            cq.members.lock().used += depth;
            Membership {
                shared: cq,
                depth,
                qp_num: None,
                id: NEXT_MEMBER.fetch_add(1, Ordering::Relaxed),
            }
        };
        if live.len() >= spread {
            if let Some(cq) = best {
                return Ok(join(cq));
            }
        }
        let capacity = device.context.max_cqe().min(MAX_CQ_ENTRIES);
        let vector = pool.iter().filter(|e| e.runtime == id).count() as u32;
        let created = if depth > capacity {
            Err(format!(
                "a queue pair of {depth} entries exceeds the device's completion queue ({capacity})"
            ))
        } else {
            SharedCq::start(device, capacity, vector, config, &runtime)
        };
        match (created, best) {
            (Ok(shared), _) => {
                pool.push(PoolEntry {
                    runtime: id,
                    cq: Arc::downgrade(&shared),
                });
                Ok(join(shared))
            }
            // One more CQ was only to spread the load: share one that has room (a
            // provider that pins CQ memory may refuse more under a memlock limit).
            (Err(e), Some(cq)) => {
                tracing::debug!("sharing a completion queue: creating one more failed: {e}");
                Ok(join(cq))
            }
            (Err(e), None) => Err(e),
        }
    }

    /// The CQ to create the QP on.
    pub(crate) fn cq(&self) -> &Arc<CompletionQueue> {
        &self.shared.cq
    }

    /// The shared CQ.
    pub(crate) fn shared(&self) -> &SharedCq {
        &self.shared
    }

    /// Names the member by its QP, before the QP can receive.
    pub(crate) fn admit(&mut self, qp_num: u32) {
        self.shared.members.lock().by_qp.insert(
            qp_num,
            Member {
                id: self.id,
                inner: None,
                period: Duration::MAX,
                early: Vec::new(),
            },
        );
        self.qp_num = Some(qp_num);
    }

    /// The connection started: its completions go to `inner` from now on, those that
    /// came before first; its timers are looked at at least every `period`.
    pub(crate) fn attach(&self, inner: &Arc<Inner>, period: Duration) {
        let Some(qp_num) = self.qp_num else { return };
        // The poller lock first: no poll is between reaping and handing out meanwhile.
        let mut poller = self.shared.poller.lock();
        let early = {
            let mut members = self.shared.members.lock();
            let Some(member) = members.by_qp.get_mut(&qp_num).filter(|m| m.id == self.id) else {
                return;
            };
            member.inner = Some(Arc::downgrade(inner));
            member.period = period.max(MIN_TICK);
            std::mem::take(&mut member.early)
        };
        if self.shared.failed.load(Ordering::Relaxed) {
            // Nothing drives this CQ any more.
            drop(poller);
            return inner.fail(Close::Failed("its completion queue failed".into()));
        }
        // The timer task schedules the new member.
        self.shared.started.lock().push(qp_num);
        self.shared.timers.notify_one();
        if early.is_empty() {
            return;
        }
        let mut events = poller.spare.pop().unwrap_or_default();
        for c in early {
            inner.rings.complete(c, &mut events);
        }
        crate::driver::handle_batch(inner, &mut events);
        poller.spare.push(events);
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut members = self.shared.members.lock();
        members.used -= self.depth;
        if let Some(qp_num) = self.qp_num {
            // Only its own entry: a new QP may have the number already.
            if members.by_qp.get(&qp_num).is_some_and(|m| m.id == self.id) {
                members.by_qp.remove(&qp_num);
            }
        }
    }
}

impl SharedCq {
    /// Creates a CQ of `capacity` entries on completion vector `vector`, with its channel
    /// and its driver task on `runtime`.
    fn start(
        device: &Device,
        capacity: u32,
        vector: u32,
        config: &crate::RdmaConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Arc<SharedCq>, String> {
        let channel = Arc::new(CompChannel::new(&device.context).map_err(|e| e.to_string())?);
        let cq = CompletionQueue::new(&device.context, capacity, Some(&channel), vector)
            .map_err(|e| e.to_string())?;
        let channel = {
            let _entered = runtime.enter();
            register_channel(channel)
                .map_err(|e| format!("registering a completion channel: {e}"))?
        };
        let (stop, stopped) = oneshot::channel();
        let shared = Arc::new(SharedCq {
            capacity: cq.depth().min(capacity),
            cq: Arc::new(cq),
            members: Mutex::default(),
            poller: Mutex::new(Poller {
                wcs: wc_buffer(POLL_BATCH),
                reaped: Vec::with_capacity(POLL_BATCH),
                batches: Vec::new(),
                spare: Vec::new(),
            }),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            poll_spin: config.poll_spin,
            await_spin: config.await_spin.max(config.poll_spin),
            failed: AtomicBool::new(false),
            started: Mutex::default(),
            timers: Arc::default(),
            _stop: stop,
        });
        tracing::debug!(
            device = device.context.name(),
            capacity,
            vector,
            "shared completion queue created"
        );
        runtime.spawn(drive(Arc::downgrade(&shared), channel, stopped));
        runtime.spawn(timers(Arc::downgrade(&shared), shared.timers.clone()));
        Ok(shared)
    }

    /// Counts a frame sent by a member.
    pub(crate) fn frame_sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a frame received by a member.
    pub(crate) fn frame_received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// A member ended: its frames sent and never answered (or received and never
    /// answered) no longer count.
    pub(crate) fn forget(&self, frames: &FrameCounts) {
        let (sent, received) = (
            frames.sent.load(Ordering::Relaxed),
            frames.received.load(Ordering::Relaxed),
        );
        if sent > received {
            self.received.fetch_add(sent - received, Ordering::Relaxed);
        } else {
            self.sent.fetch_add(received - sent, Ordering::Relaxed);
        }
    }

    fn awaiting(&self) -> bool {
        self.sent.load(Ordering::Relaxed) > self.received.load(Ordering::Relaxed)
    }

    /// Polls once, unless another task is polling: returns the completions handled (0
    /// also when another task polls).
    pub(crate) fn progress(&self) -> Result<usize, String> {
        match self.poller.try_lock() {
            Some(mut poller) => self.poll(&mut poller),
            None => Ok(0),
        }
    }

    /// Locks out every other poller while `f` runs (so frames waiting now go up before
    /// any that a poll would hand up).
    pub(crate) fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        let _poller = self.poller.lock();
        f()
    }

    /// Reaps one batch and hands each member its completions, in order.
    fn poll(&self, poller: &mut Poller) -> Result<usize, String> {
        let Poller {
            wcs,
            reaped,
            batches,
            spare,
        } = poller;
        reaped.clear();
        let n = self
            .cq
            .poll_into(wcs, reaped)
            .map_err(|e| format!("polling the completion queue: {e}"))?;
        if n == 0 {
            return Ok(0);
        }
        {
            let mut members = self.members.lock();
            for c in reaped.drain(..) {
                if let Some((_, inner, events)) = batches.iter_mut().find(|b| b.0 == c.qp_num) {
                    inner.rings.complete(c, events);
                    continue;
                }
                let Some(member) = members.by_qp.get_mut(&c.qp_num) else {
                    // A QP destroyed with completions still queued.
                    continue;
                };
                match &member.inner {
                    None => member.early.push(c),
                    Some(weak) => {
                        // None: the connection is being dropped (its QP with it).
                        if let Some(inner) = weak.upgrade() {
                            let mut events = spare.pop().unwrap_or_default();
                            inner.rings.complete(c, &mut events);
                            batches.push((c.qp_num, inner, events));
                        }
                    }
                }
            }
        }
        // Outside the members lock: handling may drop a connection, whose membership
        // takes it.
        for (_, inner, mut events) in batches.drain(..) {
            crate::driver::handle_batch(&inner, &mut events);
            events.clear();
            spare.push(events);
        }
        Ok(n)
    }

    /// The CQ failed: so did every connection on it.
    fn fail_all(&self, reason: &str) {
        self.failed.store(true, Ordering::Relaxed);
        tracing::error!("shared completion queue failed: {reason}");
        let members: Vec<Arc<Inner>> = self
            .members
            .lock()
            .by_qp
            .values()
            .filter_map(|m| m.inner.as_ref()?.upgrade())
            .collect();
        for inner in members {
            inner.fail(Close::Failed(reason.to_owned()));
        }
    }
}

impl SharedCq {
    /// Arms the CQ, then polls it once more, and really: a completion that arrived
    /// before arming raised no event (and a receiving task that polls now may have
    /// looked before it arrived). The completions handled.
    fn arm(&self) -> Result<usize, String> {
        self.cq
            .req_notify(false)
            .map_err(|e| format!("arming the completion queue: {e}"))?;
        let mut poller = self.poller.lock();
        self.poll(&mut poller)
    }

    /// Takes (and acknowledges) every event the completion channel has.
    fn take_events(&self) -> Result<(), String> {
        while self
            .cq
            .get_event_and_ack()
            .map_err(|e| format!("reading the completion channel: {e}"))?
        {}
        Ok(())
    }
}

/// The driver task of one shared CQ. Holds the CQ only while it works: it ends when the
/// CQ's last member is gone (the CQ's drop drops `stop`'s sender).
async fn drive(
    shared: Weak<SharedCq>,
    channel: AsyncFd<Arc<CompChannel>>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut idle_since: Option<Instant> = None;
    let mut spin = Duration::ZERO;
    let mut turns = 0u32;
    let mut batches = 0u32;
    loop {
        let Some(cq) = shared.upgrade() else { return };
        match cq.progress() {
            Ok(0) => {}
            Ok(_) => {
                idle_since = None;
                batches = batches.wrapping_add(1);
                drop(cq);
                if batches.is_multiple_of(16) {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            Err(reason) => return cq.fail_all(&reason),
        }
        // The clock is read every 8th turn only (a system call where the clock source is
        // not the TSC, as in emulated guests).
        turns = turns.wrapping_add(1);
        let since = match idle_since {
            Some(since) => since,
            None => {
                spin = if cq.awaiting() {
                    cq.await_spin
                } else {
                    cq.poll_spin
                };
                *idle_since.insert(Instant::now())
            }
        };
        if !turns.is_multiple_of(8) || since.elapsed() < spin {
            drop(cq);
            tokio::task::yield_now().await;
            continue;
        }
        match cq.arm() {
            Ok(0) => {}
            Ok(_) => {
                idle_since = None;
                continue;
            }
            Err(reason) => return cq.fail_all(&reason),
        }
        drop(cq);
        tokio::select! {
            ready = channel.readable() => match ready {
                Ok(mut guard) => {
                    guard.clear_ready();
                    let Some(cq) = shared.upgrade() else { return };
                    if let Err(reason) = cq.take_events() {
                        return cq.fail_all(&reason);
                    }
                    idle_since = None;
                }
                Err(e) => {
                    if let Some(cq) = shared.upgrade() {
                        cq.fail_all(&format!("waiting on the completion channel: {e}"));
                    }
                    return;
                }
            },
            _ = &mut stop => return,
        }
    }
}

/// The timer task of one shared CQ: runs each member's timers when they are due (at
/// least every member's period), in the order due (a heap: a tick visits only the
/// members due, not all). A member is first looked at when it starts (`woken`). Ends
/// when the CQ is gone.
async fn timers(shared: Weak<SharedCq>, woken: Arc<Notify>) {
    let mut due: BinaryHeap<Reverse<(Instant, u32)>> = BinaryHeap::new();
    let mut visit = Vec::new();
    loop {
        let next = due
            .peek()
            .map_or_else(|| Instant::now() + Duration::from_secs(1), |d| d.0 .0);
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            () = woken.notified() => {}
        }
        let Some(cq) = shared.upgrade() else { return };
        let now = Instant::now();
        for qp_num in cq.started.lock().drain(..) {
            due.push(Reverse((now, qp_num)));
        }
        while let Some(&Reverse((at, qp_num))) = due.peek() {
            if at > now {
                break;
            }
            due.pop();
            visit.push(qp_num);
        }
        let members: Vec<(u32, Arc<Inner>, Duration)> = {
            let members = cq.members.lock();
            visit
                .drain(..)
                .filter_map(|qp_num| {
                    let m = members.by_qp.get(&qp_num)?;
                    Some((qp_num, m.inner.as_ref()?.upgrade()?, m.period))
                })
                .collect()
        };
        drop(cq);
        // A member gone, or whose connection ended, is not scheduled again.
        for (qp_num, inner, period) in members {
            if let Some(at) = crate::driver::tick(&inner, now, period) {
                due.push(Reverse((at.max(now + MIN_TICK), qp_num)));
            }
        }
    }
}
