//! Streams: the flow-controlled halves of a streaming call, shared by client and server.
//!
//! Each direction of a stream has a window in frame bytes (see the wire docs): the
//! receiving side's [`Inbox`] grants it and checks the peer keeps to it, the sending
//! side's [`Outbox`] waits while it is spent. An inbox holds at most its window plus one
//! message (a message may be sent while the window is positive, whatever its length), so
//! a consumer that does not read bounds what its stream buffers, and the peer's other
//! streams on the connection go on: the connection's reader never waits for a stream.
//!
//! [`Streaming`] is the application's view of an inbox: a [`Stream`] of decoded
//! messages, on the client (a response stream) and on the server (a request stream).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::Stream;
use parking_lot::Mutex;

use crate::account::{Account, Charge, Resource};
use crate::control::ControlQueue;
use crate::wire::{INITIAL_STREAM_WINDOW, MAX_STREAM_WINDOW};
use crate::{Code, Metadata, Payload, Request, Status};

/// The windows the inboxes of one connection may grant together: each stream keeps to
/// its window, but a peer with many streams would otherwise make the sum `calls x
/// window`. A window is granted from the budget and given back as its messages are
/// consumed (or the stream ends); an inbox that finds no room waits, with its window
/// spent, until another gives some back. The reader never stops reading for it (control
/// frames, cancellations and the end of the connection are always seen).
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Windows granted and not given back.
    committed: usize,
    /// Inboxes that want to grant more, in the order they asked.
    waiting: VecDeque<Weak<Inbox>>,
}

/// The smallest grant worth a window update (a smaller want is granted whole or not).
const MIN_GRANT: usize = 4096;

impl Budget {
    pub(crate) fn new(limit: usize) -> Budget {
        Budget {
            limit,
            state: Mutex::default(),
        }
    }

    /// Up to `wanted` bytes of window, as far as the budget has room (nothing if less
    /// than `wanted` or [`MIN_GRANT`], whichever is smaller, is left).
    fn commit(&self, wanted: usize) -> usize {
        let mut state = self.state.lock();
        let got = wanted.min(self.limit.saturating_sub(state.committed));
        if got < wanted.min(MIN_GRANT) {
            return 0;
        }
        state.committed += got;
        got
    }

    fn wait(&self, inbox: Weak<Inbox>) {
        self.state.lock().waiting.push_back(inbox);
    }

    /// Gives `bytes` back; the inboxes waiting for room, to retry.
    #[must_use]
    fn release(&self, bytes: usize) -> Vec<Weak<Inbox>> {
        if bytes == 0 {
            return Vec::new();
        }
        let mut state = self.state.lock();
        state.committed = state.committed.saturating_sub(bytes);
        state.waiting.drain(..).collect()
    }

    /// Windows granted and not given back.
    #[cfg(test)]
    pub(crate) fn committed(&self) -> usize {
        self.state.lock().committed
    }
}

/// Lets the inboxes that waited for room grant what they could not.
fn retry(waiting: Vec<Weak<Inbox>>) {
    for inbox in waiting {
        if let Some(inbox) = inbox.upgrade() {
            inbox.retry_grant();
        }
    }
}

/// The receive half of one stream: messages the peer sent that the application has not
/// taken yet, within the window this side granted.
pub(crate) struct Inbox {
    call_id: u64,
    /// Where window updates go (sent by the connection's control task).
    control: Arc<ControlQueue>,
    /// The connection's bound on the windows its inboxes grant, if it has one.
    budget: Option<Arc<Budget>>,
    /// This inbox, to wait for room in the budget.
    me: Weak<Inbox>,
    /// The connection's account (a server's request stream): queued messages are held
    /// bytes, charged to the connection, its peer and the server until consumed.
    account: Option<Account>,
    state: Mutex<InboxState>,
}

struct InboxState {
    /// Payloads with the window bytes each was charged and what each holds of the
    /// account.
    queue: VecDeque<(Bytes, u32, u32)>,
    /// What the peer may still send: it sends while this is positive.
    window: i64,
    /// The window this side keeps granting.
    target: u32,
    /// Bytes consumed and not yet granted back.
    unreturned: u64,
    /// Window granted from the budget and not given back (with a budget).
    holding: u64,
    /// Window this side wants to grant but the budget had no room for.
    deferred: u64,
    /// Whether this inbox waits in the budget's queue.
    waiting: bool,
    /// What the queued messages hold of the account (with one).
    held: Charge,
    /// Response headers (client side), until taken.
    headers: Option<Metadata>,
    end: End,
    waker: Option<Waker>,
}

enum End {
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
            state: Mutex::new(InboxState {
                queue: VecDeque::new(),
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
    fn grant(&self, state: &mut InboxState, wanted: u64) {
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
            budget.wait(self.me.clone());
        }
    }

    /// The budget has room again: grants what was deferred.
    fn retry_grant(&self) {
        let mut state = self.state.lock();
        state.waiting = false;
        if matches!(state.end, End::Open) && state.deferred > 0 {
            self.grant(&mut state, 0);
        }
    }

    /// Gives `bytes` of this inbox's window back to the budget (those that backed
    /// consumed messages, or all of it when the stream ends); returns who to retry.
    #[must_use]
    fn give_back(&self, state: &mut InboxState, bytes: u64) -> Vec<Weak<Inbox>> {
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
    fn stop_granting(&self, state: &mut InboxState) -> Vec<Weak<Inbox>> {
        state.deferred = 0;
        let queued: u64 = state.queue.iter().map(|(_, c, _)| u64::from(*c)).sum();
        let unused = state.holding.saturating_sub(queued);
        self.give_back(state, unused)
    }

    /// Empties the queue (its messages are of no use any more): the whole window goes
    /// back to the budget.
    #[must_use]
    fn clear(&self, state: &mut InboxState) -> Vec<Weak<Inbox>> {
        state.queue.clear();
        state.held = Charge::none();
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
    pub(crate) fn push(&self, charged: usize, payload: Bytes) -> Result<(), String> {
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
    ) -> Result<(), String> {
        let mut state = self.state.lock();
        let mut waiting = Vec::new();
        let result = (|| {
            for (charged, payload) in run {
                match state.end {
                    End::Open => {}
                    End::Closed(_) => {
                        return Err(format!(
                            "stream {:#x}: message after the end of the stream",
                            self.call_id
                        ))
                    }
                    End::Failed(_) | End::Done => return Ok(()), // discarded
                }
                if state.window <= 0 {
                    return Err(format!(
                        "stream {:#x}: message sent past the stream's window",
                        self.call_id
                    ));
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
                state.queue.push_back((payload, charged as u32, held));
            }
            Ok(())
        })();
        wake(&mut state);
        drop(state);
        retry(waiting);
        result
    }

    /// The peer closed its side; `trailers` end a response stream.
    ///
    /// # Errors
    /// A second END_STREAM.
    pub(crate) fn close(&self, trailers: Option<Metadata>) -> Result<(), String> {
        let mut state = self.state.lock();
        match state.end {
            End::Open => state.end = End::Closed(trailers),
            End::Closed(_) => {
                return Err(format!("stream {:#x}: ended twice", self.call_id));
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
    fn abandon(&self) {
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

    /// The next payload, the stream's failure, or its end (`None`, with the trailers).
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Status>>> {
        let mut state = self.state.lock();
        if let Some((payload, charged, held)) = state.queue.pop_front() {
            state.held.release(held as usize);
            let waiting = self.give_back(&mut state, u64::from(charged));
            state.unreturned += u64::from(charged);
            // Grant it back once half the window is consumed, while the peer still sends.
            if matches!(state.end, End::Open) && state.unreturned >= u64::from(state.target / 2) {
                let credits = std::mem::take(&mut state.unreturned);
                self.grant(&mut state, credits);
            }
            drop(state);
            retry(waiting);
            return Poll::Ready(Some(Ok(payload)));
        }
        match std::mem::replace(&mut state.end, End::Done) {
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
        }
    }

    /// The trailers of a stream that ended (client side).
    fn take_trailers(&self) -> Option<Metadata> {
        self.state.lock().headers.take()
    }

    /// Frame bytes queued and not yet consumed.
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        let state = self.state.lock();
        state.queue.iter().map(|(_, c, _)| *c as usize).sum()
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

fn wake(state: &mut InboxState) {
    if let Some(waker) = state.waker.take() {
        waker.wake();
    }
}

/// The send half of one stream: the window the peer granted.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<OutboxState>,
}

#[derive(Default)]
struct OutboxState {
    window: i64,
    /// Set when the call ended or failed: the sender stops.
    closed: Option<Status>,
    waker: Option<Waker>,
}

impl Outbox {
    /// An outbox with the peer's initial window (`0` = [`INITIAL_STREAM_WINDOW`]).
    pub(crate) fn new(window: u32) -> Outbox {
        let window = if window == 0 {
            INITIAL_STREAM_WINDOW
        } else {
            window
        };
        Outbox {
            state: Mutex::new(OutboxState {
                window: i64::from(window).min(MAX_STREAM_WINDOW),
                closed: None,
                waker: None,
            }),
        }
    }

    /// An outbox with no window yet (a client's request stream, until the server starts
    /// the call).
    pub(crate) fn closed_window() -> Outbox {
        Outbox::default()
    }

    /// The peer granted `credits` more bytes.
    ///
    /// # Errors
    /// The window would exceed [`MAX_STREAM_WINDOW`] (a protocol violation).
    pub(crate) fn grant(&self, credits: u32) -> Result<(), String> {
        let mut state = self.state.lock();
        let window = state.window + i64::from(credits);
        if window > MAX_STREAM_WINDOW {
            return Err(format!(
                "window update of {credits} bytes takes a stream's window past {MAX_STREAM_WINDOW}"
            ));
        }
        state.window = window;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    /// The call is over: a waiting sender stops with `status`.
    pub(crate) fn close(&self, status: Status) {
        let mut state = self.state.lock();
        if state.closed.is_none() {
            state.closed = Some(status);
        }
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// The window now (0 once the stream is closed): messages may be sent while it is
    /// positive.
    pub(crate) fn window(&self) -> i64 {
        let state = self.state.lock();
        if state.closed.is_some() {
            0
        } else {
            state.window
        }
    }

    /// Takes `len` bytes from the window: messages sent while [`Outbox::window`] (less
    /// what they took before) was positive.
    pub(crate) fn take(&self, len: usize) {
        self.state.lock().window -= len as i64;
    }

    /// Waits until the window is positive, then takes `len` bytes from it.
    ///
    /// # Errors
    /// The status the stream was closed with.
    pub(crate) async fn reserve(&self, len: usize) -> Result<(), Status> {
        std::future::poll_fn(|cx| {
            let mut state = self.state.lock();
            if let Some(status) = &state.closed {
                return Poll::Ready(Err(status.clone()));
            }
            if state.window > 0 {
                state.window -= len as i64;
                return Poll::Ready(Ok(()));
            }
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// The call a [`Streaming`] belongs to (client side): dropping it ends the call, telling
/// the server if it still runs.
pub(crate) trait CallHandle: Send + Sync {}

/// A stream of messages received on a streaming call: the responses of a
/// server-streaming or bidirectional call on the client, the requests of a
/// client-streaming or bidirectional call on the server. Like tonic's `Streaming`.
///
/// Messages come in order; `Ok(None)` from [`Streaming::message`] (or the end of the
/// [`Stream`]) is the peer's end of the stream, an `Err` its failure (the call's status
/// on the client). What is received and not yet read is bounded by the stream's window.
/// On the client, dropping it cancels the call, and the call's deadline covers the whole
/// stream: past it, the next read fails with `DEADLINE_EXCEEDED`.
pub struct Streaming<T> {
    inbox: Arc<Inbox>,
    decode: Decoder<T>,
    /// The code a message that does not decode fails with.
    decode_error: Code,
    call: Option<Box<dyn CallHandle>>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the deadline's timer was registered (polled once).
    armed: bool,
    trailers: Option<Metadata>,
    done: bool,
}

impl<T> fmt::Debug for Streaming<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streaming")
            .field("call_id", &self.inbox.call_id)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// How a [`Streaming`] turns payloads into messages.
type Decoder<T> = Box<dyn Fn(Bytes) -> Result<T, prost::DecodeError> + Send + Sync>;

fn decode_as<T: prost::Message + Default>(bytes: Bytes) -> Result<T, prost::DecodeError> {
    Payload::Shared(bytes).decode()
}

impl Streaming<Bytes> {
    /// The raw payloads of `inbox`.
    pub(crate) fn raw(inbox: Arc<Inbox>, decode_error: Code) -> Streaming<Bytes> {
        Streaming {
            inbox,
            decode: Box::new(Ok),
            decode_error,
            call: None,
            deadline: None,
            armed: false,
            trailers: None,
            done: false,
        }
    }

    /// The same stream, each message decoded as `T`.
    pub fn decoded<T: prost::Message + Default + 'static>(self) -> Streaming<T> {
        self.with_decoder(decode_as::<T>)
    }

    /// The same stream, each message decoded by `decode` (for types known only at run
    /// time, e.g. `prost_reflect::DynamicMessage`).
    pub fn with_decoder<T: 'static>(
        mut self,
        decode: impl Fn(Bytes) -> Result<T, prost::DecodeError> + Send + Sync + 'static,
    ) -> Streaming<T> {
        // The shell left behind must not abandon the inbox when it drops.
        let done = std::mem::replace(&mut self.done, true);
        Streaming {
            inbox: self.inbox.clone(),
            decode: Box::new(decode),
            decode_error: self.decode_error,
            call: self.call.take(),
            deadline: self.deadline.take(),
            armed: self.armed,
            trailers: self.trailers.take(),
            done,
        }
    }
}

impl<T> Streaming<T> {
    /// Client side: the call this stream belongs to, and its deadline.
    pub(crate) fn attach(
        &mut self,
        call: Box<dyn CallHandle>,
        deadline: Option<std::time::Instant>,
    ) {
        self.call = Some(call);
        self.deadline = deadline.map(|d| Box::pin(tokio::time::sleep_until(d.into())));
    }

    /// The next message; `Ok(None)` at the end of the stream.
    ///
    /// # Errors
    /// The stream's failure: on the client the call's status, `DEADLINE_EXCEEDED` past
    /// its deadline, `INTERNAL` for a message that does not decode (the call is then
    /// cancelled); on the server `INVALID_ARGUMENT` for such a message, `CANCELLED` when
    /// the client went away.
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx))
            .await
            .transpose()
    }

    /// Reads the stream to its end and returns the trailing metadata the server ended
    /// the call with (client side; `None` on the server).
    ///
    /// # Errors
    /// As [`Streaming::message`].
    pub async fn trailers(&mut self) -> Result<Option<Metadata>, Status> {
        while self.message().await?.is_some() {}
        Ok(self.trailers.take())
    }

    fn finish(&mut self) {
        self.done = true;
        self.call = None; // cancels the call if it still runs
        self.deadline = None;
    }
}

impl<T> Stream for Streaming<T> {
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // Past the deadline nothing more is read, even what already arrived. The timer
        // is registered on the first read; then a fired timer is an atomic load, not a
        // clock read per message.
        let expired = match &mut this.deadline {
            Some(deadline) if !this.armed => {
                this.armed = true;
                deadline.as_mut().poll(cx).is_ready()
            }
            Some(deadline) => deadline.is_elapsed(),
            None => false,
        };
        if expired {
            let status = Status::deadline_exceeded("deadline exceeded during the stream");
            this.inbox.fail(status.clone(), true);
            this.finish();
            return Poll::Ready(Some(Err(status)));
        }
        // A consumer that always finds a message ready still yields to the runtime now
        // and then (tokio's task budget), so that the window updates its reading queued
        // go out while it reads on, not once the whole window is read.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let next = this.inbox.poll_next(cx);
        if next.is_ready() {
            coop.made_progress();
        }
        match next {
            Poll::Ready(Some(Ok(bytes))) => match (this.decode)(bytes) {
                Ok(message) => Poll::Ready(Some(Ok(message))),
                Err(e) => {
                    let status =
                        Status::new(this.decode_error, format!("failed to decode message: {e}"));
                    this.inbox.fail(status.clone(), true);
                    this.finish();
                    Poll::Ready(Some(Err(status)))
                }
            },
            Poll::Ready(Some(Err(status))) => {
                this.finish();
                Poll::Ready(Some(Err(status)))
            }
            Poll::Ready(None) => {
                this.trailers = this.inbox.take_trailers();
                // The call ended normally: nothing to cancel.
                this.call = None;
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(deadline) = &mut this.deadline {
                    if deadline.as_mut().poll(cx).is_ready() {
                        let status =
                            Status::deadline_exceeded("deadline exceeded during the stream");
                        this.inbox.fail(status.clone(), true);
                        this.finish();
                        return Poll::Ready(Some(Err(status)));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Streaming<T> {
    fn drop(&mut self) {
        if !self.done {
            self.inbox.abandon();
        }
        // Then `call` drops, which cancels the call if it still runs.
    }
}

/// Conversion into a streaming request: implemented for streams of messages and for
/// [`Request`]s of them, so generated client methods take either (like tonic's).
pub trait IntoStreamingRequest {
    /// The stream of messages.
    type Stream: Stream<Item = Self::Message> + Send + 'static;
    /// The message type.
    type Message;
    /// Wraps `self` in a request (or returns it when it already is one).
    fn into_streaming_request(self) -> Request<Self::Stream>;
}

impl<S> IntoStreamingRequest for S
where
    S: Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;
    fn into_streaming_request(self) -> Request<S> {
        Request::new(self)
    }
}

impl<S> IntoStreamingRequest for Request<S>
where
    S: Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;
    fn into_streaming_request(self) -> Request<S> {
        self
    }
}

/// The payload of a received `Message` frame as owned bytes: a slice of the frame if the
/// transport lets go of it (large frames), else a copy (a small frame's receive slot must
/// not stay pinned while the message waits to be read).
pub(crate) fn take_payload<C: crate::Connection>(
    conn: &C,
    buf: C::RecvBuf,
    header: &crate::wire::Header,
) -> Bytes {
    if header.payload_len == 0 {
        return Bytes::new();
    }
    let start = crate::wire::HEADER_LEN + header.meta_len as usize;
    let end = start + header.payload_len as usize;
    match conn.keep(buf) {
        Ok(frame) => frame.slice(start..end),
        Err(buf) => Bytes::copy_from_slice(&buf[start..end]),
    }
}

/// The payloads of a run of `Message` frames of one stream, with the frame bytes each
/// is charged: slices of the frames the transport lets go of (large ones), the others
/// copied together into one allocation (so that a small frame's receive slot or shared
/// read buffer is not pinned while its message waits, as [`take_payload`] does, but with
/// one allocation per run). The consumer reads a stream in order, so a run's allocation
/// is freed by the time later messages are read: what stays pinned is what the stream's
/// window counts, plus at most one run.
pub(crate) fn take_payloads<C: crate::Connection>(
    conn: &C,
    frames: impl ExactSizeIterator<Item = (C::RecvBuf, crate::wire::Header)>,
) -> Vec<(usize, Bytes)> {
    enum Taken<B> {
        Kept(Bytes),
        Copy(B, std::ops::Range<usize>),
    }
    let mut taken = Vec::with_capacity(frames.len());
    let mut copied = 0;
    for (buf, header) in frames {
        let start = crate::wire::HEADER_LEN + header.meta_len as usize;
        let range = start..start + header.payload_len as usize;
        let item = if range.is_empty() {
            Taken::Kept(Bytes::new())
        } else {
            match conn.keep(buf) {
                Ok(frame) => Taken::Kept(frame.slice(range)),
                Err(buf) => {
                    copied += range.len();
                    Taken::Copy(buf, range)
                }
            }
        };
        taken.push((header.frame_len(), item));
    }
    let mut arena = bytes::BytesMut::with_capacity(copied);
    for (_, item) in &taken {
        if let Taken::Copy(buf, range) = item {
            arena.extend_from_slice(&buf[range.clone()]);
        }
    }
    let mut arena = arena.freeze();
    taken
        .into_iter()
        .map(|(charged, item)| match item {
            Taken::Kept(bytes) => (charged, bytes),
            // Dropping the frame here hands its receive resources back.
            Taken::Copy(_, range) => (charged, arena.split_to(range.len())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::{Limit, Limits, Scope};
    use crate::wire::FrameKind;
    use futures_util::StreamExt;
    use std::time::Duration;

    /// An account of `bytes` held bytes for the connection and the peer (the server's
    /// is twice that: its common half as large).
    fn account(bytes: usize) -> Account {
        let limit = Limit {
            connection: bytes,
            peer: bytes,
            server: 2 * bytes,
        };
        Account::standalone(Limits {
            calls: limit,
            streams: limit,
            bytes: limit,
            sending: limit,
        })
    }

    fn unbounded() -> Account {
        account(1 << 30)
    }

    #[tokio::test]
    async fn queued_messages_are_held_bytes_of_the_account_until_read() {
        let budget = Arc::new(Budget::new(1 << 20));
        let control = Arc::new(ControlQueue::default());
        let account = account(3000);
        let inbox = Inbox::with_budget(1, control, 8000, budget.clone(), account.clone());
        inbox.grant_rest();
        let mut stream = Streaming::raw(inbox.clone(), Code::InvalidArgument);
        inbox.push(1000, Bytes::from(vec![1; 960])).unwrap();
        inbox.push(1000, Bytes::from(vec![2; 960])).unwrap();
        assert_eq!(account.held(Resource::Bytes, Scope::Peer), 2000);
        // Read: given back.
        assert_eq!(stream.next().await.unwrap().unwrap()[0], 1);
        assert_eq!(account.held(Resource::Bytes, Scope::Server), 1000);
        // Another connection of the peer holds the rest: no room for the next message,
        // which fails the stream after the one queued (not the connection).
        let other = account.try_charge(Resource::Bytes, 1500).unwrap();
        inbox.push(1000, Bytes::from(vec![3; 960])).unwrap();
        inbox.push(1000, Bytes::from(vec![4; 960])).unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap()[0], 2);
        let status = stream.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("1000 bytes"), "{status:?}");
        assert!(stream.next().await.is_none());
        drop(other);
        assert_eq!(account.held(Resource::Bytes, Scope::Connection), 0);
        assert_eq!(budget.committed(), 0, "the window went back too");
    }

    fn inbox(target: u32, granted: u32) -> (Arc<Inbox>, Arc<ControlQueue>) {
        let control = Arc::new(ControlQueue::default());
        (
            Arc::new(Inbox::new(7, control.clone(), target, granted)),
            control,
        )
    }

    #[tokio::test]
    async fn a_sender_past_its_window_is_a_violation_and_reading_grants_it_back() {
        let (inbox, control) = inbox(1000, 1000);
        // Sends while the window is positive: 400 + 400 + 400 (the last one overdraws).
        for _ in 0..3 {
            inbox.push(400, Bytes::from_static(b"m")).unwrap();
        }
        assert_eq!(inbox.buffered(), 1200, "window plus one message at most");
        let err = inbox.push(400, Bytes::from_static(b"m")).unwrap_err();
        assert!(err.contains("past the stream's window"), "{err}");
        let mut stream = Streaming::raw(inbox.clone(), Code::Internal);
        assert_eq!(stream.message().await.unwrap().unwrap(), "m");
        // 400 consumed: under half the window, nothing granted yet.
        let early = tokio::time::timeout(Duration::from_millis(10), control.next_batch()).await;
        assert!(early.is_err(), "nothing to send yet: {early:?}");
        stream.message().await.unwrap();
        let batch = control.next_batch().await.unwrap();
        assert_eq!(batch, [(FrameKind::WindowUpdate, 7, 800)]);
        // The window is back to 1000 - 1200 + 800 = 600 > 0: the peer may send again.
        inbox.push(400, Bytes::from_static(b"m")).unwrap();
    }

    #[tokio::test]
    async fn a_server_grants_its_window_when_the_call_starts() {
        let (waiting, _control) = inbox(5000, 0);
        assert!(
            waiting.push(10, Bytes::new()).is_err(),
            "nothing granted yet"
        );
        let (started, control) = inbox(5000, 0);
        started.grant_rest();
        assert_eq!(
            control.next_batch().await.unwrap(),
            [(FrameKind::WindowUpdate, 7, 5000)]
        );
        started.push(10, Bytes::new()).unwrap();
    }

    #[tokio::test]
    async fn the_end_comes_after_queued_messages_and_nothing_may_follow_it() {
        let (inbox, _control) = inbox(1000, 1000);
        inbox.push(50, Bytes::from_static(b"a")).unwrap();
        inbox.close(Some(Metadata::new())).unwrap();
        assert!(inbox
            .push(50, Bytes::new())
            .unwrap_err()
            .contains("after the end"));
        assert!(inbox.close(None).is_err(), "ended twice");
        let stream = Streaming::raw(inbox, Code::Internal);
        let all: Vec<_> = stream.collect().await;
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].as_ref().unwrap(), "a");
    }

    #[tokio::test]
    async fn a_dropped_consumer_frees_its_queue_and_later_messages_are_discarded() {
        let (inbox, _control) = inbox(1000, 1000);
        inbox.push(500, Bytes::from(vec![0; 500])).unwrap();
        drop(Streaming::raw(inbox.clone(), Code::Internal));
        assert_eq!(inbox.buffered(), 0);
        inbox.push(5000, Bytes::from(vec![0; 5000])).unwrap();
        assert_eq!(inbox.buffered(), 0, "discarded, not an error");
    }

    /// The window updates queued for `call_id`, summed.
    async fn granted(control: &ControlQueue, call_id: u64) -> u64 {
        let batch = tokio::time::timeout(Duration::from_millis(50), control.next_batch())
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        batch
            .iter()
            .filter(|(kind, id, _)| *kind == FrameKind::WindowUpdate && *id == call_id)
            .map(|(_, _, credits)| u64::from(*credits))
            .sum()
    }

    #[tokio::test]
    async fn windows_come_from_the_connections_budget_and_go_back_as_messages_are_read() {
        let budget = Arc::new(Budget::new(10_000));
        let control = Arc::new(ControlQueue::default());
        let a = Inbox::with_budget(1, control.clone(), 8000, budget.clone(), unbounded());
        let b = Inbox::with_budget(2, control.clone(), 8000, budget.clone(), unbounded());
        a.grant_rest();
        assert_eq!(granted(&control, 1).await, 8000);
        // 2,000 left: less than b's window and than the smallest grant; b waits.
        b.grant_rest();
        assert_eq!(granted(&control, 2).await, 0);
        assert_eq!(budget.committed(), 8000);
        // a's peer sends 6,000; reading 4,000 of it gives 4,000 back: b, waiting, takes
        // room as soon as there is a grant's worth, never past the budget.
        for _ in 0..6 {
            a.push(1000, Bytes::from(vec![1; 960])).unwrap();
        }
        let mut reader = Streaming::raw(a.clone(), Code::Internal);
        for _ in 0..4 {
            reader.message().await.unwrap().unwrap();
            assert!(budget.committed() <= 10_000);
        }
        let to_b = granted(&control, 2).await;
        assert!(to_b >= MIN_GRANT as u64, "b got room: {to_b}");
        assert!(budget.committed() <= 10_000);
        // a's stream ends: all it held goes back, and b gets the rest of its window.
        drop(reader);
        assert_eq!(to_b + granted(&control, 2).await, 8000);
        assert_eq!(budget.committed(), 8000);
        // b fails (discarding its queue) or is dropped: everything goes back.
        b.push(500, Bytes::from(vec![2; 460])).unwrap();
        b.fail(Status::cancelled("gone"), true);
        assert_eq!(budget.committed(), 0);
        let c = Inbox::with_budget(3, control.clone(), 3000, budget.clone(), unbounded());
        c.grant_rest();
        assert_eq!(budget.committed(), 3000);
        c.close(None).unwrap();
        assert_eq!(
            budget.committed(),
            0,
            "a half-closed stream's unused window goes back"
        );
        let d = Inbox::with_budget(4, control, 3000, budget.clone(), unbounded());
        d.grant_rest();
        d.push(1000, Bytes::from(vec![4; 960])).unwrap();
        drop(d);
        assert_eq!(budget.committed(), 0, "dropped with a message queued");
    }

    #[tokio::test]
    async fn a_run_is_queued_in_order_up_to_the_message_that_breaks_the_window() {
        let (inbox, _control) = inbox(1000, 1000);
        let run = [400, 400, 400, 50].map(|n| (n, Bytes::from(vec![n as u8; 8])));
        let err = inbox.push_run(run).unwrap_err();
        assert!(err.contains("past the stream's window"), "{err}");
        assert_eq!(
            inbox.buffered(),
            1200,
            "the three within the window are queued"
        );
    }

    #[tokio::test]
    async fn a_runs_small_payloads_share_one_copy_and_large_ones_are_kept_in_place() {
        use crate::wire::{Header, HEADER_LEN};
        use crate::Connection;
        let (a, b) = crate::memory::pair(1 << 20);
        let sizes = [10usize, 40 * 1024, 20, 0, 30];
        for (i, &n) in sizes.iter().enumerate() {
            let mut header = Header::new(FrameKind::Message, 9);
            header.payload_len = n as u32;
            crate::outbound::send_frame(&a, header, &crate::Metadata::new(), |buf| {
                bytes::BufMut::put_slice(buf, &vec![i as u8 + 1; n])
            })
            .await
            .unwrap();
        }
        let mut frames = vec![b.recv().await.unwrap().unwrap()];
        b.recv_ready(&mut frames, 16);
        assert_eq!(frames.len(), sizes.len());
        let large_frame = frames[1].as_ptr() as usize;
        let with_headers = frames
            .into_iter()
            .map(|f| (f.clone(), Header::decode(&f).unwrap().unwrap()));
        let payloads = take_payloads(&b, with_headers.collect::<Vec<_>>().into_iter());
        for (i, ((charged, payload), &n)) in payloads.iter().zip(&sizes).enumerate() {
            assert_eq!(*charged, HEADER_LEN + n);
            assert_eq!(payload.len(), n);
            assert!(payload.iter().all(|&x| x == i as u8 + 1));
        }
        assert_eq!(
            payloads[1].1.as_ptr() as usize,
            large_frame + HEADER_LEN,
            "kept in place"
        );
        let (first, third) = (
            payloads[0].1.as_ptr() as usize,
            payloads[2].1.as_ptr() as usize,
        );
        assert_eq!(third, first + 10, "one allocation for the small ones");
    }

    #[tokio::test]
    async fn a_failure_is_delivered_after_queued_messages_unless_discarded() {
        let (inbox, _control) = inbox(1000, 1000);
        inbox.push(50, Bytes::from_static(b"a")).unwrap();
        inbox.fail(Status::internal("boom"), false);
        let mut stream = Streaming::raw(inbox.clone(), Code::Internal);
        assert_eq!(stream.message().await.unwrap().unwrap(), "a");
        assert_eq!(stream.message().await.unwrap_err().code(), Code::Internal);
        assert!(stream.message().await.unwrap().is_none(), "then the end");

        let (inbox, _control) = self::inbox(1000, 1000);
        inbox.push(50, Bytes::from_static(b"a")).unwrap();
        inbox.fail(Status::cancelled("gone"), true);
        let mut stream = Streaming::raw(inbox, Code::Internal);
        assert_eq!(stream.message().await.unwrap_err().code(), Code::Cancelled);
    }

    #[tokio::test]
    async fn a_sender_waits_for_its_window_and_stops_when_the_call_ends() {
        let outbox = Arc::new(Outbox::closed_window());
        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.reserve(100).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no window yet");
        outbox.grant(1).unwrap();
        waiting.await.unwrap().unwrap();
        // 1 - 100 < 0: the next one waits, until the call ends.
        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.reserve(100).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        outbox.close(Status::cancelled("over"));
        assert_eq!(waiting.await.unwrap().unwrap_err().code(), Code::Cancelled);
        let overflow = Outbox::new(MAX_STREAM_WINDOW as u32);
        assert!(overflow.grant(1).is_err(), "past 2^31 - 1");
    }
}
