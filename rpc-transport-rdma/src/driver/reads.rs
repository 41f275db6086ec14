//! Rendezvous READs: posting the ones the session has due, into a pinned buffer from the
//! receive pool or, when this process cannot pin one (its locked-memory limit is spent,
//! idle buffers given back already), through bounce slots into heap memory
//! (`verbs/tracker/bounce.rs`); and the frames their completions make.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::connection::{Inner, Received, RecvBuf, State};
use crate::counters::Counters;
use crate::pool::LargeBuf;
use crate::protocol::session::{Close, Read};
use crate::verbs::{RemoteBuf, SendSlot, WcStatus};

/// Send slots one bounced frame pulls through at most (its chunks are pipelined over
/// them); it starts with whatever is free beyond [`LEFT_FREE`], at least one.
const BOUNCE_SLOTS: usize = 4;

/// Send slots a bounce leaves free: control messages (pongs, credits, read-dones) and
/// pieces still go while frames are pulled through the others.
const LEFT_FREE: usize = 2;

/// Posts the READs the session has due, within its READ budget; frames waiting for a
/// bounce slot go first, in their order.
pub(super) fn start_reads(inner: &Inner) -> Result<(), Close> {
    loop {
        let next = {
            let mut state = inner.state.lock();
            let state = &mut *state;
            match state.unpinned.pop_front() {
                Some(read) => {
                    let n = state.sends.free().saturating_sub(LEFT_FREE);
                    let slots: Vec<SendSlot> = std::iter::from_fn(|| state.sends.take())
                        .take(n.min(BOUNCE_SLOTS))
                        .collect();
                    if slots.is_empty() {
                        // Sends in flight give slots back; their completions (or a sender
                        // that gives its slot back, `resume`) call again.
                        state.unpinned.push_front(read);
                        return Ok(());
                    }
                    Next::Bounce(read, slots)
                }
                None => match state.session.poll_read() {
                    Some(read) => Next::Pinned(read),
                    None => return Ok(()),
                },
            }
        };
        match next {
            Next::Pinned(read) => read_pinned(inner, read)?,
            Next::Bounce(read, slots) => bounce(inner, read, slots)?,
        }
    }
}

enum Next {
    Pinned(Read),
    Bounce(Read, Vec<SendSlot>),
}

fn remote(read: &Read) -> RemoteBuf {
    RemoteBuf {
        addr: read.offset,
        rkey: read.rkey,
    }
}

/// Posts `read` into a pinned buffer, or queues it for a bounce if none can be pinned.
fn read_pinned(inner: &Inner, read: Read) -> Result<(), Close> {
    tracing::trace!(
        tag = read.tag,
        offset = read.offset,
        len = read.len,
        rkey = read.rkey,
        "pulling a rendezvous frame"
    );
    let head = read.head.len();
    let mut buf = match inner.rx_pool.take(head + read.len) {
        Ok(buf) => buf,
        Err(e) if e.is_out_of_locked_memory() => {
            static SAID: AtomicBool = AtomicBool::new(false);
            crate::warn_once::warn_once(
                &SAID,
                format_args!(
                    "rendezvous frames from {} are pulled through the connection's send \
                     slots into unpinned memory, slot by slot (slower; raise the limit to \
                     avoid it): {e}",
                    inner.peer
                ),
            );
            inner.state.lock().unpinned.push_back(read);
            return Ok(());
        }
        Err(e) => return Err(Close::Failed(format!("rendezvous buffer: {e}"))),
    };
    // The frame's first bytes came inline; the lent ones land after them.
    buf.region_mut().as_mut_slice()[..head].copy_from_slice(&read.head);
    inner
        .rings
        .post_read(buf, head, read.len, remote(&read), read.chunk, read.tag)
        .map_err(|(_buf, e)| Close::Failed(format!("posting an RDMA READ failed: {e}")))
}

/// Pulls `read` through `slots` into heap memory (bounded: the session checked the
/// frame's length against the maximum when its descriptor arrived).
fn bounce(inner: &Inner, read: Read, slots: Vec<SendSlot>) -> Result<(), Close> {
    Counters::bump(&inner.counters.bounced_reads, 1);
    let head = read.head.len();
    let mut bytes = Vec::new();
    if bytes.try_reserve_exact(head + read.len).is_err() {
        give_back(inner, slots);
        return Err(Close::Failed(format!(
            "no heap memory for a rendezvous frame of {} bytes",
            head + read.len
        )));
    }
    bytes.extend_from_slice(&read.head);
    bytes.resize(head + read.len, 0);
    let remote = remote(&read);
    match inner
        .rings
        .post_bounced_read(slots, bytes, head, remote, read.tag)
    {
        Ok(()) => Ok(()),
        Err((slots, _bytes, e)) => {
            give_back(inner, slots);
            Err(Close::Failed(format!("posting an RDMA READ failed: {e}")))
        }
    }
}

/// Bounce slots back to the free ones (and the senders waiting for one woken).
fn give_back(inner: &Inner, slots: Vec<SendSlot>) {
    {
        let mut state = inner.state.lock();
        slots.into_iter().for_each(|s| state.sends.give_back(s));
    }
    inner.space.notify_waiters();
}

/// Every chunk of the READ tagged `tag` completed: its frame takes its place in the
/// arrival order (its read-done goes out when the frame is dropped: `RecvBuf`'s drop).
pub(super) fn read_completed(
    inner: &Arc<Inner>,
    tag: u64,
    buf: LargeBuf,
    status: Result<(), WcStatus>,
    cause: Option<&str>,
) -> Result<(), Close> {
    if let Err(s) = status {
        return Err(super::failure(inner, "RDMA READ", s, cause));
    }
    let mut state = inner.state.lock();
    frame_completed(inner, &mut state, tag, |token, len, lent| Received::Large {
        inner: inner.clone(),
        buf,
        len,
        lent,
        token,
    })
}

/// A bounced READ completed: its slots are free again and its frame, in heap memory,
/// takes its place in the arrival order.
pub(super) fn bounce_completed(
    inner: &Arc<Inner>,
    tag: u64,
    bytes: Vec<u8>,
    slots: Vec<SendSlot>,
    status: Result<(), WcStatus>,
    cause: Option<&str>,
) -> Result<(), Close> {
    give_back(inner, slots);
    if let Err(s) = status {
        return Err(super::failure(inner, "RDMA READ", s, cause));
    }
    let mut state = inner.state.lock();
    frame_completed(inner, &mut state, tag, |token, _len, lent| {
        Received::Copied {
            inner: inner.clone(),
            bytes,
            lent,
            token,
        }
    })
}

/// The frame received under `tag` (READ, bounced or pushed) is whole: `make(token, len,
/// lent)` makes it, and it takes its place in the arrival order; counted as read.
pub(super) fn frame_completed(
    inner: &Inner,
    state: &mut State,
    tag: u64,
    make: impl FnOnce(u64, usize, usize) -> Received,
) -> Result<(), Close> {
    state.session.handle_read_complete(tag, |token, len, lent| {
        Counters::bump(&inner.counters.rendezvous_reads, 1);
        Counters::bump(&inner.counters.bytes_read, lent as u64);
        RecvBuf(make(token, len, lent))
    })
}

/// Runs what waits for a free send slot (bounces, pieces) after a sender gave one back
/// outside a completion (a frame dropped unsent, a frame merged into a batch): no
/// completion may come to run them otherwise.
pub(crate) fn resume(inner: &Inner) {
    if let Err(why) = start_reads(inner).and_then(|()| inner.push_due()) {
        inner.fail(why);
    }
}
