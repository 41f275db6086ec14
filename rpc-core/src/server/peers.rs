//! Each peer's share of the server-wide permits: connections from one IP address draw
//! their calls' permits from one semaphore, so that a peer that opens many connections
//! still cannot take every permit of the server (DESIGN.md, "Fairness").

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Semaphore;

/// The shares of the peers with open connections, by IP address.
#[derive(Debug, Default)]
pub(super) struct Peers {
    inner: Mutex<PeerMap>,
}

#[derive(Debug, Default)]
struct PeerMap {
    shares: HashMap<IpAddr, Weak<Semaphore>>,
    /// The map's length at which entries of peers that left are swept out (amortised:
    /// twice what was live at the last sweep).
    sweep_at: usize,
}

/// What one peer is: an IPv4 address (an IPv4 client of a dual-stack socket is the
/// same peer as over IPv4), or an IPv6 /64, the block a single host or site is given
/// (any of its 2^64 addresses would otherwise be a peer of its own).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

impl Peers {
    /// The share of the peer at `addr`: the one its other open connections use, or a new
    /// one of `permits`. A connection without an address is a peer of its own.
    pub(super) fn share(&self, addr: Option<SocketAddr>, permits: usize) -> Arc<Semaphore> {
        let Some(addr) = addr else {
            return Arc::new(Semaphore::new(permits));
        };
        let ip = peer_key(addr.ip());
        let mut map = self.inner.lock();
        if let Some(share) = map.shares.get(&ip).and_then(Weak::upgrade) {
            return share;
        }
        if map.shares.len() >= map.sweep_at {
            map.shares.retain(|_, share| share.strong_count() > 0);
            map.sweep_at = (map.shares.len() * 2).max(64);
        }
        let share = Arc::new(Semaphore::new(permits));
        map.shares.insert(ip, Arc::downgrade(&share));
        share
    }

    /// Entries in the map (live or not yet swept), for tests.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().shares.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn connections_of_one_address_share_one_semaphore() {
        let peers = Peers::default();
        let a = peers.share(addr("10.0.0.1:1000"), 4);
        let b = peers.share(addr("10.0.0.1:2000"), 4);
        let mapped = peers.share(addr("[::ffff:10.0.0.1]:3000"), 4);
        let other = peers.share(addr("10.0.0.2:1000"), 4);
        assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&a, &mapped));
        assert!(!Arc::ptr_eq(&a, &other));
        let _held = a.clone().try_acquire_many_owned(4).unwrap();
        assert!(
            b.try_acquire().is_err(),
            "the share is spent for every connection"
        );
        assert!(other.try_acquire().is_ok());
        // The addresses of one IPv6 /64 are one peer.
        let v6 = peers.share(addr("[2001:db8:1:2::1]:1"), 4);
        assert!(Arc::ptr_eq(
            &v6,
            &peers.share(addr("[2001:db8:1:2:ffff::9]:2"), 4)
        ));
        assert!(!Arc::ptr_eq(
            &v6,
            &peers.share(addr("[2001:db8:1:3::1]:1"), 4)
        ));
        // Without an address: a share of its own each time.
        let (x, y) = (peers.share(None, 1), peers.share(None, 1));
        assert!(!Arc::ptr_eq(&x, &y));
    }

    #[test]
    fn shares_of_peers_that_left_are_swept() {
        let peers = Peers::default();
        for i in 0..10_000u32 {
            let ip = std::net::Ipv4Addr::from(i);
            drop(peers.share(Some(SocketAddr::new(ip.into(), 1)), 1));
        }
        assert!(peers.len() <= 64, "{} entries", peers.len());
        // A live share survives sweeps and is found again.
        let live = peers.share(addr("192.168.0.1:1"), 1);
        for i in 0..1000u32 {
            drop(peers.share(
                Some(SocketAddr::new(std::net::Ipv4Addr::from(i).into(), 1)),
                1,
            ));
        }
        assert!(Arc::ptr_eq(&live, &peers.share(addr("192.168.0.1:9"), 1)));
    }
}
