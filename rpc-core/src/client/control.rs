//! Control frames a channel sends outside of calls (CANCEL, PONG, PING, GOAWAY), queued
//! from contexts that cannot await (a call's `Drop`, the receive loop) and bounded.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::wire::FrameKind;

/// Cancels queued at most; beyond, a cancel is dropped (the server then runs that handler
/// to its end, which wastes work but loses nothing). Cancels queue up only while the
/// transport cannot take them, i.e. while the server does not read.
pub(super) const MAX_QUEUED_CANCELS: usize = 4096;

/// The pending control frames of one connection. PONG and PING are coalesced (a flood
/// of server pings is answered by one pong for the latest), cancels are bounded.
#[derive(Debug, Default)]
pub(super) struct ControlQueue {
    state: Mutex<Pending>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    cancels: VecDeque<u64>,
    pong: Option<u64>,
    ping: Option<u64>,
    goaway: bool,
    closed: bool,
}

impl ControlQueue {
    pub(super) fn cancel(&self, call_id: u64) {
        let mut state = self.state.lock();
        if state.cancels.len() >= MAX_QUEUED_CANCELS {
            tracing::debug!(call_id, "cancel dropped: too many queued");
            return;
        }
        state.cancels.push_back(call_id);
        drop(state);
        self.notify.notify_one();
    }

    pub(super) fn pong(&self, id: u64) {
        self.state.lock().pong = Some(id);
        self.notify.notify_one();
    }

    pub(super) fn ping(&self, id: u64) {
        self.state.lock().ping = Some(id);
        self.notify.notify_one();
    }

    pub(super) fn goaway(&self) {
        self.state.lock().goaway = true;
        self.notify.notify_one();
    }

    /// Ends [`ControlQueue::next_batch`].
    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_one();
    }

    /// Waits for frames to send; `None` once closed.
    pub(super) async fn next_batch(&self) -> Option<Vec<(FrameKind, u64)>> {
        loop {
            {
                let mut state = self.state.lock();
                if state.closed {
                    return None;
                }
                let mut batch: Vec<(FrameKind, u64)> = state
                    .cancels
                    .drain(..)
                    .map(|id| (FrameKind::Cancel, id))
                    .collect();
                if let Some(id) = state.pong.take() {
                    batch.push((FrameKind::Pong, id));
                }
                if let Some(id) = state.ping.take() {
                    batch.push((FrameKind::Ping, id));
                }
                if std::mem::take(&mut state.goaway) {
                    batch.push((FrameKind::GoAway, 0));
                }
                if !batch.is_empty() {
                    return Some(batch);
                }
            }
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn coalesces_pongs_and_bounds_cancels() {
        let q = ControlQueue::default();
        for id in 0..10_000 {
            q.pong(id);
            q.cancel(id);
        }
        let batch = q.next_batch().await.unwrap();
        let cancels = batch
            .iter()
            .filter(|(k, _)| *k == FrameKind::Cancel)
            .count();
        assert_eq!(cancels, MAX_QUEUED_CANCELS);
        assert_eq!(batch.last(), Some(&(FrameKind::Pong, 9_999)));
        q.close();
        assert!(q.next_batch().await.is_none());
    }
}
