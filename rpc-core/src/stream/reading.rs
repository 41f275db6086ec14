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
use super::inbox::{End, Inbox, InboxState, Queued};
use super::payloads::next_message;
use crate::Status;

/// The messages a consumer took from its inbox and has not read yet, and what it read
/// and has not settled.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// Taken and not read.
    taken: VecDeque<Queued>,
    /// What is left of the run of frames being read (see [`Inbox::push_frames`]).
    run: Bytes,
    /// What that run holds of the account (given back with its last message).
    run_held: u32,
    /// Account bytes of the messages read since the last settlement: their charge stays
    /// with the inbox (which gives it all back at once if the stream is discarded) and
    /// is given back when they are settled.
    read_held: u64,
    /// Window bytes of the messages read since the last settlement.
    read: u64,
    /// Once `read` reaches it, window is due back to the peer: settle then.
    due: u64,
    /// Messages handed out since the consumer last waited or yielded.
    since_yield: u32,
    /// The consumer yields to the runtime before its next message (see `poll_next`).
    yield_due: bool,
}

/// Most messages a consumer that always finds one ready reads before it yields.
const YIELD_EVERY: u32 = 1024;

impl Reading {
    /// The next payload, the stream's failure, or its end (`None`; the trailers are then
    /// with the inbox).
    pub(crate) fn poll_next(
        &mut self,
        inbox: &Inbox,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Status>>> {
        // A consumer that always finds a message ready still yields to the runtime once
        // it gave window back (so that the window update goes out while it reads on: on
        // one thread, or when the connection's writer waits in this worker's next-task
        // slot) and every `YIELD_EVERY` messages. Not per message budget (tokio's coop,
        // 128): each yield on a multi-thread runtime wakes a parked worker, which
        // stole the consumer or its connection's reader from the other (system calls,
        // context switches; a 64 B stream's client read 0.75x as fast on two workers as
        // on one).
        if std::mem::take(&mut self.yield_due) {
            cx.waker().wake_by_ref(); // (tokio: woken while it runs, the task yields)
            return Poll::Pending;
        }
        // Whether this poll granted window back (a window update is queued).
        let mut granted = false;
        loop {
            let holding = !self.taken.is_empty() || !self.run.is_empty();
            if holding && inbox.discarded.load(Ordering::Acquire) {
                // The stream failed and its messages are of no use any more.
                self.taken.clear();
                self.run = Bytes::new();
                self.read_held = 0;
            }
            if let Some((payload, charged, held)) = self.next_taken() {
                self.read_held += u64::from(held);
                self.read += u64::from(charged);
                if self.read >= self.due {
                    let mut state = inbox.state.lock();
                    let (waiting, did) = self.settle(inbox, &mut state);
                    drop(state);
                    retry(waiting);
                    granted |= did;
                }
                self.since_yield += 1;
                if granted || self.since_yield >= YIELD_EVERY {
                    self.since_yield = 0;
                    self.yield_due = true;
                }
                return Poll::Ready(Some(Ok(payload)));
            }
            let mut state = inbox.state.lock();
            let (waiting, did) = self.settle(inbox, &mut state);
            granted |= did;
            if !state.queue.is_empty() {
                std::mem::swap(&mut self.taken, &mut state.queue);
                debug_assert_eq!(state.lent, 0, "one reader, settled before it takes more");
                state.lent = self.taken.iter().map(|q| u64::from(q.charged)).sum();
                drop(state);
                retry(waiting);
                continue;
            }
            let end = match std::mem::replace(&mut state.end, End::Done) {
                End::Open => {
                    state.end = End::Open;
                    state.waker = Some(cx.waker().clone());
                    self.since_yield = 0; // (it waits: the runtime runs the others)
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

    /// The next message taken: its payload, the window bytes and the account bytes it
    /// gives back once read.
    fn next_taken(&mut self) -> Option<(Bytes, u32, u32)> {
        loop {
            if let Some((payload, len)) = next_message(&mut self.run) {
                let held = if self.run.is_empty() {
                    std::mem::take(&mut self.run_held)
                } else {
                    0
                };
                return Some((payload, len as u32, held));
            }
            let queued = self.taken.pop_front()?;
            if !queued.frames {
                return Some((queued.bytes, queued.charged, queued.held));
            }
            self.run = queued.bytes;
            self.run_held = queued.held;
        }
    }

    /// Settles what was read since the last settlement: its window is consumed (granted
    /// back once half the window is, while the peer still sends) and its budget given
    /// back; returns who to retry, and whether window was granted back.
    #[must_use]
    fn settle(
        &mut self,
        inbox: &Inbox,
        state: &mut InboxState,
    ) -> (Vec<Weak<dyn WaitsForRoom>>, bool) {
        let read = std::mem::take(&mut self.read);
        let read_held = std::mem::take(&mut self.read_held);
        if read_held > 0 {
            state.held.release(read_held as usize);
        }
        let half = u64::from(state.target / 2);
        let mut waiting = Vec::new();
        let mut granted = false;
        if read > 0 {
            state.lent = state.lent.saturating_sub(read);
            waiting = inbox.give_back(state, read);
            state.unreturned += read;
            if matches!(state.end, End::Open) && state.unreturned >= half {
                let credits = std::mem::take(&mut state.unreturned);
                inbox.grant(state, credits);
                granted = true;
            }
        }
        // With a connection budget, what is read goes back to it message by message, as
        // it is read: other streams waiting for room get it before this one's next grant
        // takes it again.
        self.due = if inbox.has_budget() {
            1
        } else if !matches!(state.end, End::Open) {
            u64::MAX // nothing more to grant
        } else {
            half.saturating_sub(state.unreturned).max(1)
        };
        (waiting, granted)
    }
}
