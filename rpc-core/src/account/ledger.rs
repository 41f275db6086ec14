//! The accounts themselves: counters with limits, a connection's charged together with
//! its peer's and the server's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
    /// Bytes held in memory at their in-memory size (decoded, decompressed).
    Bytes,
}

const RESOURCES: usize = 3;

impl Resource {
    fn index(self) -> usize {
        match self {
            Resource::Calls => 0,
            Resource::Streams => 1,
            Resource::Bytes => 2,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Resource::Calls => "calls running",
            Resource::Streams => "streams open",
            Resource::Bytes => "bytes held",
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
        limit.clamp(1, Semaphore::MAX_PERMITS)
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
}

impl Limits {
    fn of(&self, resource: Resource) -> &Limit {
        match resource {
            Resource::Calls => &self.calls,
            Resource::Streams => &self.streams,
            Resource::Bytes => &self.bytes,
        }
    }
}

/// One node of the tree: a counter per resource.
#[derive(Debug)]
struct Counters {
    scope: Scope,
    limits: [usize; RESOURCES],
    free: [Arc<Semaphore>; RESOURCES],
}

impl Counters {
    fn new(limits: &Limits, scope: Scope) -> Counters {
        let limits = [Resource::Calls, Resource::Streams, Resource::Bytes]
            .map(|resource| limits.of(resource).at(scope));
        Counters {
            scope,
            limits,
            free: limits.map(|limit| Arc::new(Semaphore::new(limit))),
        }
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
            levels: [
                Arc::new(Counters::new(&self.limits, Scope::Connection)),
                peer,
                self.server.clone(),
            ],
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
    /// Connection, peer, server: narrowest first, the order charges are taken in.
    levels: [Arc<Counters>; 3],
}

/// A resource exhausted at one level of the tree: why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{} by {} are at the limit of {limit}", resource.describe(), scope.describe())]
pub struct Exhausted {
    /// What ran out.
    pub resource: Resource,
    /// Where.
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

    /// What a charge of `n` takes: `n`, but at most the smallest limit on its path (a
    /// message larger than a limit is charged as the whole of it, so it fits once that
    /// level holds nothing else).
    fn amount(&self, resource: Resource, n: usize) -> u32 {
        let i = resource.index();
        let smallest = self.levels.iter().map(|c| c.limits[i]).min().unwrap_or(1);
        n.min(smallest).min(u32::MAX as usize) as u32
    }

    /// Takes `n` of `resource` from every level now, or nothing.
    ///
    /// # Errors
    /// [`Exhausted`], naming the narrowest level that has no room.
    pub fn try_charge(&self, resource: Resource, n: usize) -> Result<Charge, Exhausted> {
        let amount = self.amount(resource, n);
        let i = resource.index();
        let mut permits = Vec::with_capacity(3);
        for level in &self.levels {
            match level.free[i].clone().try_acquire_many_owned(amount) {
                Ok(permit) => permits.push(permit),
                Err(_) => {
                    return Err(Exhausted {
                        resource,
                        scope: level.scope,
                        limit: level.limits[i],
                    })
                }
            }
        }
        Ok(Charge { permits, amount })
    }

    /// Takes `n` of `resource` from every level, waiting (narrowest first, in arrival
    /// order at each) while one has no room: backpressure on whoever waits.
    pub async fn charge(&self, resource: Resource, n: usize) -> Charge {
        let amount = self.amount(resource, n);
        let i = resource.index();
        let mut permits = Vec::with_capacity(3);
        for level in &self.levels {
            let permit = level.free[i]
                .clone()
                .acquire_many_owned(amount)
                .await
                .expect("an account's semaphores are never closed");
            permits.push(permit);
        }
        Charge { permits, amount }
    }

    /// The smallest limit of `resource` on this account's path: the most one charge (or
    /// several held together by one holder) can ever take.
    pub fn limit(&self, resource: Resource) -> usize {
        let i = resource.index();
        self.levels.iter().map(|c| c.limits[i]).min().unwrap_or(1)
    }

    /// How much of `resource` is charged at `scope` now.
    pub fn held(&self, resource: Resource, scope: Scope) -> usize {
        let i = resource.index();
        let level = &self.levels[SCOPES.iter().position(|s| *s == scope).expect("a scope")];
        level.limits[i] - level.free[i].available_permits()
    }
}

/// An amount taken from a connection's, its peer's and the server's account; given back
/// to all three when dropped.
#[derive(Debug, Default)]
#[must_use = "a charge is given back when dropped"]
pub struct Charge {
    /// One per level, narrowest first; empty for a charge of nothing.
    permits: Vec<OwnedSemaphorePermit>,
    amount: u32,
}

impl Charge {
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
        if other.permits.is_empty() {
            return;
        }
        if self.permits.is_empty() {
            *self = other;
            return;
        }
        for (mine, theirs) in self.permits.iter_mut().zip(other.permits) {
            mine.merge(theirs);
        }
        self.amount += other.amount;
    }

    /// Takes `n` of it (all of it, if it holds less) into a charge of its own.
    pub fn split(&mut self, n: usize) -> Charge {
        let n = n.min(self.amount as usize);
        if n == 0 {
            return Charge::none();
        }
        let permits = self
            .permits
            .iter_mut()
            .map(|permit| permit.split(n).expect("the charge holds n"))
            .collect();
        self.amount -= n as u32;
        Charge {
            permits,
            amount: n as u32,
        }
    }

    /// Gives back `n` of it now (all of it, if it holds less).
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.amount as usize);
        if n == 0 {
            return;
        }
        for permit in &mut self.permits {
            drop(permit.split(n));
        }
        self.amount -= n as u32;
    }
}
