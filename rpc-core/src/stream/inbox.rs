//! The receiving half of a stream: queues the peer's messages, grants its window and
//! checks that the peer keeps to it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;

use super::budget::{retry, Budget, WaitsForRoom};
use crate::account::{Account, Charge, Resource};
use crate::control::ControlQueue;
use crate::violation::Violation;
use crate::wire::MAX_STREAM_WINDOW;
use crate::{Metadata, Status};

/// The receive half of one stream: messages the peer sent that the application has not
/// taken yet, within the window this side granted.
pub(crate) struct Inbox {
    pub(super) call_id: u64,
    /// Where window updates go (sent by the connection's control task).
    control: Arc<ControlQueue>,
    /// The connection's bound on the windows its inboxes grant, if it has one.
    budget: Option<Arc<Budget>>,
    /// This inbox, to wait for room in the budget.
    me: Weak<Inbox>,
    /// The connection's account (a server's request stream): queued messages are held
    /// bytes, charged to the connection, its peer and the server until consumed.
    account: Option<Account>,
    /// Set once the queue was emptied for good ([`Inbox::fail`] discarding, or
    /// [`Inbox::abandon`]): the reader drops the messages it took and has not read on
    /// its next poll (their account charge went back at once, with the queue's).
    pub(super) discarded: AtomicBool,
    pub(super) state: Mutex<InboxState>,
}

pub(super) struct InboxState {
    /// Messages the peer sent and the reader has not taken.
    pub(super) queue: VecDeque<Queued>,
    /// Window bytes of the messages the reader took from the queue and has not settled
    /// (see [`Reading`](super::reading::Reading)): still unconsumed for the window.
    pub(super) lent: u64,
    /// What the peer may still send: it sends while this is positive.
    pub(super) window: i64,
    /// The window this side keeps granting.
    pub(super) target: u32,
    /// Bytes consumed and not yet granted back.
    pub(super) unreturned: u64,
    /// Window granted from the budget and not given back (with a budget).
    pub(super) holding: u64,
    /// Window this side wants to grant but the budget had no room for.
    pub(super) deferred: u64,
    /// Whether this inbox waits in the budget's queue.
    pub(super) waiting: bool,
    /// What the queued messages hold of the account (with one).
    pub(super) held: Charge,
    /// Response headers (client side), until taken.
    pub(super) headers: Option<Metadata>,
    pub(super) end: End,
    pub(super) waker: Option<Waker>,
}

/// A queued message, or a run of them.
#[derive(Debug)]
pub(super) struct Queued {
    /// A message's payload, or (`frames`) whole message frames back to back.
    pub(super) bytes: Bytes,
    /// The window bytes it was charged (its frames' length).
    pub(super) charged: u32,
    /// What it holds of the account.
    pub(super) held: u32,
    /// Whether `bytes` holds frames (a run from [`Inbox::push_frames`]).
    pub(super) frames: bool,
}

pub(super) enum End {
    Open,
    /// The peer closed its side (its END_STREAM), with trailers on the client side.
    Closed(Option<Metadata>),
    /// The stream failed: the status is delivered after the queued messages.
    Failed(Status),
    /// Everything was delivered, or the consumer is gone: later messages are discarded.
    Done,
}

impl Inbox {
    /// An inbox that keeps granting `target` bytes, of which the peer knows `granted`
    /// now (the client announces its whole window in its request; a server grants its
    /// own with [`Inbox::grant_rest`] when the call starts).
    pub(crate) fn new(
        call_id: u64,
        control: Arc<ControlQueue>,
        target: u32,
        granted: u32,
    ) -> Inbox {
        let target = target.clamp(1, MAX_STREAM_WINDOW as u32);
        Inbox {
            call_id,
            control,
            budget: None,
            me: Weak::new(),
            account: None,
            discarded: AtomicBool::new(false),
            state: Mutex::new(InboxState {
                queue: VecDeque::new(),
                lent: 0,
                window: i64::from(granted.min(target)),
                target,
                unreturned: 0,
                holding: 0,
                deferred: 0,
                waiting: false,
                held: Charge::none(),
                headers: None,
                end: End::Open,
                waker: None,
            }),
        }
    }

    /// An inbox that grants its windows from `budget` and has granted nothing yet (a
    /// server's request stream, granted its window when the call starts); its queued
    /// messages are charged to `account` (bytes), and a message the account has no room
    /// for fails the stream with `RESOURCE_EXHAUSTED`.
    pub(crate) fn with_budget(
        call_id: u64,
        control: Arc<ControlQueue>,
        target: u32,
        budget: Arc<Budget>,
        account: Account,
    ) -> Arc<Inbox> {
        Arc::new_cyclic(|me| {
            let mut inbox = Inbox::new(call_id, control, target, 0);
            inbox.budget = Some(budget);
            inbox.me = me.clone();
            inbox.account = Some(account);
            inbox
        })
    }

    /// Grants the peer `wanted` more bytes (and what was deferred), as far as the budget
    /// allows; the rest waits for room.
    pub(super) fn grant(&self, state: &mut InboxState, wanted: u64) {
        let Some(budget) = &self.budget else {
            state.window += wanted as i64;
            self.control
                .window(self.call_id, wanted.min(u64::from(u32::MAX)) as u32);
            return;
        };
        let total = wanted + std::mem::take(&mut state.deferred);
        let got = budget.commit(total.min(u64::from(u32::MAX)) as usize) as u64;
        state.deferred = total - got;
        if got > 0 {
            state.holding += got;
            state.window += got as i64;
            self.control.window(self.call_id, got as u32);
        }
        if state.deferred > 0 && !state.waiting {
            state.waiting = true;
            budget.wait(self.me.clone() as Weak<dyn WaitsForRoom>);
        }
    }

    /// Whether its window comes from a connection's budget.
    pub(super) fn has_budget(&self) -> bool {
        self.budget.is_some()
    }

    /// The budget has room again: grants what was deferred.
    pub(super) fn retry_grant(&self) {
        let mut state = self.state.lock();
        state.waiting = false;
        if matches!(state.end, End::Open) && state.deferred > 0 {
            self.grant(&mut state, 0);
        }
    }

    /// Gives `bytes` of this inbox's window back to the budget (those that backed
    /// consumed messages, or all of it when the stream ends); returns who to retry.
    #[must_use]
    pub(super) fn give_back(
        &self,
        state: &mut InboxState,
        bytes: u64,
    ) -> Vec<Weak<dyn WaitsForRoom>> {
        let Some(budget) = &self.budget else {
            return Vec::new();
        };
        let bytes = bytes.min(state.holding);
        state.holding -= bytes;
        budget.release(bytes as usize)
    }

    /// The stream takes no more messages: the window not backing queued ones (and
    /// anything deferred) goes back to the budget.
    #[must_use]
    pub(super) fn stop_granting(&self, state: &mut InboxState) -> Vec<Weak<dyn WaitsForRoom>> {
        state.deferred = 0;
        let queued: u64 = state
            .queue
            .iter()
            .map(|queued| u64::from(queued.charged))
            .sum::<u64>()
            + state.lent;
        let unused = state.holding.saturating_sub(queued);
        self.give_back(state, unused)
    }

    /// Empties the queue (its messages are of no use any more): the whole window goes
    /// back to the budget.
    #[must_use]
    pub(super) fn clear(&self, state: &mut InboxState) -> Vec<Weak<dyn WaitsForRoom>> {
        state.queue.clear();
        state.held = Charge::none();
        state.lent = 0;
        self.discarded.store(true, Ordering::Release);
        state.deferred = 0;
        let all = state.holding;
        self.give_back(state, all)
    }

    /// Grants the peer the rest of the window (a window update).
    pub(crate) fn grant_rest(&self) {
        let mut state = self.state.lock();
        let rest = i64::from(state.target) - state.window;
        if rest > 0 && matches!(state.end, End::Open) {
            self.grant(&mut state, rest as u64);
        }
    }

    /// A message from the peer, `charged` frame bytes.
    ///
    /// # Errors
    /// The peer broke the stream's rules (sent past its window, or after its END_STREAM):
    /// the caller closes the connection.
    pub(crate) fn push(&self, charged: usize, payload: Bytes) -> Result<(), Violation> {
        self.push_run([(charged, payload)])
    }

    /// Messages from the peer that arrived together, each with the frame bytes it is
    /// charged, queued under one lock with one wake-up (as [`Inbox::push`] each).
    ///
    /// # Errors
    /// As [`Inbox::push`]: the first message that breaks the rules (those before it are
    /// queued).
    pub(crate) fn push_run(
        &self,
        run: impl IntoIterator<Item = (usize, Bytes)>,
    ) -> Result<(), Violation> {
        let mut state = self.state.lock();
        let mut waiting = Vec::new();
        let result = (|| {
            for (charged, payload) in run {
                match state.end {
                    End::Open => {}
                    End::Closed(_) => {
                        return Err(Violation::MessageAfterEnd {
                            call_id: self.call_id,
                        })
                    }
                    End::Failed(_) | End::Done => return Ok(()), // discarded
                }
                if state.window <= 0 {
                    return Err(Violation::PastWindow {
                        call_id: self.call_id,
                    });
                }
                let charged = charged.min(u32::MAX as usize);
                state.window -= charged as i64;
                let mut held = 0;
                if let Some(account) = &self.account {
                    match account.try_charge(Resource::Bytes, charged) {
                        Ok(charge) => {
                            held = charge.amount() as u32;
                            state.held.merge(charge);
                        }
                        Err(exhausted) => {
                            // Held bytes are bounded per connection, peer and server:
                            // the stream fails after what it queued; the rest is dropped.
                            waiting = self.stop_granting(&mut state);
                            state.end = End::Failed(Status::resource_exhausted(format!(
                                "a request stream message of {charged} bytes: {exhausted}"
                            )));
                            return Ok(());
                        }
                    }
                }
                state.queue.push_back(Queued {
                    bytes: payload,
                    charged: charged as u32,
                    held,
                    frames: false,
                });
            }
            Ok(())
        })();
        wake(&mut state);
        drop(state);
        retry(waiting);
        result
    }

    /// A run of this stream's messages as whole frames back to back in `frames` (a copy
    /// of them made for this stream: see [`crate::wire::message_run`]), the last of them
    /// `last_len` bytes long: one queue entry, which the reader splits, charged as the
    /// messages would be one by one. Where a message of the run breaks the rules or the
    /// account has no room for all of it, the run is queued message by message, as
    /// [`Inbox::push_run`] does.
    ///
    /// # Errors
    /// As [`Inbox::push_run`].
    pub(crate) fn push_frames(&self, frames: Bytes, last_len: usize) -> Result<(), Violation> {
        let total = frames.len();
        let mut state = self.state.lock();
        // Each message was sent while the window was positive: the last one too.
        let fits = matches!(state.end, End::Open)
            && total <= u32::MAX as usize
            && state.window - (total - last_len) as i64 > 0;
        let charge = match &self.account {
            _ if !fits => None,
            None => Some(Charge::none()),
            Some(account) => account.try_charge(Resource::Bytes, total).ok(),
        };
        let Some(charge) = charge else {
            drop(state);
            return self.push_run(super::payloads::split_frames(frames));
        };
        state.window -= total as i64;
        let held = charge.amount() as u32;
        state.held.merge(charge);
        state.queue.push_back(Queued {
            bytes: frames,
            charged: total as u32,
            held,
            frames: true,
        });
        wake(&mut state);
        Ok(())
    }

    /// The peer closed its side; `trailers` end a response stream.
    ///
    /// # Errors
    /// A second END_STREAM.
    pub(crate) fn close(&self, trailers: Option<Metadata>) -> Result<(), Violation> {
        let mut state = self.state.lock();
        match state.end {
            End::Open => state.end = End::Closed(trailers),
            End::Closed(_) => {
                return Err(Violation::EndedTwice {
                    call_id: self.call_id,
                });
            }
            End::Failed(_) | End::Done => {}
        }
        let waiting = self.stop_granting(&mut state);
        wake(&mut state);
        drop(state);
        retry(waiting);
        Ok(())
    }

    /// The stream failed with `status`, delivered after the messages already queued
    /// unless `discard` (a local cancellation: they are of no use any more).
    pub(crate) fn fail(&self, status: Status, discard: bool) {
        let mut state = self.state.lock();
        // The first failure is the one reported.
        if matches!(state.end, End::Done | End::Failed(_)) {
            return;
        }
        let waiting = if discard {
            self.clear(&mut state)
        } else {
            self.stop_granting(&mut state)
        };
        state.end = End::Failed(status);
        wake(&mut state);
        drop(state);
        retry(waiting);
    }

    /// The consumer is gone: frees what is queued and discards what comes.
    pub(super) fn abandon(&self) {
        let mut state = self.state.lock();
        let waiting = self.clear(&mut state);
        state.end = End::Done;
        state.waker = None;
        drop(state);
        retry(waiting);
    }

    /// The stream ended: a window update still queued for it is dropped.
    pub(crate) fn forget_window(&self) {
        self.control.forget_window(self.call_id);
    }

    /// The response headers arrived (client side).
    pub(crate) fn set_headers(&self, headers: Metadata) {
        let mut state = self.state.lock();
        state.headers = Some(headers);
        wake(&mut state);
    }

    /// Waits for the response headers: `Ok` with them (empty if the call ended OK without
    /// any), or the status the call failed with.
    pub(crate) fn poll_headers(&self, cx: &mut Context<'_>) -> Poll<Result<Metadata, Status>> {
        let mut state = self.state.lock();
        if let Some(headers) = state.headers.take() {
            return Poll::Ready(Ok(headers));
        }
        match &state.end {
            End::Open => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            End::Closed(_) | End::Done => Poll::Ready(Ok(Metadata::new())),
            End::Failed(status) if state.queue.is_empty() => {
                let status = status.clone();
                state.end = End::Done;
                Poll::Ready(Err(status))
            }
            End::Failed(_) => Poll::Ready(Ok(Metadata::new())),
        }
    }

    /// The trailers of a stream that ended (client side).
    pub(super) fn take_trailers(&self) -> Option<Metadata> {
        self.state.lock().headers.take()
    }

    /// Everything the reader can take now: the messages, then the end if it came.
    #[cfg(test)]
    pub(crate) fn drain_now(&self) -> (Vec<Bytes>, Option<Result<(), Status>>) {
        let (wakes, waker) = Wakes::waker();
        let mut cx = Context::from_waker(&waker);
        let mut messages = Vec::new();
        let mut reading = super::reading::Reading::default();
        loop {
            match reading.poll_next(self, &mut cx) {
                Poll::Ready(Some(Ok(m))) => messages.push(m),
                Poll::Ready(Some(Err(status))) => return (messages, Some(Err(status))),
                Poll::Ready(None) => return (messages, Some(Ok(()))),
                Poll::Pending if wakes.take() > 0 => {} // a yield: it woke itself
                Poll::Pending => return (messages, None),
            }
        }
    }

    /// Frame bytes queued and not yet consumed.
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        let state = self.state.lock();
        state
            .queue
            .iter()
            .map(|queued| queued.charged as usize)
            .sum::<usize>()
            + state.lent as usize
    }
}

/// A waker that counts its wakes (tests): a reader that yields wakes itself first.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Wakes(std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl Wakes {
    /// The counter and a waker that counts into it.
    pub(crate) fn waker() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes::default());
        (wakes.clone(), Waker::from(wakes))
    }

    /// The wakes since the last take.
    pub(crate) fn take(&self) -> usize {
        self.0.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        let held = state.holding;
        state.holding = 0;
        if let Some(budget) = &self.budget {
            retry(budget.release(held as usize));
        }
    }
}

pub(super) fn wake(state: &mut InboxState) {
    if let Some(waker) = state.waker.take() {
        waker.wake();
    }
}

impl WaitsForRoom for Inbox {
    fn retry(&self) {
        self.retry_grant();
    }
}
