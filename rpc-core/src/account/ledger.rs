//! The server's ledger: its own counters and one node per peer, from which each
//! connection's [`Account`] is built.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::charge::Account;
use super::counters::{Counters, Limits, Scope};
use super::PeerKey;
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
        Account::new(Arc::new([
            Arc::new(Counters::new(&self.limits, Scope::Connection)),
            peer,
            self.server.clone(),
        ]))
    }

    /// Entries in the peer map (live or not yet swept), for tests.
    #[cfg(test)]
    pub(crate) fn peer_entries(&self) -> usize {
        self.peers.lock().peers.len()
    }
}

impl Account {
    /// An account of its own, in a ledger of its own (a client's, or a connection served
    /// outside a server's ledger).
    pub fn standalone(limits: Limits) -> Account {
        Ledger::new(limits).account(None)
    }
}
