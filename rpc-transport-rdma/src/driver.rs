//! The completion driver: one task per connection that reaps completions and turns them
//! into received frames, freed slots, credits and RDMA READs.
//!
//! Loop order: poll the CQ in batches; after each non-empty batch, handle every event,
//! then send due control traffic. When the CQ is empty, keep polling for
//! `RdmaConfig::poll_spin` (lowest latency under load), or `RdmaConfig::await_spin` while
//! this side sent more frames than it received (replies are due), then arm the CQ notification,
//! poll once more (a completion may have arrived between the last poll and the arming),
//! and sleep on the completion channel's file descriptor through tokio, together with
//! the side-channel socket (its end means the peer process is gone) and the close signal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::connection::{Inner, Received, RecvBuf};
use crate::counters::Counters;
use crate::protocol::session::{refused, Close};
use crate::protocol::{Kind, Prefix, Rendezvous, PREFIX_LEN};
use crate::verbs::{register_channel, wc_buffer, CompChannel, Event, RecvSlot, WcStatus};

/// Completions reaped per poll.
const POLL_BATCH: usize = 32;
/// READ work requests in flight per connection at most (the send queue is sized for it).
pub(crate) const READ_WR_BUDGET: usize = 32;
const _: () = assert!(crate::protocol::session::MAX_CHUNKS <= READ_WR_BUDGET);

/// What polling the completion queue needs; one per connection, taken by whoever polls
/// (the driver, or a task in `recv`).
pub(crate) struct Poller {
    wcs: Box<[rdma_sys::ibv_wc]>,
    scratch: Vec<crate::verbs::Completion>,
    events: Vec<Event>,
}

impl Poller {
    pub(crate) fn new() -> Poller {
        Poller {
            wcs: wc_buffer(POLL_BATCH),
            scratch: Vec::with_capacity(POLL_BATCH),
            events: Vec::with_capacity(POLL_BATCH),
        }
    }

    fn poll(&mut self, inner: &Arc<Inner>) -> Result<usize, Close> {
        poll_and_handle(inner, &mut self.wcs, &mut self.scratch, &mut self.events)
    }
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller").finish_non_exhaustive()
    }
}

/// Polls the completion queue once, unless another task is polling it: returns the
/// completions handled (0 also when another task polls).
pub(crate) fn progress(inner: &Arc<Inner>) -> Result<usize, Close> {
    match inner.poller.try_lock() {
        Some(mut poller) => poller.poll(inner),
        None => Ok(0),
    }
}

/// Runs the connection until it fails or is closed.
pub(crate) async fn run(inner: Arc<Inner>, channel: Arc<CompChannel>, mut side: TcpStream) {
    let channel = match register_channel(channel) {
        Ok(fd) => fd,
        Err(e) => {
            return inner.fail(Close::Failed(format!(
                "registering the completion channel: {e}"
            )))
        }
    };
    let mut closed = inner.closed.subscribe();
    // The peer may start with more receive slots than we have send slots.
    if let Err(why) = grow(&inner) {
        return inner.fail(why);
    }
    let mut side_buf = [0u8; 64];
    let mut idle_since: Option<Instant> = None;
    let mut spin = inner.config.poll_spin;
    let mut turns = 0u32;
    let mut batches = 0u32;
    loop {
        if closed.borrow().is_some() {
            break;
        }
        match progress(&inner) {
            Ok(0) => {}
            Ok(_) => {
                idle_since = None;
                batches = batches.wrapping_add(1);
                if batches % 16 == 0 {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            Err(why) => {
                inner.fail(why);
                break;
            }
        }
        // The clock is read every 8th turn only (a system call where the clock source is
        // not the TSC, as in emulated guests).
        turns = turns.wrapping_add(1);
        let since = match idle_since {
            Some(since) => since,
            None => {
                spin = if inner.state.lock().session.awaiting() {
                    inner.config.await_spin.max(inner.config.poll_spin)
                } else {
                    inner.config.poll_spin
                };
                *idle_since.insert(Instant::now())
            }
        };
        if turns % 8 != 0 || since.elapsed() < spin {
            tokio::task::yield_now().await;
            continue;
        }
        if let Err(e) = inner.cq.req_notify(false) {
            inner.fail(Close::Failed(format!("arming the completion queue: {e}")));
            break;
        }
        // A completion that arrived before arming raised no event: poll once more, and
        // really (a receiving task that polls now may have looked before it arrived).
        let polled = inner.poller.lock().poll(&inner);
        match polled {
            Ok(0) => {}
            Ok(_) => {
                idle_since = None;
                continue;
            }
            Err(why) => {
                inner.fail(why);
                break;
            }
        }
        tokio::select! {
            ready = channel.readable() => match ready {
                Ok(mut guard) => {
                    guard.clear_ready();
                    loop {
                        match inner.cq.get_event_and_ack() {
                            Ok(true) => continue,
                            Ok(false) => break,
                            Err(e) => {
                                inner.fail(Close::Failed(format!("reading the completion channel: {e}")));
                                break;
                            }
                        }
                    }
                    idle_since = None;
                }
                Err(e) => {
                    inner.fail(Close::Failed(format!("waiting on the completion channel: {e}")));
                    break;
                }
            },
            read = side.read(&mut side_buf) => {
                inner.fail(match read {
                    Ok(0) => Close::PeerClosed,
                    Ok(_) => Close::Violation("unexpected bytes on the side channel".into()),
                    Err(e) => Close::Failed(format!("side channel: {e}")),
                });
                break;
            }
            _ = closed.changed() => break,
        }
    }
    // Tell the peer at once (its side channel ends), rather than after its ping timeout.
    drop(side);
    // Frames held by the session hold the connection: release them (outside the lock).
    let held = inner.state.lock().session.close(Close::Local);
    drop(held);
    let (sink, waiting) = {
        let mut upward = inner.upward.lock();
        upward.ended = true;
        // Nobody will receive what is left: it holds the connection's state.
        let waiting = upward
            .receiver_gone
            .then(|| inner.state.lock().session.take_ready());
        (upward.sink.clone(), waiting)
    };
    drop(waiting);
    // Outside the lock: the sink's work may drop the connection handle, whose drop takes it.
    if let Some(sink) = sink {
        sink.closed(inner.end_result());
    }
    inner.arrived.notify_one();
    // Completions still arriving may tell why the QP failed (the send and receive sides
    // of a software provider report independently): log the first real error.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let Some(cause) = drain_for_cause(&inner) {
        tracing::warn!(peer = %inner.peer, "after the connection ended: {cause}");
    }
}

/// Polls one batch of completions and handles it: events into the session, then the
/// READs, frames and control messages the session has due. Returns the completions
/// reaped.
fn poll_and_handle(
    inner: &Arc<Inner>,
    wcs: &mut [rdma_sys::ibv_wc],
    scratch: &mut Vec<crate::verbs::Completion>,
    events: &mut Vec<Event>,
) -> Result<usize, Close> {
    let n = inner
        .rings
        .poll(&inner.cq, wcs, scratch, events)
        .map_err(|e| Close::Failed(format!("polling the completion queue: {e}")))?;
    if n == 0 {
        return Ok(0);
    }
    // Completions of our own sends and READs prove only that the peer's NIC is alive
    // (the kernel acknowledges for a stopped process): liveness counts messages
    // received, which the peer's driver sent.
    let mut result = Ok(n);
    for event in events.drain(..) {
        if result.is_ok() {
            if let Err(why) = handle(inner, event) {
                result = Err(why);
            }
        }
    }
    start_reads(inner)?;
    if hand_up(inner) {
        grow(inner)?;
    }
    inner.flush_control();
    result
}

/// Hands up the frames the session has ready, in order: to the runtime's sink when it
/// takes frames from here, else they stay in the session for `recv`, which is woken.
/// Drops the frames the session discarded. Runs under the poller lock (so frames go up
/// in order, one batch at a time) and outside every other lock: dropping a frame, or
/// the sink's work, re-enters the connection. Returns whether a ring is to grow (looked
/// at under the same lock, so the batch takes it once).
fn hand_up(inner: &Inner) -> bool {
    let (sink, gone) = {
        let upward = inner.upward.lock();
        (upward.sink.clone(), upward.receiver_gone)
    };
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
        Some(sink) => {
            for frame in ready {
                sink.frame(frame);
            }
        }
        None => drop(ready),
    }
    if waiting {
        inner.arrived.notify_one();
    }
    growth
}

/// Grows the rings with use: the receive ring when the peer ran out of credit (the next
/// message grants the new slots), the send ring when the peer grants more slots than
/// there are send slots.
fn grow(inner: &Inner) -> Result<(), Close> {
    let (grow_recv, peer_slots) = {
        let mut state = inner.state.lock();
        (state.session.take_grow(), state.session.peer_slots())
    };
    if grow_recv {
        let n = inner
            .rings
            .grow_recv()
            .map_err(|e| Close::Failed(format!("growing the receive ring: {e}")))?;
        if n > 0 {
            inner.state.lock().session.grown(n);
            tracing::debug!(peer = %inner.peer, slots = inner.rings.recv_slots(), "receive ring grew");
        }
    }
    if peer_slots > u64::from(inner.rings.send_slots()) {
        let slots = inner
            .rings
            .grow_send()
            .map_err(|e| Close::Failed(format!("growing the send ring: {e}")))?;
        if !slots.is_empty() {
            inner.state.lock().free_send.extend(slots);
            inner.space.notify_waiters();
            tracing::debug!(peer = %inner.peer, slots = inner.rings.send_slots(), "send ring grew");
        }
    }
    Ok(())
}

/// Handles one completion.
fn handle(inner: &Arc<Inner>, event: Event) -> Result<(), Close> {
    match event {
        Event::Sent { slot, status } => {
            inner.state.lock().free_send.push(slot);
            inner.space.notify_waiters();
            status.map_err(|s| failure(inner, "send", s))
        }
        Event::Received { slot, status } => match (slot, status) {
            (Some(slot), Ok(())) => received(inner, slot),
            (_, Err(s)) => Err(failure(inner, "receive", s)),
            (None, Ok(())) => Ok(()),
        },
        Event::Read { buf, tag, status } => {
            if let Err(s) = status {
                return Err(failure(inner, "RDMA READ", s));
            }
            inner
                .state
                .lock()
                .session
                .handle_read_complete(tag, |token, len| {
                    Counters::bump(&inner.counters.rendezvous_reads, 1);
                    Counters::bump(&inner.counters.bytes_read, len as u64);
                    // The read-done goes out when the frame is dropped (`RecvBuf`'s drop).
                    RecvBuf(Received::Large {
                        inner: inner.clone(),
                        buf,
                        len,
                        token,
                    })
                })
        }
        Event::Reclaimed { charge, status } => {
            inner.state.lock().session.release_lending(charge);
            inner.space.notify_waiters();
            status.map_err(|s| failure(inner, "invalidating a memory window", s))
        }
        Event::BindFailed { status } => Err(failure(inner, "binding a memory window", status)),
    }
}

/// Why the connection ends after a completion with `status`.
fn failure(inner: &Inner, what: &str, status: WcStatus) -> Close {
    if status == WcStatus::WrFlush && !inner.state.lock().session.is_closed() {
        // The QP entered the error state without (yet) telling us why: completions of the
        // send and the receive side may be reported in either order. Look for the cause
        // among the completions still queued before reporting.
        let cause = drain_for_cause(inner);
        Close::Failed(format!(
            "the queue pair entered the error state ({what} flushed{})",
            cause.map(|c| format!("; cause: {c}")).unwrap_or_default()
        ))
    } else {
        Close::Failed(format!("{what} completed with error: {status}"))
    }
}

/// After a flush: polls what is left on the CQ for an error other than a flush.
fn drain_for_cause(inner: &Inner) -> Option<String> {
    let mut wcs = wc_buffer(POLL_BATCH);
    let (mut scratch, mut events) = (Vec::new(), Vec::new());
    for _ in 0..64 {
        events.clear();
        match inner
            .rings
            .poll(&inner.cq, &mut wcs, &mut scratch, &mut events)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        for event in events.drain(..) {
            let (what, status) = match event {
                Event::Sent { status, .. } => ("send", status),
                Event::Received { status, .. } => ("receive", status),
                Event::Read { status, .. } => ("RDMA READ", status),
                Event::Reclaimed { status, .. } => ("invalidating a memory window", status),
                Event::BindFailed { status } => ("binding a memory window", Err(status)),
            };
            if let Err(s) = status {
                if s != WcStatus::WrFlush {
                    return Some(format!("{what} completed with error: {s}"));
                }
            }
        }
    }
    None
}

/// A message arrived in `slot`.
fn received(inner: &Arc<Inner>, slot: RecvSlot) -> Result<(), Close> {
    let bytes = inner.rings.received(&slot);
    let prefix =
        Prefix::decode(bytes).map_err(|e| Close::Violation(format!("malformed message: {e}")))?;
    let mut state = inner.state.lock();
    state.session.handle_message(&prefix)?;
    match prefix.kind {
        Kind::Data => match state.session.classify_eager(&bytes[PREFIX_LEN..])? {
            Some(header) => {
                state
                    .session
                    .deliver(RecvBuf(Received::Header(refused(header))))?;
                drop(state);
                inner.space.notify_waiters();
                inner.repost(slot);
            }
            None => {
                Counters::bump(&inner.counters.eager_receives, 1);
                state.session.deliver(RecvBuf(Received::Slot {
                    inner: inner.clone(),
                    slot: Some(slot),
                }))?;
                drop(state);
                inner.space.notify_waiters();
            }
        },
        Kind::Rendezvous => {
            let descriptor = Rendezvous::decode(&bytes[PREFIX_LEN..]);
            let refused_header = state.session.handle_descriptor(descriptor);
            let result = match refused_header {
                Ok(Some(header)) => state
                    .session
                    .deliver(RecvBuf(Received::Header(refused(header)))),
                Ok(None) => Ok(()),
                Err(why) => Err(why),
            };
            drop(state);
            inner.space.notify_waiters();
            inner.repost(slot);
            result?;
        }
        Kind::Control => {
            let tokens = bytes[PREFIX_LEN..]
                .chunks_exact(8)
                .map(|t| u64::from_le_bytes(t.try_into().expect("8 bytes")));
            let keys = state.session.handle_read_dones(tokens)?;
            drop(state);
            // Each loan ends: its buffer returns to the pool and its budget to waiting
            // senders, at once, or (windows) when the invalidation completes
            // (Event::Reclaimed).
            let mut freed = Vec::new();
            for key in keys {
                match inner.rings.reclaim(key) {
                    Ok(Some(charge)) => freed.push(charge),
                    Ok(None) => {}
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
        }
    }
    Ok(())
}

/// Posts the READs the session has due, within its READ budget.
fn start_reads(inner: &Inner) -> Result<(), Close> {
    loop {
        let Some(read) = inner.state.lock().session.poll_read() else {
            return Ok(());
        };
        tracing::trace!(
            tag = read.tag,
            offset = read.offset,
            len = read.len,
            rkey = read.rkey,
            "pulling a rendezvous frame"
        );
        let buf = inner
            .rx_pool
            .take(read.len)
            .map_err(|e| Close::Failed(format!("rendezvous buffer: {e}")))?;
        let remote = crate::verbs::RemoteBuf {
            addr: read.offset,
            rkey: read.rkey,
        };
        if let Err((_buf, e)) = inner
            .rings
            .post_read(buf, read.len, remote, read.chunk, read.tag)
        {
            return Err(Close::Failed(format!("posting an RDMA READ failed: {e}")));
        }
    }
}

/// Runs the session's timers (pings after silence, the ping timeout, the loan timeout)
/// when they are due, and at least every `period` (a loan made while this sleeps may be
/// due before the deadline it slept for). Holds the connection only while it works.
pub(crate) async fn keepalive(inner: std::sync::Weak<Inner>, period: Duration) {
    let period = period.max(Duration::from_millis(10));
    loop {
        let next = {
            let Some(inner) = inner.upgrade() else { return };
            let state = inner.state.lock();
            if state.session.is_closed() {
                return;
            }
            state.session.poll_timeout().min(Instant::now() + period)
        };
        tokio::time::sleep_until(next.into()).await;
        let Some(inner) = inner.upgrade() else { return };
        let due = inner.state.lock().session.handle_timeout(Instant::now());
        if let Err(why) = due {
            inner.fail(why);
            return;
        }
        inner.flush_control();
    }
}
