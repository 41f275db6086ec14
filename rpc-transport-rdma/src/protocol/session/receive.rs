//! The receive side of a session: messages and descriptors in, READs to post and their
//! completions, frames handed up in order, read-dones, refusals.

use std::collections::VecDeque;

use rdmarpc_core::wire::Header;

use super::close::Close;
use super::{InOrder, Read, Reading, Session, MAX_GRANT};
use crate::protocol::{Lie, Prefix, Rendezvous};

/// Chunks one rendezvous frame is split into at most.
pub(crate) const MAX_CHUNKS: usize = 8;

impl<F> Session<F> {
    /// A message arrived (any kind): the peer is alive and returns credit.
    ///
    /// # Errors
    /// The peer acknowledged messages never sent.
    pub(crate) fn handle_message(&mut self, prefix: &Prefix) -> Result<(), Close> {
        self.heard += 1;
        self.credits
            .handle_peer_reposted(prefix.reposted)
            .map_err(Close::Violation)?;
        if prefix.granted > MAX_GRANT {
            return Err(Close::Violation(Lie::OverGranted {
                granted: prefix.granted,
            }));
        }
        if prefix.granted != 0 {
            self.credits.grow_peer(u64::from(prefix.granted));
        }
        if prefix.flags & Prefix::WANT != 0 && self.cfg.own_slots < self.cfg.max_slots {
            self.grow_due = true;
        }
        if prefix.flags & Prefix::PING != 0 {
            self.pong_due = true;
        }
        Ok(())
    }

    /// Looks at an eager frame: `Ok(Some(header))` if its payload is over the limit (hand
    /// up [`refused`] instead and re-post the slot at once), `Ok(None)` to hand it up.
    ///
    /// # Errors
    /// A malformed frame header.
    pub(crate) fn classify_eager(&mut self, frame: &[u8]) -> Result<Option<Header>, Close> {
        match Header::decode(frame) {
            Ok(Some(header)) if header.payload_len as usize > self.cfg.max_message_size => {
                Ok(Some(header))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(Close::Violation(Lie::Malformed(e))),
        }
    }

    /// A rendezvous descriptor arrived. `Ok(Some(header))`: refused unread for its size
    /// (hand up [`refused`]; its read-done is due at once). `Ok(None)`: queued for READ
    /// (see [`Session::poll_read`]).
    ///
    /// # Errors
    /// A lie (a length other than its header's), a malformed header, or a loan beyond
    /// what this side announced.
    pub(crate) fn handle_descriptor(&mut self, d: Rendezvous) -> Result<Option<Header>, Close> {
        let (header, lent, fits) = self.check_descriptor(&d)?;
        self.borrower.accept(lent, fits).map_err(Close::Violation)?;
        if !fits {
            self.done.push((d.token, 0));
            return Ok(Some(header));
        }
        let tag = self.next_tag();
        self.in_order.push_back(InOrder::Reading(tag));
        self.pending_reads.push_back((tag, d));
        Ok(None)
    }

    /// A descriptor's header, the bytes it lends (or pushes), and whether the frame is
    /// within this side's maximum (else it is refused unread).
    ///
    /// # Errors
    /// As [`Session::handle_descriptor`].
    pub(super) fn check_descriptor(&self, d: &Rendezvous) -> Result<(Header, usize, bool), Close> {
        let lent = usize::try_from(d.len).unwrap_or(usize::MAX);
        let len = lent.saturating_add(d.head.len());
        let header = match Header::decode(&d.header) {
            Ok(Some(header)) => header,
            Ok(None) => return Err(Close::Violation(Lie::DescriptorWithoutHeader)),
            Err(e) => return Err(Close::Violation(Lie::Malformed(e))),
        };
        if header.frame_len() != len {
            return Err(Close::Violation(Lie::DescriptorLength {
                len,
                frame: header.frame_len(),
            }));
        }
        if d.offset.checked_add(d.len).is_none() {
            return Err(Close::Violation(Lie::DescriptorWraps));
        }
        if !d.head.is_empty()
            && (lent == 0 || d.head.get(..rdmarpc_core::wire::HEADER_LEN) != Some(&d.header[..]))
        {
            return Err(Close::Violation(Lie::DescriptorHead));
        }
        let fits =
            header.payload_len as usize <= self.cfg.max_message_size && len <= self.cfg.max_frame;
        Ok((header, lent, fits))
    }

    /// A new tag for a frame being received by READ or pushed.
    pub(super) fn next_tag(&mut self) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        tag
    }

    /// READ work requests a frame of `len` bytes is split into, and their size.
    pub(super) fn chunking(&self, len: usize) -> (usize, usize) {
        let chunk = self.cfg.read_chunk.max(len.div_ceil(MAX_CHUNKS)).max(1);
        (len.div_ceil(chunk).max(1), chunk)
    }

    /// The next READ to post, if the READ budget allows.
    pub(crate) fn poll_read(&mut self) -> Option<Read> {
        if self.is_closed() {
            return None;
        }
        let (_, next) = self.pending_reads.front()?;
        let (chunks, chunk) = self.chunking(next.len as usize);
        if self.read_wrs + chunks > self.cfg.read_wr_budget {
            return None;
        }
        let (tag, d) = self.pending_reads.pop_front().expect("checked");
        self.read_wrs += chunks;
        let len = d.len as usize;
        self.reading.insert(
            tag,
            Reading {
                token: d.token,
                frame_len: d.head.len() + len,
                lent: len,
                chunks,
            },
        );
        Some(Read {
            tag,
            offset: d.offset,
            rkey: d.rkey,
            len,
            chunk,
            head: d.head,
        })
    }

    /// The READ tagged `tag` completed; `frame(token, frame_len, lent)` makes the frame
    /// it filled (`lent`: the bytes to acknowledge in [`Session::frame_consumed`]), which
    /// takes its place in the arrival order.
    ///
    /// # Errors
    /// A completion for a READ not posted.
    pub(crate) fn handle_read_complete(
        &mut self,
        tag: u64,
        frame: impl FnOnce(u64, usize, usize) -> F,
    ) -> Result<(), Close> {
        let Some(reading) = self.reading.remove(&tag) else {
            return Err(Close::Failed(format!(
                "completion of an unknown rendezvous read ({tag})"
            )));
        };
        self.read_wrs -= reading.chunks.min(self.read_wrs);
        let frame = frame(reading.token, reading.frame_len, reading.lent);
        if self.is_closed() {
            self.discarded.push(frame);
            return Ok(());
        }
        if let Some(place) = self
            .in_order
            .iter_mut()
            .find(|place| matches!(place, InOrder::Reading(t) if *t == tag))
        {
            *place = InOrder::Ready(frame);
        }
        while let Some(InOrder::Ready(_)) = self.in_order.front() {
            if let Some(InOrder::Ready(frame)) = self.in_order.pop_front() {
                self.ready.push_back(frame);
            }
        }
        Ok(())
    }

    /// A received frame (eager, or a refused header) takes its place in the arrival order.
    ///
    /// # Errors
    /// Too many frames held behind one being READ: each holds a receive slot (or a share
    /// of one: a batch) or a loan, except refused headers, which a peer could send
    /// without end.
    pub(crate) fn deliver(&mut self, frame: F) -> Result<(), Close> {
        if self.is_closed() {
            self.discarded.push(frame);
            return Ok(());
        }
        if self.in_order.is_empty() {
            self.ready.push_back(frame);
            return Ok(());
        }
        // A message may carry a batch of frames, each holding a share of its slot.
        let max = 2
            * (self.cfg.own_slots as usize * usize::from(crate::protocol::MAX_BATCH)
                + self.cfg.borrow.loans);
        if self.in_order.len() >= max {
            self.discarded.push(frame);
            return Err(Close::Violation(Lie::TooManyWaiting { max }));
        }
        self.in_order.push_back(InOrder::Ready(frame));
        Ok(())
    }

    /// The next frame to hand up, in the order the peer sent them.
    pub(crate) fn poll_deliver(&mut self) -> Option<F> {
        self.ready.pop_front()
    }

    /// Whether frames wait for [`Session::poll_deliver`].
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Every frame waiting to go up, taken (the receiver is gone, or they go to a sink).
    pub(crate) fn take_ready(&mut self) -> VecDeque<F> {
        std::mem::take(&mut self.ready)
    }

    /// Frames the session will not hand up, to drop outside the connection's lock.
    pub(crate) fn take_discarded(&mut self) -> Vec<F> {
        std::mem::take(&mut self.discarded)
    }

    /// A frame READ with `token` (`len` bytes) was consumed: its read-done is due.
    pub(crate) fn frame_consumed(&mut self, token: u64, len: usize) {
        if !self.is_closed() {
            self.done.push((token, len));
        }
    }

    /// The peer read (or refused) the frames lent with `tokens`: the verbs keys of the
    /// loans that end (the caller reclaims them and releases their charge).
    ///
    /// # Errors
    /// A read-done for a token not lent.
    pub(crate) fn handle_read_dones(
        &mut self,
        tokens: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<u32>, Close> {
        let mut keys = Vec::new();
        for token in tokens {
            match self.lent.remove(&token) {
                Some(loan) => keys.push(loan.key),
                None => return Err(Close::Violation(Lie::UnknownToken { token })),
            }
        }
        Ok(keys)
    }

    /// A receive slot was re-posted.
    pub(crate) fn handle_reposted(&mut self) {
        self.credits.handle_reposted();
    }

    // ---- control and time ----------------------------------------------------------
}

/// The header of a frame refused for its size, as it goes up: flagged
/// [`DISCARDED`](rdmarpc_core::wire::Flags::DISCARDED), without metadata or payload.
pub(crate) fn refused(header: Header) -> [u8; rdmarpc_core::wire::HEADER_LEN] {
    let mut h = header;
    h.flags = h.flags | rdmarpc_core::wire::Flags::DISCARDED;
    h.meta_len = 0;
    h.encode()
}
