//! An [`Account`]: one connection's counters with its peer's and the server's above
//! them, and the [`Charge`]s taken from it, given back when dropped and split and merged
//! as what they stand for moves.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counters::{Counters, Resource, Scope, SCOPES};
use super::pool::Pool;
/// One connection's account, with its peer's and the server's above it. Clones are the
/// same account.
#[derive(Debug, Clone)]
pub struct Account {
    /// Connection, peer, server: narrowest first, the order charges are taken in. One
    /// `Arc`, so that a charge's reference to its account is one count.
    levels: Arc<[Arc<Counters>; 3]>,
}

/// A resource exhausted at one level of the tree: why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{} by {} are at the limit of {limit}", resource.describe(), scope.describe())]
pub struct Exhausted {
    /// What ran out.
    pub resource: Resource,
    /// Where (at the server: its common half is full, and this peer holds its fair share
    /// of the reserve: no more than the reserve has left).
    pub scope: Scope,
    /// The limit there.
    pub limit: usize,
}

impl From<Exhausted> for crate::Status {
    fn from(e: Exhausted) -> crate::Status {
        crate::Status::resource_exhausted(e.to_string())
    }
}

impl Account {
    /// The account whose levels are `levels`: connection, peer, server.
    pub(super) fn new(levels: Arc<[Arc<Counters>; 3]>) -> Account {
        Account { levels }
    }

    /// What a charge of `n` takes: `n`, but at most the most one charge can take on its
    /// path ([`Account::limit`]: a message larger than a limit is charged as the whole of
    /// it, so it fits once that level holds nothing else).
    fn amount(&self, resource: Resource, n: usize) -> usize {
        n.min(self.limit(resource))
    }

    fn exhausted(&self, resource: Resource, level: usize) -> Exhausted {
        let counters = &self.levels[level];
        Exhausted {
            resource,
            scope: counters.scope,
            limit: counters.limits[resource.index()],
        }
    }

    /// Takes `n` of `resource` from every level now, or nothing.
    ///
    /// # Errors
    /// [`Exhausted`], naming the narrowest level that has no room.
    pub fn try_charge(&self, resource: Resource, n: usize) -> Result<Charge, Exhausted> {
        let amount = self.amount(resource, n);
        let (i, n) = (resource.index(), amount);
        let [connection, peer, _] = &*self.levels;
        if !connection.free[i].try_take(n) {
            return Err(self.exhausted(resource, 0));
        }
        let connection = Taken(&connection.free[i], n);
        if !peer.free[i].try_take(n) {
            return Err(self.exhausted(resource, 1));
        }
        let peer = Taken(&peer.free[i], n);
        let Some(reserve) = self.try_server(i, amount) else {
            return Err(self.exhausted(resource, 2));
        };
        // The charge gives them back from now on.
        std::mem::forget((connection, peer));
        Ok(Charge::new(self, i, amount, reserve))
    }

    /// The server's part of a charge: from the common half, or else from the reserve
    /// within the peer's fair share; how much came from the reserve, or `None` when
    /// neither has room.
    fn try_server(&self, i: usize, amount: usize) -> Option<usize> {
        let [_, peer, server] = &*self.levels;
        let n = amount;
        if server.free[i].try_take(n) {
            return Some(0);
        }
        let reserve = &server.reserve.as_ref().expect("the server's counters")[i];
        // Fair: what the peer holds of the reserve, this charge included, stays within
        // what the reserve has left after it.
        let holding = peer.reserve_held[i].load(Ordering::Relaxed) + n;
        let left = reserve.available().checked_sub(n)?;
        if holding > left || !reserve.try_take(n) {
            return None;
        }
        peer.reserve_held[i].fetch_add(n, Ordering::Relaxed);
        Some(amount)
    }

    /// Gives back what a charge took: `amount` at every level, `reserve` of it to the
    /// server's reserve.
    pub(super) fn give_back(&self, i: usize, amount: usize, reserve: usize) {
        let [connection, peer, server] = &*self.levels;
        if reserve > 0 {
            peer.reserve_held[i].fetch_sub(reserve, Ordering::Relaxed);
            server.reserve.as_ref().expect("the server's counters")[i].give(reserve);
        }
        server.free[i].give(amount - reserve);
        peer.free[i].give(amount);
        connection.free[i].give(amount);
    }

    /// Whether `other` is this account (a clone of it).
    pub(super) fn is(&self, other: &Account) -> bool {
        Arc::ptr_eq(&self.levels, &other.levels)
    }

    /// Takes `n` of `resource` from every level, waiting (narrowest first, in arrival
    /// order at each) while one has no room: backpressure on whoever waits. At the
    /// server it takes the reserve's room within its fair share if the common half has
    /// none, and else waits for the common half. Dropped while it waits, it holds
    /// nothing.
    pub async fn charge(&self, resource: Resource, n: usize) -> Charge {
        // Room now (the common case): no waiting futures. A waiter at any level makes
        // this fail (the pools hand freed room to waiters first).
        if let Ok(charge) = self.try_charge(resource, n) {
            return charge;
        }
        let amount = self.amount(resource, n);
        let (i, n) = (resource.index(), amount);
        let [connection, peer, server] = &*self.levels;
        connection.free[i].take(n).await;
        let connection = Taken(&connection.free[i], n);
        peer.free[i].take(n).await;
        let peer = Taken(&peer.free[i], n);
        let reserve = match self.try_server(i, amount) {
            Some(reserve) => reserve,
            None => {
                server.free[i].take(n).await;
                0
            }
        };
        // The charge gives them back from now on.
        std::mem::forget((connection, peer));
        Charge::new(self, i, amount, reserve)
    }

    /// The most one charge (or several held together by one holder) can ever take of
    /// `resource` on this account's path: the smallest of its limits (at the server, its
    /// common half).
    pub fn limit(&self, resource: Resource) -> usize {
        let i = resource.index();
        self.levels
            .iter()
            .map(|c| c.largest(i))
            .min()
            .unwrap_or(1)
            .max(1)
    }

    /// How much of `resource` is charged at `scope` now.
    pub fn held(&self, resource: Resource, scope: Scope) -> usize {
        let level = &self.levels[SCOPES.iter().position(|s| *s == scope).expect("a scope")];
        level.held(resource.index())
    }
}

/// Units taken from one pool while a charge is being put together: given back if the
/// charge is given up before it holds them.
struct Taken<'a>(&'a Pool, usize);

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.0.give(self.1);
    }
}

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
