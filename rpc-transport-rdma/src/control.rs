//! Control traffic of a connection: re-posting receive slots, returning credits,
//! read-done tokens, ping and pong, and failing the connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::connection::{Inner, PEER_CLOSED};
use crate::counters::Counters;
use crate::protocol::{Kind, Prefix, PREFIX_LEN};
use crate::verbs::RecvSlot;

/// How long a graceful close waits for posted sends and lent buffers.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

impl Inner {
    /// Closes once every posted SEND has completed and the peer has read every lent
    /// buffer (or after [`CLOSE_GRACE`]): frames sent just before the close still arrive,
    /// where moving the QP to the error state at once would flush them. New frames are
    /// refused meanwhile; control traffic (read-done, credits) goes on.
    pub(crate) fn close_gracefully(self: &Arc<Self>) {
        {
            let mut state = self.state.lock();
            if state.closed || state.closing {
                return;
            }
            state.closing = true;
        }
        self.space.notify_waiters();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.fail("closed");
        };
        let inner = self.clone();
        let slots = self.rings.geometry().send_slots as usize;
        runtime.spawn(async move {
            let deadline = Instant::now() + CLOSE_GRACE;
            loop {
                let settled = {
                    let state = inner.state.lock();
                    state.closed || (state.free_send.len() == slots && state.lender.loans() == 0)
                };
                if settled || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            inner.fail("closed");
        });
    }

    /// Re-posts a receive slot and returns credits when enough are owed.
    pub(crate) fn repost(&self, slot: RecvSlot) {
        if self.state.lock().closed {
            return;
        }
        if let Err(e) = self.rings.post_recv(slot) {
            self.fail(&format!("re-posting a receive failed: {e}"));
            return;
        }
        let owed = {
            let mut state = self.state.lock();
            state.credits.handle_reposted();
            state.credits.should_return()
        };
        if owed {
            self.flush_control();
        }
    }

    /// Sends whatever control traffic is due (credits, read-done tokens, ping, pong) while
    /// a slot and a control credit are available. Called after every completion batch and
    /// whenever a re-post makes credits owed; never waits.
    pub(crate) fn flush_control(&self) {
        let max_tokens = (self.rings.geometry().slot_size as usize - PREFIX_LEN) / 8;
        loop {
            let mut state = self.state.lock();
            let due = !state.done_tokens.is_empty()
                || state.pong_due
                || state.ping_due
                || state.credits.should_return();
            if !due || state.closed || state.free_send.is_empty() {
                return;
            }
            if !state.credits.try_take_control() {
                return;
            }
            let mut slot = state.free_send.pop().expect("checked non-empty");
            let n = state.done_tokens.len().min(max_tokens);
            let drained: Vec<(u64, usize)> = state.done_tokens.drain(..n).collect();
            // From here the loans are the peer's to end: it counts them until it receives
            // this message (see protocol/loans.rs).
            for &(_, counted) in &drained {
                state.borrower.acknowledged(counted);
            }
            let tokens: Vec<u64> = drained.iter().map(|&(token, _)| token).collect();
            let mut flags = 0;
            if std::mem::take(&mut state.pong_due) {
                flags |= Prefix::PONG;
            }
            if std::mem::take(&mut state.ping_due) {
                flags |= Prefix::PING;
            }
            let reposted = state.credits.advertise();
            let bytes = self.rings.slot_mut(&mut slot);
            Prefix {
                kind: Kind::Control,
                flags,
                n_tokens: n as u16,
                reposted,
            }
            .encode(bytes);
            for (i, token) in tokens.iter().enumerate() {
                let at = PREFIX_LEN + 8 * i;
                bytes[at..at + 8].copy_from_slice(&token.to_le_bytes());
            }
            let posted = self.rings.post_send(slot, PREFIX_LEN + 8 * n);
            drop(state);
            match posted {
                Ok(()) => Counters::bump(&self.counters.control_sends, 1),
                Err((slot, e)) => {
                    self.state.lock().free_send.push(slot);
                    self.fail(&format!("posting a control message failed: {e}"));
                    return;
                }
            }
        }
    }

    /// Ends the connection: every call on it fails, the QP goes to the error state (so
    /// the NIC retires every posted work request), the driver stops.
    pub(crate) fn fail(&self, reason: &str) {
        let held = {
            let mut state = self.state.lock();
            if state.closed {
                return;
            }
            state.closed = true;
            std::mem::take(&mut state.in_order)
        };
        // Frames held back for ordering (they hold this connection: dropped outside the
        // lock, which their drop takes).
        drop(held);
        if reason == "closed" || reason == PEER_CLOSED {
            tracing::debug!(peer = %self.peer, "RDMA connection closing: {reason}");
        } else {
            Counters::bump(&self.counters.errors, 1);
            tracing::warn!(peer = %self.peer, "RDMA connection failed: {reason}");
        }
        self.closed.send_replace(Some(reason.to_owned()));
        if let Err(e) = self.rings.fail() {
            tracing::debug!("moving the QP to the error state: {e}");
        }
        self.space.notify_waiters();
        tracing::debug!(peer = %self.peer, counters = ?self.counters(), "RDMA connection closed");
    }
}
