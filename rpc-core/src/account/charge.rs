//! [`Charge`]: what one holder took from a connection's, its peer's and the server's
//! account, given back when dropped; split and merged as what it stands for moves.

use super::ledger::Account;

/// An amount taken from a connection's, its peer's and the server's account; given back
/// to all three when dropped.
///
/// It is a count, not a set of permits: the account's counters are given back by
/// arithmetic, so a charge is one reference to its account and three integers.
#[derive(Debug, Default)]
#[must_use = "a charge is given back when dropped"]
pub struct Charge {
    /// Where it was taken; `None` for a charge of nothing.
    account: Option<Account>,
    /// The resource's index.
    resource: u8,
    amount: usize,
    /// Of `amount`, what the server's part took from its reserve rather than its common
    /// half (counted as the peer's while held: its fair share is computed from it).
    reserve: usize,
}

impl Charge {
    /// `amount` taken at every level of `account`, `reserve` of it from the server's
    /// reserve.
    pub(super) fn new(account: &Account, resource: usize, amount: usize, reserve: usize) -> Charge {
        Charge {
            account: Some(account.clone()),
            resource: resource as u8,
            amount,
            reserve,
        }
    }

    /// A charge of nothing.
    pub fn none() -> Charge {
        Charge::default()
    }

    /// How much it holds.
    pub fn amount(&self) -> usize {
        self.amount
    }

    /// Adds `other` (of the same account and resource) to this one.
    pub fn merge(&mut self, mut other: Charge) {
        // `other` keeps nothing to give back.
        let Some(theirs) = other.account.take() else {
            return;
        };
        match &self.account {
            None => {
                self.account = Some(theirs);
                self.resource = other.resource;
                self.amount = other.amount;
                self.reserve = other.reserve;
            }
            Some(mine) => {
                // Given back to the wrong account, the counters would drift for good.
                assert!(
                    mine.is(&theirs) && self.resource == other.resource,
                    "charges of one account and resource"
                );
                self.amount += other.amount;
                self.reserve += other.reserve;
            }
        }
    }

    /// Takes `n` of it (all of it, if it holds less) into a charge of its own.
    pub fn split(&mut self, n: usize) -> Charge {
        let n = n.min(self.amount);
        if n == 0 || self.account.is_none() {
            return Charge::none();
        }
        // The server's part: from the reserve first (it is the scarcer), then the
        // common half.
        let reserve = self.reserve.min(n);
        self.amount -= n;
        self.reserve -= reserve;
        Charge {
            account: self.account.clone(),
            resource: self.resource,
            amount: n,
            reserve,
        }
    }

    /// Gives back `n` of it now (all of it, if it holds less).
    pub fn release(&mut self, n: usize) {
        drop(self.split(n));
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(account) = &self.account {
            if self.amount > 0 {
                account.give_back(self.resource as usize, self.amount, self.reserve);
            }
        }
    }
}
