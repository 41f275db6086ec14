//! The reading side of an [`Inbox`]: the consumer takes every queued message at once
//! (one lock for a whole run of them, however many arrived), reads them without the
//! lock, and settles what it read (window granted back to the peer, budget given back)
//! when it comes back for more or when half the window has been read (message by
//! message where the window comes from a connection's budget that other streams wait
//! on): what the peer sees is what reading message by message would show it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::budget::{retry, WaitsForRoom};
use super::inbox::{End, Inbox, InboxState};
use crate::account::Charge;
use crate::Status;

/// The messages a consumer took from its inbox and has not read yet, and what it read
/// and has not settled.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// Taken and not read: payload, window bytes charged, bytes held of the account.
    taken: VecDeque<(Bytes, u32, u32)>,
    /// What the taken messages hold of the account (each read gives its part back).
    held: Charge,
    /// Window bytes of the messages read since the last settlement.
    read: u64,
    /// Once `read` reaches it, window is due back to the peer: settle then.
    due: u64,
}

impl Reading {
    /// The next payload, the stream's failure, or its end (`None`; the trailers are then
    /// with the inbox).
    pub(crate) fn poll_next(
        &mut self,
        inbox: &Inbox,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Status>>> {
        loop {
            if !self.taken.is_empty() && inbox.discarded.load(Ordering::Acquire) {
                // The stream failed and its messages are of no use any more.
                self.taken.clear();
                self.held = Charge::none();
            }
            if let Some((payload, charged, held)) = self.taken.pop_front() {
                if held > 0 {
                    self.held.release(held as usize);
                }
                self.read += u64::from(charged);
                if self.read >= self.due {
                    let mut state = inbox.state.lock();
                    let waiting = self.settle(inbox, &mut state);
                    drop(state);
                    retry(waiting);
                }
                return Poll::Ready(Some(Ok(payload)));
            }
            let mut state = inbox.state.lock();
            let waiting = self.settle(inbox, &mut state);
            if !state.queue.is_empty() {
                std::mem::swap(&mut self.taken, &mut state.queue);
                self.held.merge(std::mem::take(&mut state.held));
                state.lent = self.taken.iter().map(|(_, c, _)| u64::from(*c)).sum();
                drop(state);
                retry(waiting);
                continue;
            }
            let end = match std::mem::replace(&mut state.end, End::Done) {
                End::Open => {
                    state.end = End::Open;
                    state.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                End::Closed(trailers) => {
                    state.headers = trailers; // handed out by `take_trailers`
                    Poll::Ready(None)
                }
                End::Failed(status) => Poll::Ready(Some(Err(status))),
                End::Done => Poll::Ready(None),
            };
            drop(state);
            retry(waiting);
            return end;
        }
    }

    /// Settles what was read since the last settlement: its window is consumed (granted
    /// back once half the window is, while the peer still sends) and its budget given
    /// back; returns who to retry.
    #[must_use]
    fn settle(&mut self, inbox: &Inbox, state: &mut InboxState) -> Vec<Weak<dyn WaitsForRoom>> {
        let read = std::mem::take(&mut self.read);
        let half = u64::from(state.target / 2);
        let mut waiting = Vec::new();
        if read > 0 {
            state.lent = state.lent.saturating_sub(read);
            waiting = inbox.give_back(state, read);
            state.unreturned += read;
            if matches!(state.end, End::Open) && state.unreturned >= half {
                let credits = std::mem::take(&mut state.unreturned);
                inbox.grant(state, credits);
            }
        }
        // With a connection budget, what is read goes back to it message by message, as
        // it is read: other streams waiting for room get it before this one's next grant
        // takes it again.
        self.due = if inbox.has_budget() {
            1
        } else {
            half.saturating_sub(state.unreturned).max(1)
        };
        waiting
    }
}
