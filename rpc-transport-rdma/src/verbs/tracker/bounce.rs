//! READs through bounce slots: a rendezvous frame this process cannot pin a buffer for
//! (its locked-memory limit is spent) is pulled one slot-sized chunk at a time into send
//! slots, registered already within the connection's reserve, and copied out into heap
//! memory after each chunk's completion. Slower than one READ into a pinned buffer, but
//! the call is served: a connection set up within the limit never fails a call for it.
//!
//! ```text
//!   peer's lent buffer  [ c0 | c1 | c2 | c3 | c4 | ... ]
//!                          |    |    |                    chunk k into slot k % n,
//!   bounce slots        [ s0 ][ s1 ][ s2 ]                 copied out when it completes,
//!                          v    v    v                     then the slot pulls k + n
//!   heap frame          [ head | c0 | c1 | c2 | ... ]
//! ```
//!
//! READs of one QP complete in the order they were posted (an RC send queue completes
//! in order), so each completion is the oldest chunk in flight.

use std::collections::VecDeque;

use super::slots::{Event, SendSlot, TAG_READ};
use super::Rings;
use crate::verbs::{Error, RemoteBuf, WcStatus, WrId};

/// A frame being pulled through bounce slots.
#[derive(Debug)]
pub(super) struct Bounce {
    /// The whole frame; `bytes[..copied]` holds what arrived so far.
    bytes: Vec<u8>,
    copied: usize,
    /// Where the next chunk to post lands in `bytes`.
    posted: usize,
    /// The peer's address of `bytes[at]`, where the READs start.
    remote: RemoteBuf,
    at: usize,
    /// Slots with a chunk in flight, oldest first, and the chunk's length.
    in_flight: VecDeque<(SendSlot, usize)>,
    /// Slots with nothing more to pull.
    idle: Vec<SendSlot>,
    tag: u64,
    status: Result<(), WcStatus>,
}

impl Rings {
    /// Pulls `bytes[at..]` from `remote` through `slots` (at least one), each chunk one
    /// slot; `bytes` and the slots come back with `tag` in [`Event::Bounced`] once the
    /// last chunk completed.
    ///
    /// # Errors
    /// The verbs error of the first post, with the slots and `bytes` given back; a
    /// failure of a later post fails the bounce (reported through `complete`).
    ///
    /// # Panics
    /// If a slot belongs to other rings (a bug), or `slots` is empty or `at` is past
    /// the end of `bytes`.
    pub(crate) fn post_bounced_read(
        &self,
        slots: Vec<SendSlot>,
        bytes: Vec<u8>,
        at: usize,
        remote: RemoteBuf,
        tag: u64,
    ) -> std::result::Result<(), (Vec<SendSlot>, Vec<u8>, Error)> {
        assert!(
            !slots.is_empty() && at <= bytes.len(),
            "a bounce needs a slot"
        );
        for slot in &slots {
            assert_eq!(slot.rings, self.id, "send slot of another connection");
        }
        let len = bytes.len() - at;
        if remote.addr.checked_add(len as u64).is_none() {
            let e = Error::TooLarge {
                what: "remote READ range (address + length overflows)",
                len,
                max: (u64::MAX - remote.addr) as usize,
            };
            return Err((slots, bytes, e));
        }
        let mut reads = self.reads.lock();
        let key = reads.insert(super::Pending::Bounce(Bounce {
            bytes,
            copied: at,
            posted: at,
            remote,
            at,
            in_flight: VecDeque::with_capacity(slots.len()),
            idle: Vec::new(),
            tag,
            status: Ok(()),
        }));
        let super::Pending::Bounce(bounce) = &mut reads[key] else {
            unreachable!("inserted above");
        };
        let mut slots = slots.into_iter();
        let mut failed = None;
        for slot in slots.by_ref() {
            if let Err((slot, e)) = self.pull_next(key, bounce, slot) {
                bounce.idle.push(slot);
                failed = Some(e);
                break;
            }
        }
        bounce.idle.extend(slots);
        let Some(e) = failed else {
            return Ok(());
        };
        if bounce.in_flight.is_empty() {
            let super::Pending::Bounce(bounce) = reads.remove(key) else {
                unreachable!("inserted above");
            };
            return Err((bounce.idle, bounce.bytes, e));
        }
        // The chunks posted complete (or flush) and end the bounce.
        bounce.status = Err(WcStatus::LocQpOp);
        Ok(())
    }

    /// Posts the next chunk of `bounce` into `slot`, or parks the slot when every chunk
    /// is posted.
    fn pull_next(
        &self,
        key: usize,
        bounce: &mut Bounce,
        slot: SendSlot,
    ) -> std::result::Result<(), (SendSlot, Error)> {
        let n = self.slot_size().min(bounce.bytes.len() - bounce.posted);
        // An empty frame still takes one (empty) READ: its completion ends the bounce.
        let first = bounce.posted == bounce.at && bounce.in_flight.is_empty();
        if n == 0 && !first {
            bounce.idle.push(slot);
            return Ok(());
        }
        let target = RemoteBuf {
            addr: bounce.remote.addr + (bounce.posted - bounce.at) as u64,
            rkey: bounce.remote.rkey,
        };
        let (region, offset) = self.send.locate(slot.index);
        // SAFETY: the range is the first `n` bytes of the slot owned by `slot`, which now
        // belongs to the tracker (`reads`): nothing else can touch its bytes until this
        // READ's completion is reaped in `complete`, which reads them and only then posts
        // the slot again or hands the token back. The ring outlives the QP (field order).
        let posted = unsafe {
            self.qp
                .post_read(WrId(TAG_READ | key as u64), region, offset, n, target)
        };
        match posted {
            Ok(()) => {
                bounce.posted += n;
                bounce.in_flight.push_back((slot, n));
                Ok(())
            }
            Err(e) => Err((slot, e)),
        }
    }

    /// A chunk of the bounce under `key` completed with `status`: copies it out and
    /// pulls the next one into its slot; the frame (or its failure) goes into `events`
    /// once nothing of it is in flight.
    pub(super) fn bounce_completed(
        &self,
        reads: &mut slab::Slab<super::Pending>,
        key: usize,
        status: Result<(), WcStatus>,
        events: &mut Vec<Event>,
    ) {
        let super::Pending::Bounce(bounce) = &mut reads[key] else {
            unreachable!("the caller matched a bounce");
        };
        let Some((slot, n)) = bounce.in_flight.pop_front() else {
            tracing::error!(key, "completion of a bounce with nothing in flight");
            return;
        };
        if bounce.status.is_ok() {
            bounce.status = status;
        }
        if bounce.status.is_ok() {
            let (region, offset) = self.send.locate(slot.index);
            let chunk = region.slice(offset, n).expect("slot within the send ring");
            bounce.bytes[bounce.copied..bounce.copied + n].copy_from_slice(chunk);
            bounce.copied += n;
            if let Err((slot, e)) = self.pull_next(key, bounce, slot) {
                tracing::debug!("posting a bounce READ failed: {e}");
                bounce.status = Err(WcStatus::LocQpOp);
                bounce.idle.push(slot);
            }
        } else {
            bounce.idle.push(slot);
        }
        if bounce.in_flight.is_empty() {
            let super::Pending::Bounce(done) = reads.remove(key) else {
                unreachable!("matched above");
            };
            debug_assert!(done.status.is_err() || done.copied == done.bytes.len());
            events.push(Event::Bounced {
                bytes: done.bytes,
                slots: done.idle,
                tag: done.tag,
                status: done.status,
            });
        }
    }
}
