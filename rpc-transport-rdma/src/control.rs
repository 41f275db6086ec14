//! Control traffic of a connection: re-posting receive slots, returning credits,
//! read-done tokens, ping and pong, and failing the connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::connection::Inner;
use crate::counters::Counters;
use crate::protocol::session::Close;
use crate::protocol::{Kind, PREFIX_LEN};
use crate::verbs::RecvSlot;

/// How long a graceful close waits for posted sends and lent buffers.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

impl Inner {
    /// Closes once every posted SEND has completed and the peer has read every lent
    /// buffer (or after [`CLOSE_GRACE`]): frames sent just before the close still arrive,
    /// where moving the QP to the error state at once would flush them. New frames are
    /// refused meanwhile; control traffic (read-done, credits) goes on.
    pub(crate) fn close_gracefully(self: &Arc<Self>) {
        if !self.state.lock().session.start_closing() {
            return;
        }
        self.space.notify_waiters();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.fail(Close::Local);
        };
        // The completions it waits for are the driver's to reap (nobody spins for them).
        self.completion.shared().wake_driver();
        let inner = self.clone();
        runtime.spawn(async move {
            let deadline = Instant::now() + CLOSE_GRACE;
            loop {
                let settled = {
                    let slots = inner.rings.send_slots() as usize;
                    let state = inner.state.lock();
                    state.session.is_closed()
                        || (state.sends.all_free(slots) && state.session.loans() == 0)
                };
                if settled || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            inner.fail(Close::Local);
        });
    }

    /// Re-posts a receive slot and sends control traffic when it is due.
    pub(crate) fn repost(&self, slot: RecvSlot) {
        if self.state.lock().session.is_closed() {
            return;
        }
        if let Err(e) = self.rings.post_recv(slot) {
            self.fail(Close::Failed(format!("re-posting a receive failed: {e}")));
            return;
        }
        let due = {
            let mut state = self.state.lock();
            state.session.handle_reposted();
            state.session.control_due()
        };
        if due {
            self.flush_control();
        }
    }

    /// Sends whatever control traffic the session has due (credits, read-done tokens,
    /// ping, pong) while a slot and a control credit are available. Called after every
    /// completion batch and whenever a re-post or a consumed frame makes one due; never
    /// waits.
    pub(crate) fn flush_control(&self) {
        loop {
            let mut state = self.state.lock();
            if !state.sends.has_free() {
                return;
            }
            let Some(control) = state.session.poll_control() else {
                return;
            };
            let mut slot = state.sends.take().expect("checked non-empty");
            let n = control.tokens.len();
            let bytes = self.rings.slot_mut(&mut slot);
            control.advert.prefix(Kind::Control, n as u16).encode(bytes);
            for (i, token) in control.tokens.iter().enumerate() {
                let at = PREFIX_LEN + 8 * i;
                bytes[at..at + 8].copy_from_slice(&token.to_le_bytes());
            }
            let posted = state.sends.post(&self.rings, slot, PREFIX_LEN + 8 * n);
            drop(state);
            match posted {
                Ok(()) => Counters::bump(&self.counters.control_sends, 1),
                Err(e) => {
                    self.fail(Close::Failed(format!(
                        "posting a control message failed: {e}"
                    )));
                    return;
                }
            }
        }
    }

    /// Ends the connection: every call on it fails, the QP goes to the error state (so
    /// the NIC retires every posted work request), the driver stops.
    pub(crate) fn fail(&self, why: Close) {
        let Some(held) = self.state.lock().session.close(why.clone()) else {
            return;
        };
        // Frames held back for ordering (they hold this connection: dropped outside the
        // lock, which their drop takes).
        drop(held);
        if why.is_clean() {
            tracing::debug!(peer = %self.peer, "RDMA connection closing: {why}");
        } else {
            Counters::bump(&self.counters.errors, 1);
            tracing::warn!(peer = %self.peer, "RDMA connection failed: {why}");
        }
        self.closed.send_replace(Some(why));
        self.loan_charges.clear();
        self.receiving.wake();
        if let Err(e) = self.rings.fail() {
            tracing::debug!("moving the QP to the error state: {e}");
        }
        self.space.notify_waiters();
        tracing::debug!(peer = %self.peer, counters = ?self.counters(), "RDMA connection closed");
    }
}
