//! A shared CQ's two tasks: the driver, which polls while completions come, spins a
//! little, then arms the CQ and sleeps on its completion channel; and the timer task,
//! which runs its members' timers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};

use super::{Member, SharedCq, MIN_TICK};
use crate::verbs::CompChannel;

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
pub(super) async fn drive(
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
