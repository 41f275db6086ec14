//! The accounts themselves: counters with limits, a connection's charged together with
//! its peer's and the server's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::charge::Charge;
use super::pool::Pool;
use super::PeerKey;

/// What an account counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resource {
    /// Calls running their handler's work (a unary call until its response is handed to
    /// the transport).
    Calls,
    /// Streaming calls open, idle or not.
    Streams,
    /// Bytes held in memory at their in-memory size (decoded, decompressed): requests
    /// and request-stream messages the server has not answered or read yet.
    Bytes,
    /// Bytes handed to a transport for the peer and not yet written out (responses,
    /// response-stream messages, statuses): a pool of its own, so that a response
    /// waiting for room never waits for requests that wait for it.
    Sending,
}

pub(super) const RESOURCES: usize = 4;
const ALL: [Resource; RESOURCES] = [
    Resource::Calls,
    Resource::Streams,
    Resource::Bytes,
    Resource::Sending,
];

impl Resource {
    fn index(self) -> usize {
        match self {
            Resource::Calls => 0,
            Resource::Streams => 1,
            Resource::Bytes => 2,
            Resource::Sending => 3,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Resource::Calls => "calls running",
            Resource::Streams => "streams open",
            Resource::Bytes => "bytes held",
            Resource::Sending => "bytes queued for sending",
        }
    }
}

/// Which account of the tree a limit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// One connection.
    Connection,
    /// Every connection of one peer ([`PeerKey`]).
    Peer,
    /// The whole server.
    Server,
}

impl Scope {
    fn describe(self) -> &'static str {
        match self {
            Scope::Connection => "this connection",
            Scope::Peer => "this peer",
            Scope::Server => "the server",
        }
    }
}

const SCOPES: [Scope; 3] = [Scope::Connection, Scope::Peer, Scope::Server];

/// One resource's limits at each level of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Per connection.
    pub connection: usize,
    /// Per peer, over all its connections.
    pub peer: usize,
    /// Server-wide.
    pub server: usize,
}

impl Limit {
    fn at(&self, scope: Scope) -> usize {
        let limit = match scope {
            Scope::Connection => self.connection,
            Scope::Peer => self.peer,
            Scope::Server => self.server,
        };
        limit.clamp(1, Pool::MAX)
    }
}

/// Every resource's limits (built from [`ServerConfig`](crate::ServerConfig) by the
/// server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// [`Resource::Calls`].
    pub calls: Limit,
    /// [`Resource::Streams`].
    pub streams: Limit,
    /// [`Resource::Bytes`].
    pub bytes: Limit,
    /// [`Resource::Sending`].
    pub sending: Limit,
}

impl Limits {
    fn of(&self, resource: Resource) -> &Limit {
        match resource {
            Resource::Calls => &self.calls,
            Resource::Streams => &self.streams,
            Resource::Bytes => &self.bytes,
            Resource::Sending => &self.sending,
        }
    }
}

/// One node of the tree: a counter per resource.
///
/// The server's node is two pools per resource: a common half, first come first
/// served, and a reserve that a peer draws on only while what it holds of it stays no
/// more than what the reserve has left. However many peers fill the common half and the
/// reserve, `k` of them leave at least 1/(k + 1) of the reserve free, so a peer that
/// holds little still finds room.
#[derive(Debug)]
pub(super) struct Counters {
    scope: Scope,
    /// The limit per resource (at the server: common half and reserve together).
    limits: [usize; RESOURCES],
    /// Connection and peer: the whole limit. Server: the common half.
    free: [Arc<Pool>; RESOURCES],
    /// Server only: the reserve (the rest of the limit).
    reserve: Option<[Arc<Pool>; RESOURCES]>,
    /// Peer only: what it holds of the server's reserve.
    pub(super) reserve_held: [AtomicUsize; RESOURCES],
}

impl Counters {
    fn new(limits: &Limits, scope: Scope) -> Counters {
        let limits = ALL.map(|resource| limits.of(resource).at(scope));
        let (free, reserve) = match scope {
            Scope::Server => (
                limits.map(|limit| Arc::new(Pool::new(limit - limit / 2))),
                Some(limits.map(|limit| Arc::new(Pool::new(limit / 2)))),
            ),
            _ => (limits.map(|limit| Arc::new(Pool::new(limit))), None),
        };
        Counters {
            scope,
            limits,
            free,
            reserve,
            reserve_held: Default::default(),
        }
    }

    /// The most one charge takes here (at the server: the common half, the larger).
    fn largest(&self, i: usize) -> usize {
        match self.scope {
            Scope::Server => self.limits[i] - self.limits[i] / 2,
            _ => self.limits[i],
        }
    }

    fn held(&self, i: usize) -> usize {
        let free = self.free[i].available() + self.reserve.as_ref().map_or(0, |r| r[i].available());
        self.limits[i] - free
    }
}

/// The server's accounts: its own, and one per peer with open connections.
#[derive(Debug)]
pub struct Ledger {
    limits: Limits,
    server: Arc<Counters>,
    peers: Mutex<PeerMap>,
}

#[derive(Debug, Default)]
struct PeerMap {
    peers: HashMap<PeerKey, Weak<Counters>>,
    /// The map's length at which entries of peers that left are swept out (amortised:
    /// twice what was live at the last sweep).
    sweep_at: usize,
}

impl Ledger {
    /// A ledger with nothing charged.
    pub fn new(limits: Limits) -> Ledger {
        Ledger {
            server: Arc::new(Counters::new(&limits, Scope::Server)),
            limits,
            peers: Mutex::default(),
        }
    }

    /// The limits it was made with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The account of a new connection from `peer`: its own counters, under those of
    /// the peer's other connections. A connection without an address is a peer of its
    /// own.
    pub fn account(&self, peer: Option<SocketAddr>) -> Account {
        let peer = match peer {
            None => Arc::new(Counters::new(&self.limits, Scope::Peer)),
            Some(addr) => {
                let key = PeerKey::of(addr.ip());
                let mut map = self.peers.lock();
                match map.peers.get(&key).and_then(Weak::upgrade) {
                    Some(peer) => peer,
                    None => {
                        if map.peers.len() >= map.sweep_at {
                            map.peers.retain(|_, peer| peer.strong_count() > 0);
                            map.sweep_at = (map.peers.len() * 2).max(64);
                        }
                        let peer = Arc::new(Counters::new(&self.limits, Scope::Peer));
                        map.peers.insert(key, Arc::downgrade(&peer));
                        peer
                    }
                }
            }
        };
        Account {
            levels: Arc::new([
                Arc::new(Counters::new(&self.limits, Scope::Connection)),
                peer,
                self.server.clone(),
            ]),
        }
    }

    /// Entries in the peer map (live or not yet swept), for tests.
    #[cfg(test)]
    pub(crate) fn peer_entries(&self) -> usize {
        self.peers.lock().peers.len()
    }
}

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
    /// An account of its own, in a ledger of its own (a client's, or a connection served
    /// outside a server's ledger).
    pub fn standalone(limits: Limits) -> Account {
        Ledger::new(limits).account(None)
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
