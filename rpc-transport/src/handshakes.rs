//! Which handshakes a listener runs at once: the fair-share policy of [`AnyListener`]
//! (crate::AnyListener), without I/O or clock, so that it can be tested alone.
//!
//! At most `max` handshakes run at once, at most `max_per_peer` of them from one peer
//! ([`PeerKey`]: an IPv4 address, an IPv6 /64). A new socket is always admitted; when a
//! cap is reached it displaces the OLDEST handshake of the peer holding the most: at the
//! per-peer cap its own peer's oldest, at the global cap the heaviest peer's oldest (the
//! new socket counted with its peer, so that its own peer's oldest goes when that peer is
//! the heaviest). Silent sockets thus only ever displace one another: a peer that keeps
//! many open can never keep a lighter peer out, nor the next socket of its own address
//! (which displaces the oldest of them instead of being refused).
//!
//! Displacement at the global cap is for peers above their fair share (`max` over the
//! peers holding handshakes): when no peer holds more than that (a storm of sockets
//! from many addresses, one or two each), the new socket is refused instead, so that
//! handshakes in progress finish rather than each being displaced by the next arrival.

use std::collections::{BTreeSet, HashMap};

use rdmarpc_core::account::PeerKey;

/// A new handshake, and the one it displaces (to be aborted, its socket closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// The new handshake's id, for [`Handshakes::finish`].
    pub(crate) id: u64,
    /// The handshake displaced to make room, already removed from the table.
    pub(crate) displaced: Option<u64>,
}

/// The handshakes in progress, by id and by peer, in the order they started (ids grow).
#[derive(Debug)]
pub(crate) struct Handshakes {
    max: usize,
    max_per_peer: usize,
    next_id: u64,
    by_id: HashMap<u64, PeerKey>,
    by_peer: HashMap<PeerKey, BTreeSet<u64>>,
}

impl Handshakes {
    /// A table for at most `max` handshakes, `max_per_peer` from one peer (both at least 1).
    pub(crate) fn new(max: usize, max_per_peer: usize) -> Handshakes {
        let max = max.max(1);
        Handshakes {
            max,
            max_per_peer: max_per_peer.clamp(1, max),
            next_id: 0,
            by_id: HashMap::new(),
            by_peer: HashMap::new(),
        }
    }

    /// Handshakes in progress.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Handshakes in progress from `key`.
    pub(crate) fn of(&self, key: PeerKey) -> usize {
        self.by_peer.get(&key).map_or(0, BTreeSet::len)
    }

    /// Whether handshake `id` is in progress (not finished nor displaced).
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Admits a new handshake from `key`, displacing the oldest of the heaviest peer when
    /// a cap is reached (see the module's documentation); `None` when the table is full
    /// and no peer holds more than its fair share (the new socket is refused).
    pub(crate) fn admit(&mut self, key: PeerKey) -> Option<Admitted> {
        let displaced = if self.of(key) >= self.max_per_peer {
            self.oldest(key)
        } else if self.len() >= self.max {
            let peers = self.by_peer.len() + usize::from(self.of(key) == 0);
            let fair = self.max.div_ceil(peers.max(1));
            let (heaviest, held) = self.heaviest(key)?;
            if held <= fair {
                return None;
            }
            self.oldest(heaviest)
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        if let Some(old) = displaced {
            self.finish(old);
        }
        self.by_id.insert(id, key);
        self.by_peer.entry(key).or_default().insert(id);
        Some(Admitted { id, displaced })
    }

    /// Ends handshake `id` (done, failed or aborted); one already ended is ignored.
    pub(crate) fn finish(&mut self, id: u64) {
        let Some(key) = self.by_id.remove(&id) else {
            return;
        };
        if let Some(ids) = self.by_peer.get_mut(&key) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_peer.remove(&key);
            }
        }
    }

    /// The oldest handshake of `key`.
    fn oldest(&self, key: PeerKey) -> Option<u64> {
        self.by_peer.get(&key)?.first().copied()
    }

    /// The peer holding the most handshakes, counting a new one from `newcomer`; of peers
    /// holding as many, the one whose oldest handshake is the oldest. Never the newcomer's
    /// peer when it holds none (it has nothing older to give up).
    fn heaviest(&self, newcomer: PeerKey) -> Option<(PeerKey, usize)> {
        self.by_peer
            .iter()
            .map(|(&key, ids)| {
                let held = ids.len() + usize::from(key == newcomer);
                let oldest = ids.first().copied().unwrap_or(u64::MAX);
                (key, held, oldest)
            })
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|(key, held, _)| (key, held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(last: u8) -> PeerKey {
        PeerKey::of(std::net::Ipv4Addr::new(10, 0, 0, last).into())
    }

    impl Handshakes {
        fn admit_ok(&mut self, key: PeerKey) -> Admitted {
            self.admit(key).expect("admitted")
        }
    }

    #[test]
    fn under_the_caps_nothing_is_displaced() {
        let mut t = Handshakes::new(4, 2);
        assert_eq!(t.admit_ok(peer(1)).displaced, None);
        assert_eq!(t.admit_ok(peer(2)).displaced, None);
        assert_eq!(t.admit_ok(peer(1)).displaced, None);
        assert_eq!((t.len(), t.of(peer(1)), t.of(peer(2))), (3, 2, 1));
    }

    #[test]
    fn the_per_peer_cap_displaces_its_own_oldest() {
        let mut t = Handshakes::new(10, 3);
        let other = t.admit_ok(peer(9)).id;
        let ids: Vec<u64> = (0..3).map(|_| t.admit_ok(peer(1)).id).collect();
        let fourth = t.admit_ok(peer(1));
        assert_eq!(fourth.displaced, Some(ids[0]));
        assert_eq!(t.admit_ok(peer(1)).displaced, Some(ids[1]));
        assert_eq!(t.of(peer(1)), 3);
        assert!(t.contains(other), "another peer is untouched");
        assert!(t.contains(fourth.id) && !t.contains(ids[0]));
    }

    #[test]
    fn the_global_cap_displaces_the_heaviest_peers_oldest() {
        let mut t = Handshakes::new(6, 6);
        let light = t.admit_ok(peer(1)).id;
        let heavy: Vec<u64> = (0..4).map(|_| t.admit_ok(peer(2)).id).collect();
        let medium = t.admit_ok(peer(3)).id;
        // Full: a new socket of the light peer, of a new peer and of the heavy peer itself
        // each displace the heavy peer's oldest.
        assert_eq!(t.admit_ok(peer(1)).displaced, Some(heavy[0]));
        assert_eq!(t.admit_ok(peer(4)).displaced, Some(heavy[1]));
        assert_eq!(t.admit_ok(peer(2)).displaced, Some(heavy[2]));
        assert!(t.contains(light) && t.contains(medium));
        assert_eq!(t.len(), 6);
    }

    #[test]
    fn a_light_peer_is_never_displaced_while_a_heavier_one_exists() {
        let mut t = Handshakes::new(8, 8);
        let light = t.admit_ok(peer(1)).id;
        let heavy = t.admit_ok(peer(2)).id;
        for _ in 0..1000 {
            let admitted = t.admit_ok(peer(2));
            assert_ne!(admitted.displaced, Some(light));
        }
        assert!(
            t.contains(light),
            "the oldest handshake of all, but of a light peer"
        );
        assert!(!t.contains(heavy));
        assert_eq!((t.of(peer(1)), t.of(peer(2))), (1, 7));
    }

    #[test]
    fn ties_go_to_the_peer_with_the_oldest_handshake_counting_the_newcomer() {
        let mut t = Handshakes::new(4, 4);
        let a: Vec<u64> = (0..2).map(|_| t.admit_ok(peer(1)).id).collect();
        let b: Vec<u64> = (0..2).map(|_| t.admit_ok(peer(2)).id).collect();
        // 2 and 2, each within its fair share (4 over 3 peers): a third peer's socket is
        // refused, nothing displaced.
        assert_eq!(t.admit(peer(3)), None);
        assert_eq!(t.len(), 4);
        // Peer 2's new socket makes it 3 beside peer 1's 2: over its share (4 over 2),
        // its own oldest goes; then peer 1 (2 + 1 beside 2) gives up its own oldest.
        assert_eq!(t.admit_ok(peer(2)).displaced, Some(b[0]));
        assert_eq!(t.admit_ok(peer(1)).displaced, Some(a[0]));
        assert!(t.contains(a[1]) && t.contains(b[1]));
        // A single handshake per peer and a cap of one: the newcomer is refused.
        let mut one = Handshakes::new(1, 1);
        let first = one.admit_ok(peer(1)).id;
        assert_eq!(one.admit(peer(2)), None);
        assert!(one.contains(first));
    }

    #[test]
    fn finish_frees_room_and_ignores_the_ended() {
        let mut t = Handshakes::new(2, 2);
        let first = t.admit_ok(peer(1)).id;
        let second = t.admit_ok(peer(1)).id;
        t.finish(first);
        t.finish(first);
        let other = t.admit_ok(peer(2));
        assert_eq!(other.displaced, None);
        assert_eq!(t.len(), 2);
        let third = t.admit_ok(peer(2));
        assert_eq!(
            third.displaced,
            Some(other.id),
            "1 beside 1+1: peer 1 is lighter"
        );
        assert!(t.contains(second));
        t.finish(third.displaced.unwrap());
        assert_eq!(t.len(), 2);
        t.finish(third.id);
        assert_eq!((t.len(), t.of(peer(1)), t.of(peer(2))), (1, 1, 0));
    }

    #[test]
    fn a_storm_from_many_peers_refuses_newcomers_instead_of_displacing() {
        let mut t = Handshakes::new(8, 8);
        let held: Vec<u64> = (1..=8).map(|p| t.admit_ok(peer(p)).id).collect();
        // Every peer holds 1, its fair share: new sockets from new peers are refused and
        // the handshakes in progress finish.
        for p in 9..=200 {
            assert_eq!(t.admit(peer(p)), None);
        }
        assert!(held.iter().all(|id| t.contains(*id)));
        // A peer that goes over its share is displaced again.
        t.finish(held[0]);
        let a = t.admit_ok(peer(2)).id;
        assert_eq!(t.admit_ok(peer(2)).displaced, Some(held[1]));
        assert!(t.contains(a));
    }
}
