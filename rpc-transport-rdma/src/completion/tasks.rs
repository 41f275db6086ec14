//! A shared CQ's two tasks: the driver, which polls while completions come, spins a
//! little, then arms the CQ and sleeps on its completion channel; and the timer task,
//! which runs its members' timers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};

use super::{Member, SharedCq, MIN_TICK};
use crate::verbs::{CompChannel, Pace, SpinClock};

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
///
/// After a run of batches it yields, so that the tasks the batches woke (waiting in this
/// worker's slot) run. Idle, it spins for the CQ's spin length before it arms the CQ and
/// sleeps: each turn of the spin polls the CQ up to `BURST` times before it yields, as
/// each yield makes the runtime poll its I/O and timer driver (an `epoll_wait`, and
/// about five clock reads by tokio's timer and scheduler statistics) and a turn of one
/// poll paid that every few microseconds. A burst holds the worker for a few
/// microseconds at most. The spin is bounded by the cycle counter, not the clock (see
/// [`SpinClock`]). In callers' mode (a caller polls the CQ: [`SharedCq::spin_until`])
/// it neither spins nor arms, and polls once per tick until woken.
pub(super) async fn drive(
    shared: Weak<SharedCq>,
    channel: AsyncFd<Arc<CompChannel>>,
    wake: Arc<Notify>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut pace = Pace::default();
    let mut spin: Option<SpinClock> = None;
    let mut woke = false;
    let mut batches = 0u32;
    loop {
        let Some(cq) = shared.upgrade() else { return };
        match cq.progress() {
            Ok(0) => {}
            Ok(_) => {
                spin = None;
                woke = true;
                pace.tick();
                batches = batches.wrapping_add(1);
                drop(cq);
                if batches.is_multiple_of(16) {
                    woke = false;
                    tokio::task::yield_now().await;
                }
                continue;
            }
            Err(reason) => return cq.fail_all(&reason),
        }
        if std::mem::take(&mut woke) {
            drop(cq);
            tokio::task::yield_now().await;
            continue;
        }
        if cq.callers_poll.load(Ordering::Acquire) {
            spin = None;
            let spins = cq.spins.load(Ordering::Relaxed);
            drop(cq);
            if !stand_aside(&shared, &wake, &mut stop, spins).await {
                return;
            }
            continue;
        }
        let until = spin.get_or_insert_with(|| SpinClock::deadline(cq.spin_length(pace.gap())));
        match burst(&cq, until) {
            Ok(Some(0)) => {
                drop(cq);
                tokio::task::yield_now().await;
                continue;
            }
            Ok(Some(_)) => {
                spin = None;
                woke = true;
                pace.tick();
                continue;
            }
            Ok(None) => {}
            Err(reason) => return cq.fail_all(&reason),
        }
        spin = None;
        if cq.callers_poll.load(Ordering::Acquire) {
            continue;
        }
        match cq.arm() {
            Ok(0) => {}
            Ok(_) => {
                woke = true;
                pace.tick();
                continue;
            }
            Err(reason) => return cq.fail_all(&reason),
        }
        drop(cq);
        if !sleep_on_channel(&shared, &channel, &mut stop).await {
            return;
        }
    }
}

/// Callers' mode: waits until woken out of it, or one tick; after a tick with no spin
/// since `spins`, nobody polls: the driver leaves callers' mode. Whether to go on (not
/// when the CQ is gone).
async fn stand_aside(
    shared: &Weak<SharedCq>,
    wake: &Notify,
    stop: &mut oneshot::Receiver<()>,
    spins: u64,
) -> bool {
    tokio::select! {
        () = wake.notified() => true,
        () = tokio::time::sleep(MIN_TICK) => {
            let Some(cq) = shared.upgrade() else { return false };
            if cq.spins.load(Ordering::Relaxed) == spins {
                cq.callers_poll.store(false, Ordering::Release);
            }
            true
        }
        _ = stop => false,
    }
}

/// Sleeps on the (armed) CQ's completion channel until it has an event, and takes its
/// events. Whether to go on (not when the CQ is gone or failed).
async fn sleep_on_channel(
    shared: &Weak<SharedCq>,
    channel: &AsyncFd<Arc<CompChannel>>,
    stop: &mut oneshot::Receiver<()>,
) -> bool {
    tokio::select! {
        ready = channel.readable() => match ready {
            Ok(mut guard) => {
                guard.clear_ready();
                let Some(cq) = shared.upgrade() else { return false };
                if let Err(reason) = cq.take_events() {
                    cq.fail_all(&reason);
                    return false;
                }
                true
            }
            Err(e) => {
                if let Some(cq) = shared.upgrade() {
                    cq.fail_all(&format!("waiting on the completion channel: {e}"));
                }
                false
            }
        },
        _ = stop => false,
    }
}

/// Polls per turn of an idle spin.
const BURST: u32 = 16;

/// One turn of an idle spin: polls `cq` up to `BURST` times. The completions handled
/// (`Some(0)`: none, keep spinning), or `None` once `until` passed.
fn burst(cq: &SharedCq, until: &mut SpinClock) -> Result<Option<usize>, String> {
    for _ in 0..BURST {
        if until.passed() || cq.callers_poll.load(Ordering::Relaxed) {
            return Ok(None);
        }
        std::hint::spin_loop();
        let n = cq.progress()?;
        if n > 0 {
            return Ok(Some(n));
        }
    }
    Ok(Some(0))
}

/// The timer task of one shared CQ: runs each member's timers when they are due (at
/// least every member's period), in the order due (a heap: a tick visits only the
/// members due, not all). A member is first looked at when it starts (`woken`). Ends
/// when the CQ is gone.
pub(super) async fn timers(shared: Weak<SharedCq>, woken: Arc<Notify>) {
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
        let members: Vec<(u32, Arc<dyn Member>, Duration)> = {
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
            if let Some(at) = inner.tick(now, period) {
                due.push(Reverse((at.max(now + MIN_TICK), qp_num)));
            }
        }
    }
}
