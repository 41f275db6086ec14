//! Control frames sent outside of a call's own task (CANCEL, PONG, PING, GOAWAY, stream
//! WINDOW_UPDATE), queued from contexts that cannot await (a call's `Drop`, the receive
//! loop, a stream's `poll_next`) and bounded.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::wire::FrameKind;

/// Cancels queued at most; beyond, a cancel is dropped (the server then runs that handler
/// to its end, which wastes work but loses nothing). Cancels queue up only while the
/// transport cannot take them, i.e. while the server does not read.
pub(crate) const MAX_QUEUED_CANCELS: usize = 4096;

/// The pending control frames of one connection. PONG and PING are coalesced (a flood
/// of server pings is answered by one pong for the latest), cancels are bounded, window
/// updates are summed per stream (one entry per open stream at most).
#[derive(Debug, Default)]
pub(crate) struct ControlQueue {
    state: Mutex<Pending>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    cancels: VecDeque<u64>,
    pong: Option<u64>,
    ping: Option<u64>,
    goaway: bool,
    windows: HashMap<u64, u64>,
    closed: bool,
}

/// One control frame to send: kind, call id, credits (window updates only).
pub(crate) type Control = (FrameKind, u64, u32);

impl ControlQueue {
    pub(crate) fn cancel(&self, call_id: u64) {
        let mut state = self.state.lock();
        if state.cancels.len() >= MAX_QUEUED_CANCELS {
            tracing::debug!(call_id, "cancel dropped: too many queued");
            return;
        }
        state.cancels.push_back(call_id);
        drop(state);
        self.notify.notify_one();
    }

    /// Cancels a streaming call: never dropped (a stream whose cancel were lost would
    /// wait for its window forever); bounded by the streams the channel opened, each
    /// cancelled once.
    pub(crate) fn cancel_stream(&self, call_id: u64) {
        self.state.lock().cancels.push_back(call_id);
        self.notify.notify_one();
    }

    pub(crate) fn pong(&self, id: u64) {
        self.state.lock().pong = Some(id);
        self.notify.notify_one();
    }

    pub(crate) fn ping(&self, id: u64) {
        self.state.lock().ping = Some(id);
        self.notify.notify_one();
    }

    pub(crate) fn goaway(&self) {
        self.state.lock().goaway = true;
        self.notify.notify_one();
    }

    /// Grants `credits` more bytes to stream `call_id`'s sender.
    pub(crate) fn window(&self, call_id: u64, credits: u32) {
        *self.state.lock().windows.entry(call_id).or_default() += u64::from(credits);
        self.notify.notify_one();
    }

    /// Forgets a window update not yet sent for stream `call_id`, which ended: a grant to
    /// it is of no use, and a peer that opens and ends streams while it reads slowly
    /// would otherwise grow the queue by one entry per stream.
    pub(crate) fn forget_window(&self, call_id: u64) {
        self.state.lock().windows.remove(&call_id);
    }

    /// Ends [`ControlQueue::next_batch`].
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_one();
    }

    /// Waits for frames to send; `None` once closed.
    pub(crate) async fn next_batch(&self) -> Option<Vec<Control>> {
        loop {
            match self.take_batch() {
                None => return None,
                Some(batch) if !batch.is_empty() => return Some(batch),
                Some(_) => self.notify.notified().await,
            }
        }
    }

    /// The frames to send now (perhaps none); `None` once closed.
    pub(crate) fn take_batch(&self) -> Option<Vec<Control>> {
        let mut state = self.state.lock();
        if state.closed {
            return None;
        }
        let mut batch: Vec<Control> = state
            .cancels
            .drain(..)
            .map(|id| (FrameKind::Cancel, id, 0))
            .collect();
        for (id, mut credits) in state.windows.drain() {
            // A grant over u32 (never, with windows under 2^31) goes in parts.
            while credits > 0 {
                let part = credits.min(u64::from(u32::MAX));
                batch.push((FrameKind::WindowUpdate, id, part as u32));
                credits -= part;
            }
        }
        if let Some(id) = state.pong.take() {
            batch.push((FrameKind::Pong, id, 0));
        }
        if let Some(id) = state.ping.take() {
            batch.push((FrameKind::Ping, id, 0));
        }
        if std::mem::take(&mut state.goaway) {
            batch.push((FrameKind::GoAway, 0, 0));
        }
        Some(batch)
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
            .filter(|(k, _, _)| *k == FrameKind::Cancel)
            .count();
        assert_eq!(cancels, MAX_QUEUED_CANCELS);
        assert_eq!(batch.last(), Some(&(FrameKind::Pong, 9_999, 0)));
        q.close();
        assert!(q.next_batch().await.is_none());
    }

    #[tokio::test]
    async fn an_ended_streams_update_is_forgotten() {
        let q = ControlQueue::default();
        for id in 0..100_000 {
            q.window(id, 10);
            q.forget_window(id);
        }
        q.window(7, 1);
        assert_eq!(q.state.lock().windows.len(), 1, "one entry per open stream");
        assert_eq!(
            q.next_batch().await.unwrap(),
            [(FrameKind::WindowUpdate, 7, 1)]
        );
    }

    #[tokio::test]
    async fn window_updates_are_summed_per_stream() {
        let q = ControlQueue::default();
        for _ in 0..1000 {
            q.window(5, 100);
            q.window(6, 1);
        }
        let mut batch = q.next_batch().await.unwrap();
        batch.sort_unstable_by_key(|c| c.1);
        assert_eq!(
            batch,
            [
                (FrameKind::WindowUpdate, 5, 100_000),
                (FrameKind::WindowUpdate, 6, 1000)
            ]
        );
    }
}
