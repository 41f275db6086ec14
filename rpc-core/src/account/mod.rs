//! One resource model for every surface: accounts in a tree, connection -> peer ->
//! server, that every surface charges before it allocates or starts work (DESIGN.md,
//! "One resource model").
//!
//! ```text
//!                 server  (ServerConfig: max_concurrent_calls, max_open_streams, max_held_bytes)
//!               /        \
//!       peer 10.0.0.1    peer 2001:db8:1:2::/64     (the ..._per_peer settings)
//!        /      \               |
//!     conn 1   conn 2         conn 3                (the ..._per_connection settings)
//! ```
//!
//! An account holds one counter per [`Resource`]: calls running their handler's work,
//! streams open, bytes held (at their in-memory size: decompressed, decoded), bytes
//! queued for sending to the peer. A
//! [`Charge`] takes the same amount from a connection's account, its peer's and the
//! server's, narrowest first, and gives it back to all three when dropped. Charging is
//! either a refusal ([`Account::try_charge`]: the call is answered `RESOURCE_EXHAUSTED`)
//! or a wait ([`Account::charge`]: backpressure on the one connection that waits; the
//! counters are async semaphores of their own, `pool::Pool`, that serve waiters in
//! arrival order and give back with an atomic add). Nothing is allocated for what is
//! refused, and nothing a peer does can make the server hold more than the server's
//! figure of any resource.
//!
//! Fair shares: the server's figure of each resource is two halves. The common half is
//! first come, first served; the reserve is drawn on only when the common half is full,
//! and by each peer only up to its fair share (the reserve over the peers holding some
//! of it, itself included). However many addresses an attacker fills the common half
//! from, a peer that holds little still finds room in the reserve, and the attackers
//! together hold at most their shares of it.
//!
//! Who charges what (docs/limits.md has the tables):
//! - the server's call table: a unary call's permit ([`Resource::Calls`]) while its
//!   handler runs and until its response is handed to the transport; a streaming call's
//!   slot ([`Resource::Streams`]) while it is open (an idle stream holds no call permit,
//!   so long-lived streams cannot starve unary work); the bytes of a request while it
//!   waits and runs, and of each request-stream message from its arrival until the
//!   handler reads it ([`Resource::Bytes`]);
//! - the HTTP/2 bridge: request bytes read from HTTP/2 and not yet taken by the server,
//!   decompressed messages as they inflate.
//!
//! - the transports: bytes handed to them for the peer and not yet written out
//!   ([`Resource::Sending`]: the TCP send queue, the HTTP/2 bridge's response buffer,
//!   RDMA's rendezvous frames lent to the peer until its read-done), a wait, so a peer
//!   that does not read holds back its own responses. Requests and responses are
//!   separate pools: a response waiting for room never waits for a request that waits
//!   for it.
//!
//! Not charged (fixed per connection, by its own setting): RDMA's registered send ring.
//!
//! Handshakes are the listener's, before any server account exists: they are counted by
//! address with the same [`PeerKey`] (see `rdmarpc-transport`'s listener).

mod charge;
mod counters;
mod ledger;
mod pool;

pub use charge::Charge;
pub use charge::{Account, Exhausted};
pub use counters::{Limit, Limits, Resource, Scope};
pub use ledger::Ledger;

use std::net::IpAddr;

/// What one peer is: an IPv4 address (an IPv4 client of a dual-stack socket is the same
/// peer as over IPv4), or an IPv6 /64, the block one host or site is given (any of its
/// 2^64 addresses would otherwise be a peer of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerKey(IpAddr);

impl PeerKey {
    /// The peer that `ip` belongs to.
    pub fn of(ip: IpAddr) -> PeerKey {
        PeerKey(match ip.to_canonical() {
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            v4 => v4,
        })
    }

    /// The address that stands for the peer (an IPv6 /64 as its first address).
    pub fn ip(self) -> IpAddr {
        self.0
    }
}

impl std::fmt::Display for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
            v4 => write!(f, "{v4}"),
        }
    }
}

#[cfg(test)]
mod tests;
