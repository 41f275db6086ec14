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
//! received: replies are due; twice the averaged gap between batches, within
//! `await_spin`, while they come at a steady pace), then arms the CQ, polls once more and
//! sleeps on the completion channel. It ends when the CQ's last member is gone.
//!
//! A task alone on the CQ may poll it itself while it waits ([`SharedCq::spin_until`],
//! eRPC's way: the thread that waits polls): a caller for its response, an idle server
//! connection for its next request. It then finds it without a wake-up, and the driver
//! stands aside (callers' mode) instead
//! of spinning or arming the CQ, which would make every response raise an event and
//! wake a worker. The driver takes over again as soon as anyone else waits on the CQ (a
//! caller that stopped spinning without its response, a second caller, a stream, a
//! sender waiting for credit, a receiver, a new member), and at the latest one tick
//! (`MIN_TICK`) after the last spin; it polls once every tick meanwhile.
//!
//! The CQ's timer task runs its members' timers (pings after silence, the ping timeout,
//! the loan timeout): one task and one timer per CQ, not per connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::device::Device;
use crate::protocol::session::Close;
mod spin;
pub(crate) use self::spin::Spin;
mod tasks;

use self::tasks::{drive, timers};
use crate::verbs::{
    register_channel, wc_buffer, CompChannel, Completion, CompletionQueue, Event, Rings,
};

/// Completions reaped per poll.
const POLL_BATCH: usize = 32;
/// The members' timers are looked at no more often than this.
const MIN_TICK: Duration = Duration::from_millis(10);
/// Entries of a shared CQ at most (rxe keeps them in kernel memory; a hardware
/// provider may pin them: 32,768 entries of 64 bytes are 2 MiB).
const MAX_CQ_ENTRIES: u32 = 32 * 1024;

/// A connection as its shared CQ sees it (the connection's state implements it, in
/// `driver.rs`): the CQ hands it its completions and runs its timers without knowing
/// its type.
pub(crate) trait Member: Send + Sync {
    /// Its rings, which turn its completions into events.
    fn rings(&self) -> &Rings;
    /// Handles a batch of its events, in the order they completed, and drains `events`.
    /// Runs under the CQ's poller lock, so batches of one connection never overlap.
    fn handle(self: Arc<Self>, events: &mut Vec<Event>);
    /// Runs its timers due at `now`; when they are next due, at the latest
    /// `now + period`; `None` once it ended.
    fn tick(&self, now: Instant, period: Duration) -> Option<Instant>;
    /// Ends it (its CQ failed).
    fn fail(&self, why: Close);
}

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
    /// Callers poll the CQ (see [`SharedCq::spin_until`]): the driver neither spins nor
    /// arms the CQ while this is set.
    callers_poll: AtomicBool,
    /// A caller is spinning (one at a time).
    spinner: AtomicBool,
    /// Spins begun: the driver leaves callers' mode after a tick with none.
    spins: AtomicU64,
    /// Wakes the driver out of callers' mode.
    wake: Arc<Notify>,
    /// How long a task alone on the CQ spins: `await_spin` as configured (0 turns it
    /// off; `await_spin` above is at least `poll_spin`).
    caller_spin: Duration,
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
    by_qp: HashMap<u32, Entry>,
}

struct Entry {
    /// Which membership this is (a QP number can be reused once its QP is destroyed).
    id: u64,
    /// Set when the connection starts.
    inner: Option<Weak<dyn Member>>,
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
    batches: Vec<(u32, Arc<dyn Member>, Vec<Event>)>,
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
            Entry {
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
    pub(crate) fn attach<M: Member + 'static>(&self, inner: &Arc<M>, period: Duration) {
        let Some(qp_num) = self.qp_num else { return };
        // The poller lock first: no poll is between reaping and handing out meanwhile.
        let mut poller = self.shared.poller.lock();
        let early = {
            let mut members = self.shared.members.lock();
            let Some(member) = members.by_qp.get_mut(&qp_num).filter(|m| m.id == self.id) else {
                return;
            };
            let weak: Weak<dyn Member> = Arc::downgrade(inner) as _;
            member.inner = Some(weak);
            member.period = period.max(MIN_TICK);
            std::mem::take(&mut member.early)
        };
        if self.shared.failed.load(Ordering::Relaxed) {
            // Nothing drives this CQ any more.
            drop(poller);
            return inner.fail(Close::Failed("its completion queue failed".into()));
        }
        // A second member: its frames need the driver.
        self.shared.wake_driver();
        // The timer task schedules the new member.
        self.shared.started.lock().push(qp_num);
        self.shared.timers.notify_one();
        if early.is_empty() {
            return;
        }
        let mut events = poller.spare.pop().unwrap_or_default();
        for c in early {
            inner.rings().complete(c, &mut events);
        }
        M::handle(inner.clone(), &mut events);
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
            caller_spin: config.await_spin,
            failed: AtomicBool::new(false),
            callers_poll: AtomicBool::new(false),
            spinner: AtomicBool::new(false),
            spins: AtomicU64::new(0),
            wake: Arc::default(),
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
        runtime.spawn(drive(
            Arc::downgrade(&shared),
            channel,
            shared.wake.clone(),
            stopped,
        ));
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

    /// How long the driver spins once idle: `await_spin` while replies are due, else
    /// `poll_spin`, but twice the averaged `gap` between batches when that is longer
    /// and within `await_spin`: a server answering one call at a time then reaps the
    /// next request without sleeping (and waking) on the completion channel. The price:
    /// while batches come every `await_spin / 2` or sooner, the driver never sleeps (a
    /// CPU's worth of polling, yielding between bursts).
    fn spin_length(&self, gap: Option<Duration>) -> Duration {
        if self.awaiting() {
            return self.await_spin;
        }
        match gap {
            Some(gap) if gap * 2 <= self.await_spin => self.poll_spin.max(gap * 2),
            _ => self.poll_spin,
        }
    }

    /// Polls once, unless another task is polling: returns the completions handled (0
    /// also when another task polls).
    pub(crate) fn progress(&self) -> Result<usize, String> {
        match self.poller.try_lock() {
            Some(mut poller) => self.poll(&mut poller),
            None => Ok(0),
        }
    }

    /// Polls until the CQ has nothing more (at most `rounds` batches), waiting for a
    /// poller that holds it meanwhile: what completed before now is handed up when this
    /// returns. Returns the completions handled here.
    pub(crate) fn reap_all(&self, rounds: usize) -> Result<usize, String> {
        let mut poller = self.poller.lock();
        let mut handled = 0;
        for _ in 0..rounds {
            match self.poll(&mut poller)? {
                0 => break,
                n => handled += n,
            }
        }
        Ok(handled)
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
                    inner.rings().complete(c, events);
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
                            inner.rings().complete(c, &mut events);
                            batches.push((c.qp_num, inner, events));
                        }
                    }
                }
            }
        }
        // Outside the members lock: handling may drop a connection, whose membership
        // takes it.
        for (_, inner, mut events) in batches.drain(..) {
            inner.handle(&mut events);
            events.clear();
            spare.push(events);
        }
        Ok(n)
    }

    /// The CQ failed: so did every connection on it.
    fn fail_all(&self, reason: &str) {
        self.failed.store(true, Ordering::Relaxed);
        tracing::error!("shared completion queue failed: {reason}");
        let members: Vec<Arc<dyn Member>> = self
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
