//! What a connection does with its completions (handed to it by whoever polls its shared
//! CQ, `completion/`), and its own task: the side channel and the close.
//!
//! A batch of completions is handled in order: events into the session, then the READs,
//! frames and control messages the session has due.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use rdmarpc_transport_tcp::Socket;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::completion::Member;
use crate::connection::{Inner, Received, RecvBuf, SlotHold, State};
use crate::counters::Counters;
use crate::protocol::session::{refused, Close};
use crate::protocol::{split_batch, Kind, Lie, Prefix, Rendezvous, PREFIX_LEN};
use crate::verbs::{CmEvent, CmEventKind, Event, RecvSlot, Rings, WcStatus};

/// READ work requests in flight per connection at most (the send queue is sized for it).
pub(crate) const READ_WR_BUDGET: usize = 32;
const _: () = assert!(crate::protocol::session::MAX_CHUNKS <= READ_WR_BUDGET);

mod pushed;
mod reads;

pub(crate) use self::reads::resume;

/// Polls the connection's completion queue once, unless another task is polling it:
/// returns the completions handled, for every connection on the CQ (0 also when another
/// task polls).
pub(crate) fn progress(inner: &Inner) -> Result<usize, Close> {
    inner.completion.shared().progress().map_err(Close::Failed)
}

/// The connection's own task: waits for the side channel to end (the peer process is
/// gone) or the connection to close, then tears down what is left.
pub(crate) async fn run(inner: Arc<Inner>, mut side: Socket) {
    let mut closed = inner.closed.subscribe();
    let mut side_buf = [0u8; 64];
    let mut cm_events = inner.cm.lock().take_events();
    if closed.borrow().is_none() {
        let why = tokio::select! {
            read = side.read(&mut side_buf) => Some(match read {
                Ok(0) => Close::PeerClosed,
                Ok(_) => Close::Violation(Lie::SideChannelBytes),
                Err(e) => Close::Failed(format!("side channel: {e}")),
            }),
            why = ended(&mut cm_events) => Some(why),
            _ = closed.changed() => None,
        };
        if let Some(why) = why {
            if matches!(why, Close::PeerClosed) {
                reap_before_close(&inner);
            }
            inner.fail(why);
        }
    }
    // Its frames never answered must not keep the CQ's driver spinning for replies.
    inner.completion.shared().forget(&inner.frames);
    // Tell the peer at once (its side channel ends), rather than after its ping timeout.
    drop(side);
    // Frames held by the session hold the connection: release them (outside the lock).
    let held = inner.state.lock().session.close(Close::Local);
    drop(held);
    // If nobody will receive what is left, it goes: it holds the connection's state.
    let (sink, waiting) = inner
        .receiving
        .end(|| inner.state.lock().session.take_ready());
    drop(waiting);
    // Outside the lock: the sink's work may drop the connection handle, whose drop takes it.
    if let Some(sink) = sink {
        sink.closed(inner.end_result());
    }
    inner.receiving.wake();
}

/// The peer closed cleanly: it did so once its last messages were delivered here (a
/// peer's graceful close waits for its sends to complete), but the close is told out of
/// band (its side channel ends, or rdma_cm says disconnected) and can come before anyone
/// polled those messages' completions. They are handed up first, so that the response
/// to a call is not lost to the close that followed it (a caller that called without
/// pause on a connection retired by `max_connection_age` failed "connection closed by
/// peer" so, now and then, in the TCG guest).
fn reap_before_close(inner: &Inner) {
    const ROUNDS: usize = 64;
    if let Err(e) = inner.completion.shared().reap_all(ROUNDS) {
        tracing::debug!("polling the completion queue at the peer's close: {e}");
    }
}

/// Waits for rdma_cm to say the connection ended: on iWARP a peer's provider may drop
/// the connection (its TCP stream) without the queue pair here failing, and a peer that
/// disconnects is known at once on every fabric.
async fn ended(events: &mut mpsc::Receiver<CmEvent>) -> Close {
    while let Some(event) = events.recv().await {
        match event.kind {
            CmEventKind::Disconnected => return Close::PeerClosed,
            CmEventKind::DeviceRemoval | CmEventKind::ConnectError => {
                return Close::Failed(format!("rdma_cm: {}", event.kind));
            }
            _ => {}
        }
    }
    std::future::pending().await
}

impl Member for Inner {
    fn rings(&self) -> &Rings {
        &self.rings
    }

    fn handle(self: Arc<Self>, events: &mut Vec<Event>) {
        handle_batch(&self, events);
    }

    fn tick(&self, now: Instant, period: Duration) -> Option<Instant> {
        tick(self, now, period)
    }

    fn fail(&self, why: Close) {
        Inner::fail(self, why);
    }
}

/// Handles a batch of this connection's completions, in the order they completed (and
/// drains `events`). Runs under the shared CQ's poller lock, so batches of one
/// connection never overlap. A failure closes the connection.
fn handle_batch(inner: &Arc<Inner>, events: &mut Vec<Event>) {
    // The first error that is not a flush says why the QP failed (the send and receive
    // sides of a software provider report independently, in either order).
    let cause = events.iter().find_map(|e| match first_error(e) {
        Some((what, s)) if s != WcStatus::WrFlush => {
            Some(format!("{what} completed with error: {s}"))
        }
        _ => None,
    });
    if inner.state.lock().session.is_closed() {
        // What the NIC still reports after the end: every buffer returns by the drop;
        // the first real error is logged once.
        if let Some(cause) = cause {
            if !inner.cause_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(peer = %inner.peer, "after the connection ended: {cause}");
            }
        }
        events.clear();
        return;
    }
    let mut result = Ok(());
    for event in events.drain(..) {
        if result.is_ok() {
            result = handle(inner, event, cause.as_deref());
        }
    }
    let result = result
        .and_then(|()| inner.flush_batch())
        .and_then(|()| reads::start_reads(inner))
        .and_then(|()| inner.push_due());
    // Always: frames that completed before a failure still go up, and frames discarded
    // meanwhile (the connection may have been closed by another task since the check
    // above) are dropped, not left holding the connection.
    let growth = hand_up(inner);
    let result = result.and_then(|()| if growth { grow(inner) } else { Ok(()) });
    match result {
        Ok(()) => inner.flush_control(),
        Err(why) => {
            if cause.is_some() {
                inner.cause_logged.store(true, Ordering::Relaxed);
            }
            inner.fail(why);
            let discarded = inner.state.lock().session.take_discarded();
            drop(discarded);
        }
    }
}

/// The failed operation and status of a completion with an error.
fn first_error(event: &Event) -> Option<(&'static str, WcStatus)> {
    let (what, status) = match event {
        Event::Sent { status, .. } => ("send", *status),
        Event::Received { status, .. } => ("receive", *status),
        Event::Read { status, .. } | Event::Bounced { status, .. } => ("RDMA READ", *status),
    };
    status.err().map(|s| (what, s))
}

/// Hands up the frames the session has ready, in order: to the runtime's sink when it
/// takes frames from here, else they stay in the session for `recv`, which is woken.
/// Drops the frames the session discarded. Runs under the poller lock (so frames go up
/// in order, one batch at a time) and outside every other lock: dropping a frame, or
/// the sink's work, re-enters the connection. Returns whether a ring is to grow (looked
/// at under the same lock, so the batch takes it once).
fn hand_up(inner: &Inner) -> bool {
    let (sink, gone) = inner.receiving.sink();
    let (ready, discarded, waiting, growth) = {
        let mut state = inner.state.lock();
        let discarded = state.session.take_discarded();
        let growth = state.session.growth_due(inner.rings.send_slots());
        if sink.is_some() || gone {
            (state.session.take_ready(), discarded, false, growth)
        } else {
            (
                Default::default(),
                discarded,
                state.session.has_ready(),
                growth,
            )
        }
    };
    drop(discarded);
    match sink {
        // Run to completion: the runtime completes each call from here.
        Some(sink) => match ready.len() {
            0 => {}
            1 => ready.into_iter().for_each(|frame| sink.frame(frame)),
            _ => sink.frames(&mut Vec::from(ready)),
        },
        None => drop(ready),
    }
    if waiting {
        inner.receiving.wake();
    }
    growth
}

/// Grows the rings with use: the receive ring when the peer ran out of credit (the next
/// message grants the new slots), the send ring when the peer grants more slots than
/// there are send slots. A ring that cannot grow within the process's locked memory
/// stays as it is (fewer messages in flight; the receive ring tries again when the peer
/// next runs out of credit).
pub(crate) fn grow(inner: &Inner) -> Result<(), Close> {
    let (grow_recv, peer_slots) = {
        let mut state = inner.state.lock();
        (state.session.take_grow(), state.session.peer_slots())
    };
    fn kept<T: Default>(inner: &Inner, ring: &str, e: crate::verbs::Error) -> Result<T, Close> {
        match e {
            e if e.is_out_of_locked_memory() => {
                tracing::debug!(peer = %inner.peer, "the {ring} ring stays as it is: {e}");
                Ok(T::default())
            }
            e => Err(Close::Failed(format!("growing the {ring} ring: {e}"))),
        }
    }
    if grow_recv {
        let n = inner
            .rings
            .grow_recv()
            .or_else(|e| kept(inner, "receive", e))?;
        if n > 0 {
            inner.state.lock().session.grown(n);
            tracing::debug!(peer = %inner.peer, slots = inner.rings.recv_slots(), "receive ring grew");
        }
    }
    if peer_slots > u64::from(inner.rings.send_slots()) {
        let slots = inner
            .rings
            .grow_send()
            .or_else(|e| kept(inner, "send", e))?;
        if !slots.is_empty() {
            inner.state.lock().sends.grew(slots);
            inner.space.notify_waiters();
            tracing::debug!(peer = %inner.peer, slots = inner.rings.send_slots(), "send ring grew");
        }
    }
    Ok(())
}

/// Handles one completion.
fn handle(inner: &Arc<Inner>, event: Event, cause: Option<&str>) -> Result<(), Close> {
    match event {
        Event::Sent { slot, status } => {
            {
                inner.state.lock().sends.completed(slot);
            }
            inner.space.notify_waiters();
            status.map_err(|s| failure(inner, "send", s, cause))
        }
        Event::Received { slot, status } => match (slot, status) {
            (Some(slot), Ok(())) => received(inner, slot),
            (_, Err(s)) => Err(failure(inner, "receive", s, cause)),
            (None, Ok(())) => Ok(()),
        },
        Event::Read { buf, tag, status } => reads::read_completed(inner, tag, buf, status, cause),
        Event::Bounced {
            bytes,
            slots,
            tag,
            status,
        } => reads::bounce_completed(inner, tag, bytes, slots, status, cause),
    }
}

/// Why the connection ends after a completion with `status`; `cause` is the first error
/// of the same batch that is not a flush.
fn failure(inner: &Inner, what: &str, status: WcStatus, cause: Option<&str>) -> Close {
    if status == WcStatus::WrFlush && !inner.state.lock().session.is_closed() {
        // The QP entered the error state; the cause, if reported yet, is in this batch.
        Close::Failed(format!(
            "the queue pair entered the error state ({what} flushed{})",
            cause.map(|c| format!("; cause: {c}")).unwrap_or_default()
        ))
    } else {
        Close::Failed(format!("{what} completed with error: {status}"))
    }
}

/// A message arrived in `slot`.
fn received(inner: &Arc<Inner>, slot: RecvSlot) -> Result<(), Close> {
    let bytes = inner.rings.received(&slot);
    let prefix = Prefix::decode(bytes).map_err(Close::Violation)?;
    let mut state = inner.state.lock();
    state.session.handle_message(&prefix)?;
    if !matches!(prefix.kind, Kind::Control | Kind::Piece) {
        inner.frame_received();
    }
    match prefix.kind {
        Kind::Data if prefix.n_tokens >= 2 => received_batch(inner, state, slot, prefix.n_tokens),
        Kind::Data => received_eager(inner, state, slot),
        Kind::Rendezvous => {
            received_descriptor(inner, state, slot, prefix.flags & Prefix::PUSHED != 0)
        }
        Kind::Control => received_read_dones(inner, state, slot),
        Kind::Piece => pushed::received_piece(inner, state, slot),
    }
}

/// A batch of `n` eager frames in one slot: each goes up (in order) as a share of the
/// slot, which is re-posted when the last share is dropped.
fn received_batch(
    inner: &Arc<Inner>,
    mut state: MutexGuard<'_, State>,
    slot: RecvSlot,
    n: u16,
) -> Result<(), Close> {
    let bytes = inner.rings.received(&slot);
    let frames = split_batch(&bytes[PREFIX_LEN..], n).map_err(Close::Violation)?;
    Counters::bump(&inner.counters.eager_receives, frames.len() as u64);
    for _ in 1..frames.len() {
        inner.frame_received();
    }
    let hold = Arc::new(SlotHold {
        inner: inner.clone(),
        slot: Some(slot),
    });
    let copy = match state.session.copy_behind_push() {
        Ok(copy) => copy,
        Err(why) => {
            drop(state);
            drop(hold);
            return Err(why);
        }
    };
    let mut result = Ok(());
    for range in frames {
        let delivered = match state.session.classify_eager(&hold.bytes()[range.clone()]) {
            Ok(Some(header)) => state
                .session
                .deliver(RecvBuf(Received::Header(refused(header)))),
            Ok(None) if copy => {
                state
                    .session
                    .deliver(RecvBuf::from_bytes(bytes::Bytes::copy_from_slice(
                        &hold.bytes()[range],
                    )))
            }
            Ok(None) => state.session.deliver(RecvBuf(Received::Shared {
                hold: hold.clone(),
                range,
            })),
            Err(why) => Err(why),
        };
        if let Err(why) = delivered {
            result = Err(why);
            break;
        }
    }
    drop(state);
    inner.space.notify_waiters();
    // Outside the lock: the last share re-posts the slot, which takes it.
    drop(hold);
    result
}

/// One eager frame: it goes up in its slot (or, refused, as its header alone, the slot
/// re-posted at once; or, behind a pushed frame, copied out, the slot re-posted at once:
/// `pushed.rs`).
fn received_eager(
    inner: &Arc<Inner>,
    mut state: MutexGuard<'_, State>,
    slot: RecvSlot,
) -> Result<(), Close> {
    let bytes = inner.rings.received(&slot);
    let classified = state.session.classify_eager(&bytes[PREFIX_LEN..])?;
    if classified.is_none() {
        Counters::bump(&inner.counters.eager_receives, 1);
    }
    // Refused, or copied out behind a pushed frame: the slot is re-posted at once.
    let apart = match classified {
        Some(header) => Some(RecvBuf(Received::Header(refused(header)))),
        None if state.session.copy_behind_push()? => Some(RecvBuf::from_bytes(
            bytes::Bytes::copy_from_slice(&bytes[PREFIX_LEN..]),
        )),
        None => None,
    };
    match apart {
        Some(frame) => {
            state.session.deliver(frame)?;
            drop(state);
            inner.space.notify_waiters();
            inner.repost(slot);
        }
        None => {
            state.session.deliver(RecvBuf(Received::Slot {
                inner: inner.clone(),
                slot: Some(slot),
            }))?;
            drop(state);
            inner.space.notify_waiters();
        }
    }
    Ok(())
}

/// A rendezvous descriptor: the session schedules its READ, or, `pushed`, waits for its
/// pieces (`pushed.rs`); or it refuses the frame.
fn received_descriptor(
    inner: &Arc<Inner>,
    mut state: MutexGuard<'_, State>,
    slot: RecvSlot,
    pushed: bool,
) -> Result<(), Close> {
    let descriptor = Rendezvous::decode(&inner.rings.received(&slot)[PREFIX_LEN..]);
    let handled = if pushed {
        state.session.handle_pushed_descriptor(descriptor)
    } else {
        state.session.handle_descriptor(descriptor)
    };
    let result = match handled {
        Ok(Some(header)) => state
            .session
            .deliver(RecvBuf(Received::Header(refused(header)))),
        Ok(None) => Ok(()),
        Err(why) => Err(why),
    };
    drop(state);
    inner.space.notify_waiters();
    inner.repost(slot);
    result
}

/// Read-done tokens: each loan they name ends, its buffer back to the pool and its
/// budget to waiting senders.
fn received_read_dones(
    inner: &Arc<Inner>,
    mut state: MutexGuard<'_, State>,
    slot: RecvSlot,
) -> Result<(), Close> {
    let bytes = inner.rings.received(&slot);
    let tokens = bytes[PREFIX_LEN..]
        .chunks_exact(8)
        .map(|t| u64::from_le_bytes(t.try_into().expect("8 bytes")));
    let keys = state.session.handle_read_dones(tokens)?;
    drop(state);
    let mut freed = Vec::new();
    for key in keys {
        inner.loan_charges.returned(key);
        match inner.rings.reclaim(key) {
            Ok(charge) => freed.push(charge),
            Err(e) => return Err(Close::Failed(format!("ending a loan failed: {e}"))),
        }
    }
    if !freed.is_empty() {
        let mut state = inner.state.lock();
        for charge in freed {
            state.session.release_lending(charge);
        }
    }
    inner.space.notify_waiters();
    inner.repost(slot);
    Ok(())
}

/// Runs the session's timers that are due at `now` (pings after silence, the ping
/// timeout, the loan timeout; called by the shared CQ's timer task, `completion/tasks.rs`).
/// Returns when they are next due, at the latest `now + period` (a loan made meanwhile
/// may be due before the deadline the session had); `None` once the connection ended.
fn tick(inner: &Inner, now: Instant, period: Duration) -> Option<Instant> {
    let due = {
        let mut state = inner.state.lock();
        if state.session.is_closed() {
            return None;
        }
        state
            .session
            .handle_timeout(now)
            .map(|()| state.session.poll_timeout())
    };
    match due {
        Ok(next) => {
            inner.flush_control();
            Some(next.min(now + period))
        }
        Err(why) => {
            inner.fail(why);
            None
        }
    }
}
