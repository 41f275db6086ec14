//! The completion driver: one task per connection that reaps completions and turns them
//! into received frames, freed slots, credits and RDMA READs.
//!
//! Loop order: poll the CQ in batches; after each non-empty batch, handle every event,
//! then send due control traffic. When the CQ is empty, keep polling for
//! `RdmaConfig::poll_spin` (lowest latency under load), then arm the CQ notification,
//! poll once more (a completion may have arrived between the last poll and the arming),
//! and sleep on the completion channel's file descriptor through tokio, together with
//! the side-channel socket (its end means the peer process is gone) and the close signal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::wire::{Flags, Header};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::connection::{InOrder, Inner, Received, RecvBuf, PEER_CLOSED};
use crate::counters::Counters;
use crate::protocol::{Kind, Prefix, Rendezvous, PREFIX_LEN};
use crate::verbs::{register_channel, wc_buffer, CompChannel, Event, RecvSlot, WcStatus};

/// Completions reaped per poll.
const POLL_BATCH: usize = 32;
/// READ work requests in flight per connection at most (the send queue is sized for it).
pub(crate) const READ_WR_BUDGET: usize = 32;
/// Chunks one rendezvous frame is split into at most.
const MAX_CHUNKS: usize = 8;
const _: () = assert!(MAX_CHUNKS <= READ_WR_BUDGET);

/// Runs the connection until it fails or is closed.
pub(crate) async fn run(
    inner: Arc<Inner>,
    channel: Arc<CompChannel>,
    mut side: TcpStream,
    incoming: mpsc::UnboundedSender<RecvBuf>,
) {
    let channel = match register_channel(channel) {
        Ok(fd) => fd,
        Err(e) => return inner.fail(&format!("registering the completion channel: {e}")),
    };
    let mut closed = inner.closed.subscribe();
    let mut wcs = wc_buffer(POLL_BATCH);
    let mut scratch = Vec::with_capacity(POLL_BATCH);
    let mut events = Vec::with_capacity(POLL_BATCH);
    let mut side_buf = [0u8; 64];
    let mut idle_since: Option<Instant> = None;
    let mut batches = 0u32;
    loop {
        if closed.borrow().is_some() {
            break;
        }
        match inner
            .rings
            .poll(&inner.cq, &mut wcs, &mut scratch, &mut events)
        {
            Ok(0) => {}
            Ok(_) => {
                idle_since = None;
                // Completions of our own sends and READs prove only that the peer's NIC
                // is alive (the kernel acknowledges for a stopped process): liveness
                // counts messages received, which the peer's driver sent.
                for event in events.drain(..) {
                    handle(&inner, event, &incoming);
                }
                inner.flush_control();
                batches = batches.wrapping_add(1);
                if batches % 16 == 0 {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            Err(e) => {
                inner.fail(&format!("polling the completion queue: {e}"));
                break;
            }
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < inner.config.poll_spin {
            tokio::task::yield_now().await;
            continue;
        }
        if let Err(e) = inner.cq.req_notify(false) {
            inner.fail(&format!("arming the completion queue: {e}"));
            break;
        }
        // A completion that arrived before arming raised no event: poll once more.
        match inner
            .rings
            .poll(&inner.cq, &mut wcs, &mut scratch, &mut events)
        {
            Ok(0) => {}
            Ok(_) => {
                for event in events.drain(..) {
                    handle(&inner, event, &incoming);
                }
                inner.flush_control();
                idle_since = None;
                continue;
            }
            Err(e) => {
                inner.fail(&format!("polling the completion queue: {e}"));
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
                                inner.fail(&format!("reading the completion channel: {e}"));
                                break;
                            }
                        }
                    }
                    idle_since = None;
                }
                Err(e) => {
                    inner.fail(&format!("waiting on the completion channel: {e}"));
                    break;
                }
            },
            read = side.read(&mut side_buf) => {
                match read {
                    Ok(0) => inner.fail(PEER_CLOSED),
                    Ok(_) => inner.fail("unexpected bytes on the side channel"),
                    Err(e) => inner.fail(&format!("side channel: {e}")),
                }
                break;
            }
            _ = closed.changed() => break,
        }
    }
    // Tell the peer at once (its side channel ends), rather than after its ping timeout.
    drop(side);
    drop(incoming);
    // Frames held for ordering hold the connection: release them (outside the lock).
    let held = std::mem::take(&mut inner.state.lock().in_order);
    drop(held);
    // Completions still arriving may tell why the QP failed (the send and receive sides
    // of a software provider report independently): log the first real error.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let Some(cause) = drain_for_cause(&inner) {
        tracing::warn!(peer = %inner.peer, "after the connection ended: {cause}");
    }
}

/// Handles one completion.
fn handle(inner: &Arc<Inner>, event: Event, incoming: &mpsc::UnboundedSender<RecvBuf>) {
    match event {
        Event::Sent { slot, status } => {
            inner.state.lock().free_send.push(slot);
            inner.space.notify_waiters();
            if let Err(status) = status {
                fail_on(inner, "send", status);
            }
        }
        Event::Received { slot, status } => match (slot, status) {
            (Some(slot), Ok(())) => received(inner, slot, incoming),
            (_, Err(status)) => fail_on(inner, "receive", status),
            (None, Ok(())) => {}
        },
        Event::Read { buf, tag, status } => {
            let entry = {
                let mut state = inner.state.lock();
                let entry = state.reading.remove(&tag);
                if let Some((_, len)) = entry {
                    state.read_wrs -= chunks_of(inner, len).min(state.read_wrs);
                }
                entry
            };
            if let Err(status) = status {
                return fail_on(inner, "RDMA READ", status);
            }
            let Some((token, len)) = entry else {
                return inner.fail("completion of an unknown rendezvous read");
            };
            Counters::bump(&inner.counters.rendezvous_reads, 1);
            Counters::bump(&inner.counters.bytes_read, len as u64);
            // The read-done goes out when the frame is dropped (`RecvBuf`'s drop).
            let frame = RecvBuf(Received::Large {
                inner: inner.clone(),
                buf,
                len,
                token,
            });
            read_in_order(inner, token, frame, incoming);
            start_pending_reads(inner);
        }
        Event::Reclaimed { charge, status } => {
            inner.state.lock().lender.release(charge);
            inner.space.notify_waiters();
            if let Err(status) = status {
                fail_on(inner, "invalidating a memory window", status);
            }
        }
        Event::BindFailed { status } => fail_on(inner, "binding a memory window", status),
    }
}

fn fail_on(inner: &Inner, what: &str, status: WcStatus) {
    if inner.state.lock().closed {
        // Flushes and late errors after a failure that was already reported.
        return;
    }
    if status == WcStatus::WrFlush {
        // The QP entered the error state without (yet) telling us why: completions of the
        // send and the receive side may be reported in either order. Look for the cause
        // among the completions still queued before reporting.
        let cause = drain_for_cause(inner);
        inner.fail(&format!(
            "the queue pair entered the error state ({what} flushed{})",
            cause.map(|c| format!("; cause: {c}")).unwrap_or_default()
        ));
    } else {
        inner.fail(&format!("{what} completed with error: {status}"));
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
fn received(inner: &Arc<Inner>, slot: RecvSlot, incoming: &mpsc::UnboundedSender<RecvBuf>) {
    let bytes = inner.rings.received(&slot);
    let prefix = match Prefix::decode(bytes) {
        Ok(p) => p,
        Err(e) => return inner.fail(&format!("malformed message from the peer: {e}")),
    };
    {
        let mut state = inner.state.lock();
        state.last_heard = Instant::now();
        if let Err(e) = state.credits.handle_peer_reposted(prefix.reposted) {
            drop(state);
            return inner.fail(&e);
        }
    }
    inner.space.notify_waiters();
    match prefix.kind {
        Kind::Data => {
            let frame = &bytes[PREFIX_LEN..];
            match Header::decode(frame) {
                Ok(Some(header)) if header.payload_len as usize > inner.config.max_message_size => {
                    deliver(inner, discarded(header), incoming);
                    inner.repost(slot);
                }
                Ok(_) => {
                    Counters::bump(&inner.counters.eager_receives, 1);
                    let frame = RecvBuf(Received::Slot {
                        inner: inner.clone(),
                        slot: Some(slot),
                    });
                    deliver(inner, frame, incoming);
                }
                Err(e) => inner.fail(&format!("malformed frame from the peer: {e}")),
            }
        }
        Kind::Rendezvous => {
            let descriptor = Rendezvous::decode(&bytes[PREFIX_LEN..]);
            inner.repost(slot);
            let len = descriptor.len as usize;
            match Header::decode(&descriptor.header) {
                // A length other than its own header's is a lie: nothing to refuse politely.
                Ok(Some(header)) if header.frame_len() != len => inner.fail(&format!(
                    "rendezvous descriptor of {len} bytes for a frame of {}",
                    header.frame_len()
                )),
                Ok(Some(header))
                    if header.payload_len as usize > inner.config.max_message_size
                        || len > inner.max_frame =>
                {
                    // Refused unread; the peer may release its buffer at once.
                    let mut state = inner.state.lock();
                    if let Err(e) = state.borrower.accept(len, false) {
                        drop(state);
                        return inner.fail(&e);
                    }
                    state.done_tokens.push((descriptor.token, 0));
                    drop(state);
                    deliver(inner, discarded(header), incoming);
                }
                Ok(Some(_)) => {
                    let mut state = inner.state.lock();
                    if state.closed {
                        return;
                    }
                    if let Err(e) = state.borrower.accept(len, true) {
                        drop(state);
                        return inner.fail(&e);
                    }
                    state.in_order.push_back(InOrder::Reading(descriptor.token));
                    state.pending_reads.push_back(descriptor);
                    drop(state);
                    start_pending_reads(inner);
                }
                Ok(None) => inner.fail("rendezvous descriptor without a frame header"),
                Err(e) => inner.fail(&format!("malformed frame from the peer: {e}")),
            }
        }
        Kind::Control => {
            let body = &bytes[PREFIX_LEN..];
            let released: Vec<_> = {
                let mut state = inner.state.lock();
                if prefix.flags & Prefix::PING != 0 {
                    state.pong_due = true;
                }
                let mut released = Vec::with_capacity(body.len() / 8);
                for t in body.chunks_exact(8) {
                    let token = u64::from_le_bytes(t.try_into().expect("8 bytes"));
                    match state.lent.remove(&token) {
                        Some((key, _)) => released.push(key),
                        None => {
                            drop(state);
                            return inner
                                .fail(&format!("read-done for token {token}, which is not lent"));
                        }
                    }
                }
                released
            };
            // Each loan ends: its buffer returns to the pool and its budget to waiting
            // senders, at once, or (windows) when the invalidation completes
            // (Event::Reclaimed).
            let mut freed = Vec::new();
            for key in released {
                match inner.rings.reclaim(key) {
                    Ok(Some(charge)) => freed.push(charge),
                    Ok(None) => {}
                    Err(e) => return inner.fail(&format!("ending a loan failed: {e}")),
                }
            }
            if !freed.is_empty() {
                let mut state = inner.state.lock();
                for charge in freed {
                    state.lender.release(charge);
                }
                drop(state);
                inner.space.notify_waiters();
            }
            inner.repost(slot);
        }
    }
}

/// Hands `frame` up in arrival order: at once, or after the frames before it that are
/// still being READ.
///
/// Held frames are bounded: each holds a receive slot or a loan, except the headers of
/// frames refused for their size, which a peer could send without end while one READ is
/// slow; beyond twice the slots and loans together the connection is closed.
fn deliver(inner: &Inner, frame: RecvBuf, incoming: &mpsc::UnboundedSender<RecvBuf>) {
    let mut state = inner.state.lock();
    if state.closed {
        // Nothing is held once the connection failed (held frames keep it alive).
        drop(state);
        drop(frame);
        return;
    }
    if state.in_order.is_empty() {
        drop(state);
        let _ = incoming.send(frame);
        return;
    }
    let max =
        2 * (inner.rings.geometry().recv_slots as usize + usize::from(inner.config.max_loans));
    if state.in_order.len() >= max {
        drop(state);
        drop(frame);
        return inner.fail(&format!(
            "more than {max} frames from the peer wait behind one being read"
        ));
    }
    state.in_order.push_back(InOrder::Ready(frame));
}

/// The READ of the frame lent with `token` finished: it takes its place in the arrival
/// order, and every frame now at the front goes up.
fn read_in_order(
    inner: &Inner,
    token: u64,
    frame: RecvBuf,
    incoming: &mpsc::UnboundedSender<RecvBuf>,
) {
    let ready: Vec<RecvBuf> = {
        let mut state = inner.state.lock();
        if state.closed {
            drop(state);
            drop(frame);
            return;
        }
        let place = state
            .in_order
            .iter_mut()
            .find(|d| matches!(d, InOrder::Reading(t) if *t == token));
        match place {
            Some(place) => *place = InOrder::Ready(frame),
            None => state.in_order.push_back(InOrder::Ready(frame)),
        }
        let mut ready = Vec::new();
        while let Some(InOrder::Ready(_)) = state.in_order.front() {
            if let Some(InOrder::Ready(frame)) = state.in_order.pop_front() {
                ready.push(frame);
            }
        }
        ready
    };
    for frame in ready {
        let _ = incoming.send(frame);
    }
}

/// READ work requests a frame of `len` bytes needs.
fn chunks_of(inner: &Inner, len: usize) -> usize {
    len.div_ceil(read_chunk(inner, len)).max(1)
}

fn read_chunk(inner: &Inner, len: usize) -> usize {
    inner.config.read_chunk.max(len.div_ceil(MAX_CHUNKS))
}

/// Starts queued rendezvous reads while the READ budget allows.
fn start_pending_reads(inner: &Arc<Inner>) {
    loop {
        let descriptor = {
            let mut state = inner.state.lock();
            let Some(next) = state.pending_reads.front() else {
                return;
            };
            let need = chunks_of(inner, next.len as usize);
            if state.read_wrs + need > READ_WR_BUDGET {
                return;
            }
            state.read_wrs += need;
            let d = state.pending_reads.pop_front().expect("checked");
            if state.reading.contains_key(&d.token) {
                drop(state);
                return inner.fail(&format!(
                    "the peer lent two buffers with token {} at once",
                    d.token
                ));
            }
            state.reading.insert(d.token, (d.token, d.len as usize));
            tracing::trace!(
                token = d.token,
                offset = d.offset,
                len = d.len,
                rkey = d.rkey,
                "pulling a rendezvous frame"
            );
            d
        };
        let len = descriptor.len as usize;
        let buf = match inner.rx_pool.take(len) {
            Ok(buf) => buf,
            Err(e) => return inner.fail(&format!("rendezvous buffer: {e}")),
        };
        let remote = crate::verbs::RemoteBuf {
            addr: descriptor.offset,
            rkey: descriptor.rkey,
        };
        if let Err((_buf, e)) =
            inner
                .rings
                .post_read(buf, len, remote, read_chunk(inner, len), descriptor.token)
        {
            return inner.fail(&format!("posting an RDMA READ failed: {e}"));
        }
    }
}

fn discarded(header: Header) -> RecvBuf {
    let mut h = header;
    h.flags = h.flags | Flags::DISCARDED;
    h.meta_len = 0;
    RecvBuf(Received::Header(h.encode()))
}

/// Sends pings after silence and fails the connection after too much of it. Silence is
/// time without a message *received* from the peer (any kind: its driver sent it, so the
/// peer process runs); a peer that is stopped or whose runtime is blocked stops answering
/// pings even though its NIC still acknowledges ours.
pub(crate) async fn keepalive(
    inner: std::sync::Weak<Inner>,
    interval: Duration,
    timeout: Duration,
    loan_timeout: Duration,
) {
    // Often enough for both the ping interval and the loan timeout.
    let period = (interval / 2)
        .min(loan_timeout / 2)
        .max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let silence = {
            let mut state = inner.state.lock();
            if state.closed {
                return;
            }
            let loan_timeout = inner.config.loan_timeout;
            if let Some(since) = state.lent.values().map(|(_, at)| *at).min() {
                if since.elapsed() > loan_timeout {
                    drop(state);
                    inner.fail(&format!(
                        "the peer held a rendezvous buffer for more than {loan_timeout:?} without reading it (loan timeout)"
                    ));
                    return;
                }
            }
            if state.ping_due && !state.credits.can_ping() {
                // The peer holds every credit but the reserve, which a ping may not spend:
                // we cannot ask, so its silence proves nothing (the runtime's own
                // keepalive, whose PING waits for credit under its own timeout, covers a
                // peer that is really gone).
                state.last_heard = Instant::now();
            }
            let silence = state.last_heard.elapsed();
            if silence >= interval {
                state.ping_due = true;
            }
            silence
        };
        if silence >= timeout {
            inner.fail(&format!(
                "peer silent for {silence:?} (ping timeout {timeout:?})"
            ));
            return;
        }
        inner.flush_control();
    }
}
