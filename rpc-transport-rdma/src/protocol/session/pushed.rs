//! Pushed rendezvous frames, receive side: a sender that could not pin a buffer to lend
//! (its locked-memory limit spent) sends a descriptor flagged PUSHED, then the frame's
//! lent bytes in PIECE messages. The frame takes its place in the arrival order at its
//! descriptor, as a READ frame does, and counts against the same loan limits; its pieces
//! are copied out as they come (their slots are re-posted at once), and it goes up once
//! the last one arrived.

use std::time::Instant;

use rdmarpc_core::wire::Header;

use super::close::Close;
use super::{InOrder, Reading, Session};
use crate::protocol::{Lie, Rendezvous};

/// A pushed frame whose pieces are still coming.
#[derive(Debug)]
pub(super) struct Pushed {
    /// Its tag in the arrival order; `None`: refused for its size, its pieces dropped.
    tag: Option<u64>,
    /// What arrived: the inline head, then the pieces.
    bytes: Vec<u8>,
    /// Bytes still to come.
    left: usize,
    /// When the timers first saw it (the session reads no clock of its own): a push
    /// unfinished after the loan timeout ends the connection.
    seen: Option<Instant>,
}

impl<F> Session<F> {
    /// A descriptor flagged PUSHED arrived. `Ok(Some(header))`: refused for its size
    /// (hand up [`refused`](super::refused)); its pieces are dropped as they come, and its
    /// read-done is due after the last (the peer pushes every piece). `Ok(None)`: its
    /// frame goes up after its last piece ([`Session::handle_piece`]).
    ///
    /// # Errors
    /// As [`Session::handle_descriptor`], and a push under a token whose push is under
    /// way.
    pub(crate) fn handle_pushed_descriptor(
        &mut self,
        d: Rendezvous,
    ) -> Result<Option<Header>, Close> {
        let (header, lent, fits) = self.check_descriptor(&d)?;
        // Frames are never empty, and a head inline leaves bytes to lend (checked).
        debug_assert!(lent > 0, "a descriptor of nothing passed its checks");
        if self.pushed.contains_key(&d.token) {
            return Err(Close::Violation(Lie::TokenInUse { token: d.token }));
        }
        // Within the loan limits (checked below, before anything is kept): the frame's
        // memory, or, where the heap has none, the frame is refused as one over the size
        // limit is (the call fails, not the process).
        let mut bytes = Vec::new();
        let fits = fits && bytes.try_reserve_exact(d.head.len() + lent).is_ok();
        self.borrower.accept(lent, fits).map_err(Close::Violation)?;
        if !fits {
            let pushed = Pushed {
                tag: None,
                bytes: Vec::new(),
                left: lent,
                seen: None,
            };
            self.pushed.insert(d.token, pushed);
            return Ok(Some(header));
        }
        let tag = self.next_tag();
        self.in_order.push_back(InOrder::Reading(tag));
        self.reading.insert(
            tag,
            Reading {
                token: d.token,
                frame_len: d.head.len() + lent,
                lent,
                chunks: 0,
            },
        );
        bytes.extend_from_slice(&d.head);
        self.pushing += 1;
        self.pushed.insert(
            d.token,
            Pushed {
                tag: Some(tag),
                bytes,
                left: lent,
                seen: None,
            },
        );
        Ok(None)
    }

    /// A piece of the pushed frame `token` arrived (its slot may be re-posted at once).
    /// `Some((tag, frame))` once the frame is whole: it goes up as a READ frame does
    /// ([`Session::handle_read_complete`] with `tag`).
    ///
    /// # Errors
    /// A piece for no frame being pushed, or more bytes than its descriptor announced.
    pub(crate) fn handle_piece(
        &mut self,
        token: u64,
        piece: &[u8],
    ) -> Result<Option<(u64, Vec<u8>)>, Close> {
        let left = self.pushed.get(&token).map_or(0, |p| p.left);
        if piece.len() > left || piece.is_empty() {
            return Err(Close::Violation(Lie::PieceOverrun {
                token,
                len: piece.len(),
                left,
            }));
        }
        let pushed = self.pushed.get_mut(&token).expect("checked");
        pushed.left -= piece.len();
        if pushed.tag.is_some() {
            pushed.bytes.extend_from_slice(piece);
        }
        if pushed.left > 0 {
            return Ok(None);
        }
        let pushed = self.pushed.remove(&token).expect("checked");
        match pushed.tag {
            Some(tag) => {
                self.pushing -= 1;
                if self.pushing == 0 {
                    self.copied_behind = 0;
                }
                Ok(Some((tag, pushed.bytes)))
            }
            None => {
                // Refused: the loan ends once its last piece is in.
                self.done.push((token, 0));
                Ok(None)
            }
        }
    }

    /// Whether a message of frames received now waits behind a pushed frame whose
    /// pieces are still coming: `Ok(true)`: the driver copies its frames out and
    /// re-posts its slot at once, since the pieces need receive slots too (frames held
    /// in their slots there could keep them from coming).
    ///
    /// # Errors
    /// More such messages than an honest pusher sends: it posts no new frame until its
    /// pieces went, so only those whose slot (and credit) it had taken before, at most
    /// the slots it may claim here; twice that is allowed (copied memory is bounded by
    /// 2 x `max_slots` x slot size per connection).
    pub(crate) fn copy_behind_push(&mut self) -> Result<bool, Close> {
        if self.pushing == 0 {
            return Ok(false);
        }
        self.copied_behind += 1;
        let max = 2 * self.cfg.max_slots as usize;
        if self.copied_behind > max {
            return Err(Close::Violation(Lie::TooManyBehindPush { max }));
        }
        Ok(true)
    }

    /// Whether a frame received now would wait behind a pushed frame (tests).
    #[cfg(any(test, feature = "unstable-fuzzing"))]
    pub(crate) fn behind_push(&self) -> bool {
        self.pushing > 0
    }

    /// The push timer (from `handle_timeout`): a push first seen by an earlier run and
    /// unfinished after `timeout` ends the connection.
    pub(super) fn check_pushes(
        &mut self,
        now: Instant,
        timeout: std::time::Duration,
    ) -> Result<(), Close> {
        for pushed in self.pushed.values_mut() {
            match pushed.seen {
                None => pushed.seen = Some(now),
                Some(seen) if now.saturating_duration_since(seen) > timeout => {
                    return Err(Close::Violation(Lie::PushStalled { timeout }));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
