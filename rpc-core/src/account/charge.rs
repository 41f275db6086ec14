//! [`Charge`]: what one holder took from a connection's, its peer's and the server's
//! account, given back when dropped; split and merged as what it stands for moves.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::ledger::Counters;
use super::pool::Units;

/// An amount taken from a connection's, its peer's and the server's account; given back
/// to all three when dropped.
#[derive(Debug, Default)]
#[must_use = "a charge is given back when dropped"]
pub struct Charge {
    /// The connection's and the peer's permits; `None` for a charge of nothing.
    levels: Option<[Units; 2]>,
    /// The server's part, from its common half, its reserve, or (after a merge) both.
    common: Option<Units>,
    /// Boxed: rare (the server's common half is full), and a charge is moved often.
    reserve: Option<Box<ReservePart>>,
    amount: u32,
}

/// Where the server's part of a new charge came from.
#[derive(Debug)]
pub(super) enum Part {
    Common(Units),
    Reserve(ReservePart),
}

/// Room taken from the server's reserve, counted as the peer's while it is held (its
/// fair share is computed from these counts).
#[derive(Debug)]
pub(super) struct ReservePart {
    permit: Units,
    peer: Arc<Counters>,
    i: usize,
}

impl ReservePart {
    pub(super) fn new(permit: Units, peer: Arc<Counters>, i: usize) -> ReservePart {
        peer.reserve_held[i].fetch_add(permit.count(), Ordering::Relaxed);
        ReservePart { permit, peer, i }
    }

    fn amount(&self) -> usize {
        self.permit.count()
    }

    fn split(&mut self, n: usize) -> ReservePart {
        let permit = self.permit.split(n).expect("the part holds n");
        // The count moves with the permits: nothing to change.
        ReservePart {
            permit,
            peer: self.peer.clone(),
            i: self.i,
        }
    }

    fn merge(&mut self, mut other: ReservePart) {
        self.permit.merge(other.permit.take_all());
        // `other` now holds nothing: its drop counts nothing off.
    }
}

impl Drop for ReservePart {
    fn drop(&mut self) {
        self.peer.reserve_held[self.i].fetch_sub(self.amount(), Ordering::Relaxed);
    }
}

impl Charge {
    pub(super) fn new(levels: [Units; 2], server: Part, amount: u32) -> Charge {
        let (common, reserve) = match server {
            Part::Common(permit) => (Some(permit), None),
            Part::Reserve(part) => (None, Some(Box::new(part))),
        };
        Charge {
            levels: Some(levels),
            common,
            reserve,
            amount,
        }
    }

    /// A charge of nothing.
    pub fn none() -> Charge {
        Charge::default()
    }

    /// How much it holds.
    pub fn amount(&self) -> usize {
        self.amount as usize
    }

    /// Adds `other` (of the same account and resource) to this one.
    pub fn merge(&mut self, other: Charge) {
        let Some(theirs) = other.levels else {
            return;
        };
        match &mut self.levels {
            None => {
                self.levels = Some(theirs);
                self.common = other.common;
                self.reserve = other.reserve;
                self.amount = other.amount;
                return;
            }
            Some(mine) => {
                for (mine, theirs) in mine.iter_mut().zip(theirs) {
                    mine.merge(theirs);
                }
            }
        }
        match (&mut self.common, other.common) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine, theirs) => *mine = mine.take().or(theirs),
        }
        match (&mut self.reserve, other.reserve) {
            (Some(mine), Some(theirs)) => mine.merge(*theirs),
            (mine, theirs) => *mine = mine.take().or(theirs),
        }
        self.amount += other.amount;
    }

    /// Takes `n` of it (all of it, if it holds less) into a charge of its own.
    pub fn split(&mut self, n: usize) -> Charge {
        let n = n.min(self.amount as usize);
        let Some(levels) = self.levels.as_mut().filter(|_| n > 0) else {
            return Charge::none();
        };
        let levels = levels
            .each_mut()
            .map(|permit| permit.split(n).expect("the charge holds n"));
        // The server's part: from the reserve first (it is the scarcer), then the
        // common half.
        let from_reserve = self.reserve.as_ref().map_or(0, |r| r.amount()).min(n);
        let reserve = (from_reserve > 0).then(|| {
            Box::new(
                self.reserve
                    .as_mut()
                    .expect("it holds some")
                    .split(from_reserve),
            )
        });
        let common = (n > from_reserve).then(|| {
            self.common
                .as_mut()
                .and_then(|permit| permit.split(n - from_reserve))
                .expect("the charge holds n")
        });
        self.amount -= n as u32;
        Charge {
            levels: Some(levels),
            common,
            reserve,
            amount: n as u32,
        }
    }

    /// Gives back `n` of it now (all of it, if it holds less).
    pub fn release(&mut self, n: usize) {
        drop(self.split(n));
    }
}
