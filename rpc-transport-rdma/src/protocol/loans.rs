//! Rendezvous loan accounting, sans-IO: what a lender may lend at once, and what a
//! borrower accepts, as agreed in the handshake.
//!
//! Both sides count a loan as *outstanding* from the descriptor until the read-done:
//!
//! ```text
//!   lender:   reserve ──> (descriptor sent) ─────────────────────────> read-done received ──> release
//!   borrower:               descriptor received ──> READ ──> read-done sent (accept .. acknowledge)
//! ```
//!
//! The borrower stops counting a loan when it *sends* the read-done, the lender when it
//! *receives* it, so the borrower's count never exceeds the lender's: an honest lender
//! that keeps within [`LoanLimit`] never trips the borrower's check, whatever the order
//! in which READs complete (the model test below drives both through random schedules).
//! Bytes are counted by frame length; a descriptor refused unread (a frame over the size
//! limit) counts as one loan of zero bytes on the borrower's side.

use super::lie::Lie;

/// At most `loans` frames and `bytes` bytes outstanding at once; a frame larger than
/// `bytes` goes alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoanLimit {
    pub(crate) bytes: usize,
    pub(crate) loans: usize,
}

impl LoanLimit {
    /// Whether one more frame of `len` bytes fits beside `bytes` in `loans` frames.
    pub(crate) fn admits(&self, bytes: usize, loans: usize, len: usize) -> bool {
        loans < self.loans && (loans == 0 || bytes.saturating_add(len) <= self.bytes)
    }
}

/// Frames and bytes outstanding within a [`LoanLimit`]: what both sides count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outstanding {
    limit: LoanLimit,
    bytes: usize,
    loans: usize,
}

impl Outstanding {
    fn new(limit: LoanLimit) -> Outstanding {
        Outstanding {
            limit,
            bytes: 0,
            loans: 0,
        }
    }

    /// Counts one more frame of `len` bytes if the limit admits it.
    fn try_add(&mut self, len: usize) -> bool {
        let fits = self.limit.admits(self.bytes, self.loans, len);
        if fits {
            self.bytes += len;
            self.loans += 1;
        }
        fits
    }

    /// Stops counting a frame of `len` bytes.
    fn remove(&mut self, len: usize) {
        debug_assert!(
            self.loans > 0 && self.bytes >= len,
            "removing a loan never counted"
        );
        self.bytes -= len.min(self.bytes);
        self.loans = self.loans.saturating_sub(1);
    }
}

/// The lender's side: frames lent (or reserved for frames being built) until their
/// read-done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lender(Outstanding);

impl Lender {
    pub(crate) fn new(limit: LoanLimit) -> Lender {
        Lender(Outstanding::new(limit))
    }

    /// Reserves a frame of `len` bytes if it fits (else the caller waits).
    pub(crate) fn try_reserve(&mut self, len: usize) -> bool {
        self.0.try_add(len)
    }

    /// Gives back a reservation: its read-done arrived, or it was never sent.
    pub(crate) fn release(&mut self, len: usize) {
        self.0.remove(len);
    }

    /// Frames outstanding.
    pub(crate) fn loans(&self) -> usize {
        self.0.loans
    }
}

/// The borrower's side: descriptors received whose read-done has not been sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Borrower(Outstanding);

impl Borrower {
    pub(crate) fn new(limit: LoanLimit) -> Borrower {
        Borrower(Outstanding::new(limit))
    }

    /// A descriptor of `len` bytes arrived; `read` is false for one refused unread (it
    /// holds a loan but no bytes).
    ///
    /// # Errors
    /// The lender went beyond the agreement: close the connection with this reason.
    pub(crate) fn accept(&mut self, len: usize, read: bool) -> Result<(), Lie> {
        let counted = if read { len } else { 0 };
        if self.0.try_add(counted) {
            return Ok(());
        }
        let Outstanding {
            limit,
            bytes,
            loans,
        } = &self.0;
        Err(Lie::OverLent {
            len,
            loans: *loans,
            bytes: *bytes,
            limit_loans: limit.loans,
            limit_bytes: limit.bytes,
        })
    }

    /// The read-done of a loan of `len` counted bytes (0 if refused unread) was sent.
    pub(crate) fn acknowledged(&mut self, len: usize) {
        self.0.remove(len);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    #[test]
    fn limits_count_frames_and_bytes_and_let_a_large_frame_go_alone() {
        let limit = LoanLimit {
            bytes: 100,
            loans: 3,
        };
        let mut lender = Lender::new(limit);
        assert!(lender.try_reserve(500), "alone, any size");
        assert!(!lender.try_reserve(1), "beside it, nothing");
        lender.release(500);
        assert!(lender.try_reserve(60));
        assert!(lender.try_reserve(40));
        assert!(!lender.try_reserve(1), "bytes spent");
        lender.release(60);
        assert!(lender.try_reserve(10));
        assert!(lender.try_reserve(0));
        assert!(!lender.try_reserve(0), "three frames at once");
        assert_eq!(lender.loans(), 3);

        let mut borrower = Borrower::new(limit);
        borrower.accept(500, true).unwrap();
        assert!(borrower.accept(1, true).is_err());
        borrower.acknowledged(500);
        borrower.accept(7, false).unwrap();
        borrower.accept(100, true).unwrap();
        assert!(borrower.accept(0, true).is_ok());
        assert!(
            borrower.accept(0, false).is_err(),
            "a fourth loan, even refused"
        );
    }

    /// An honest lender and a borrower with the same limits, over two FIFO wires (the
    /// descriptors one way, read-dones the other), under random schedules: READs
    /// complete in any order, read-dones are sent in batches at random times, frames
    /// of random sizes (some larger than the budget, some refused unread). The borrower
    /// never finds the lender beyond the agreement, the lender's count always covers
    /// the borrower's, and everything lent is eventually acknowledged.
    #[test]
    fn an_honest_lender_never_trips_the_borrower_under_random_schedules() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            let limit = LoanLimit {
                bytes: 1 + (next() % 1000) as usize,
                loans: 1 + (next() % 6) as usize,
            };
            let mut lender = Lender::new(limit);
            let mut borrower = Borrower::new(limit);
            // In flight to the borrower: (len, refused). At the borrower: loans being
            // read, then read and waiting for a read-done batch. Back to the lender.
            let mut to_borrower = VecDeque::new();
            // (frame length, bytes the borrower counted)
            let mut reading: Vec<(usize, usize)> = Vec::new();
            let mut done: Vec<(usize, usize)> = Vec::new();
            let mut to_lender: VecDeque<Vec<(usize, usize)>> = VecDeque::new();
            let (mut lent, mut acked) = (0, 0);
            for _step in 0..400 {
                match next() % 5 {
                    0 => {
                        let len = (next() % 1500) as usize;
                        if lender.try_reserve(len) {
                            to_borrower.push_back((len, next() % 7 == 0));
                            lent += 1;
                        }
                    }
                    1 => {
                        if let Some((len, refused)) = to_borrower.pop_front() {
                            borrower
                                .accept(len, !refused)
                                .expect("honest lender refused");
                            let counted = if refused { 0 } else { len };
                            if refused {
                                done.push((len, counted));
                            } else {
                                reading.push((len, counted));
                            }
                        }
                    }
                    2 if !reading.is_empty() => {
                        let i = (next() as usize) % reading.len();
                        done.push(reading.swap_remove(i));
                    }
                    3 if !done.is_empty() => {
                        let batch: Vec<_> = std::mem::take(&mut done);
                        for &(_, counted) in &batch {
                            borrower.acknowledged(counted);
                        }
                        to_lender.push_back(batch);
                    }
                    4 => {
                        if let Some(batch) = to_lender.pop_front() {
                            for (len, _) in batch {
                                lender.release(len);
                                acked += 1;
                            }
                        }
                    }
                    _ => {}
                }
                assert!(borrower.0.loans <= lender.0.loans);
                assert!(borrower.0.bytes <= lender.0.bytes);
                assert!(lender.0.loans <= limit.loans);
                assert!(lender.0.loans <= 1 || lender.0.bytes <= limit.bytes);
            }
            // Drain: everything lent is read and acknowledged.
            while let Some((len, refused)) = to_borrower.pop_front() {
                borrower
                    .accept(len, !refused)
                    .expect("honest lender refused");
                done.push((len, if refused { 0 } else { len }));
            }
            done.append(&mut reading);
            for &(_, counted) in &done {
                borrower.acknowledged(counted);
            }
            to_lender.push_back(done);
            for batch in to_lender {
                for (len, _) in batch {
                    lender.release(len);
                    acked += 1;
                }
            }
            assert_eq!(lent, acked);
            assert_eq!((lender.0.loans, lender.0.bytes), (0, 0));
            assert_eq!((borrower.0.loans, borrower.0.bytes), (0, 0));
        }
    }

    #[test]
    fn a_lender_beyond_the_agreement_is_caught() {
        let limit = LoanLimit {
            bytes: 1000,
            loans: 4,
        };
        // A lender that believes it may lend 8 frames.
        let mut liar = Lender::new(LoanLimit {
            bytes: 1000,
            loans: 8,
        });
        let mut borrower = Borrower::new(limit);
        let mut caught = false;
        for _ in 0..8 {
            assert!(liar.try_reserve(10));
            if borrower.accept(10, true).is_err() {
                caught = true;
                break;
            }
        }
        assert!(caught);
        assert_eq!(borrower.0.loans, 4);
    }
}
