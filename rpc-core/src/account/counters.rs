//! What an account counts ([`Resource`]), at which levels ([`Scope`]), within which
//! limits ([`Limits`]), and one level's counters.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::pool::Pool;

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
    pub(super) fn index(self) -> usize {
        match self {
            Resource::Calls => 0,
            Resource::Streams => 1,
            Resource::Bytes => 2,
            Resource::Sending => 3,
        }
    }

    pub(super) fn describe(self) -> &'static str {
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
    /// Every connection of one peer ([`PeerKey`](super::PeerKey)).
    Peer,
    /// The whole server.
    Server,
}

impl Scope {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Scope::Connection => "this connection",
            Scope::Peer => "this peer",
            Scope::Server => "the server",
        }
    }
}

pub(super) const SCOPES: [Scope; 3] = [Scope::Connection, Scope::Peer, Scope::Server];

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
    pub(super) scope: Scope,
    /// The limit per resource (at the server: common half and reserve together).
    pub(super) limits: [usize; RESOURCES],
    /// Connection and peer: the whole limit. Server: the common half.
    pub(super) free: [Arc<Pool>; RESOURCES],
    /// Server only: the reserve (the rest of the limit).
    pub(super) reserve: Option<[Arc<Pool>; RESOURCES]>,
    /// Peer only: what it holds of the server's reserve.
    pub(super) reserve_held: [AtomicUsize; RESOURCES],
}

impl Counters {
    pub(super) fn new(limits: &Limits, scope: Scope) -> Counters {
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
    pub(super) fn largest(&self, i: usize) -> usize {
        match self.scope {
            Scope::Server => self.limits[i] - self.limits[i] / 2,
            _ => self.limits[i],
        }
    }

    pub(super) fn held(&self, i: usize) -> usize {
        let free = self.free[i].available() + self.reserve.as_ref().map_or(0, |r| r[i].available());
        self.limits[i] - free
    }
}
