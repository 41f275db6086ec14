use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::*;

fn limits(connection: usize, peer: usize, server: usize) -> Limits {
    let limit = Limit {
        connection,
        peer,
        server,
    };
    Limits {
        calls: limit,
        streams: limit,
        bytes: limit,
        sending: limit,
    }
}

fn addr(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

#[test]
fn peer_keys_group_ipv4_and_ipv6_by_64() {
    let key = |s: &str| PeerKey::of(s.parse().unwrap());
    assert_eq!(key("10.0.0.1"), key("::ffff:10.0.0.1"));
    assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
    assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    assert_eq!(key("2001:db8:1:2::7").to_string(), "2001:db8:1:2::/64");
    assert_eq!(key("10.0.0.1").to_string(), "10.0.0.1");
}

#[test]
fn a_charge_takes_from_every_level_and_gives_back_when_dropped() {
    let ledger = Ledger::new(limits(4, 6, 8));
    let a = ledger.account(addr("10.0.0.1:1000"));
    let b = ledger.account(addr("10.0.0.1:2000"));
    let c = ledger.account(addr("10.0.0.2:1000"));
    let held = a.try_charge(Resource::Bytes, 4).unwrap();
    assert_eq!(held.amount(), 4);
    // The connection is full; its peer has 2 left; the server 4.
    let refused = a.try_charge(Resource::Bytes, 1).unwrap_err();
    assert_eq!(refused.scope, Scope::Connection);
    assert_eq!(refused.limit, 4);
    let b1 = b.try_charge(Resource::Bytes, 2).unwrap();
    let refused = b.try_charge(Resource::Bytes, 1).unwrap_err();
    assert_eq!((refused.scope, refused.limit), (Scope::Peer, 6));
    assert_eq!(
        refused.to_string(),
        "bytes held by this peer are at the limit of 6"
    );
    // Another peer has its own share, within what the server has left: the common half
    // (4) is full, and a peer holds of the reserve (4) no more than it leaves.
    let c1 = c.try_charge(Resource::Bytes, 1).unwrap();
    let refused = c.try_charge(Resource::Bytes, 1).unwrap_err();
    assert_eq!((refused.scope, refused.limit), (Scope::Server, 8));
    // A refused charge took nothing anywhere.
    assert_eq!(c.held(Resource::Bytes, Scope::Connection), 1);
    assert_eq!(c.held(Resource::Bytes, Scope::Peer), 1);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 7);
    // Other resources are counted apart.
    let _call = c.try_charge(Resource::Calls, 1).unwrap();
    drop((held, b1, c1));
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 0);
    assert_eq!(a.held(Resource::Calls, Scope::Server), 1);
}

#[test]
fn a_charge_larger_than_a_limit_fits_an_empty_account_as_the_whole_of_it() {
    let ledger = Ledger::new(limits(10, 20, 40));
    let a = ledger.account(None);
    let big = a.try_charge(Resource::Bytes, 1 << 30).unwrap();
    assert_eq!(big.amount(), 10);
    assert!(a.try_charge(Resource::Bytes, 1).is_err());
    drop(big);
    assert!(a.try_charge(Resource::Bytes, 10).is_ok());
}

#[test]
fn charges_merge_and_release_in_parts() {
    let ledger = Ledger::new(limits(100, 100, 100));
    let a = ledger.account(addr("10.0.0.1:1"));
    let mut held = Charge::none();
    assert_eq!(held.amount(), 0);
    held.merge(a.try_charge(Resource::Bytes, 30).unwrap());
    held.merge(a.try_charge(Resource::Bytes, 20).unwrap());
    assert_eq!(held.amount(), 50);
    assert_eq!(a.held(Resource::Bytes, Scope::Peer), 50);
    held.release(15);
    assert_eq!(held.amount(), 35);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 35);
    let part = held.split(5);
    assert_eq!((part.amount(), held.amount()), (5, 30));
    drop(part);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 30);
    held.release(1000);
    assert_eq!(held.amount(), 0);
    assert_eq!(a.held(Resource::Bytes, Scope::Connection), 0);
}

#[tokio::test]
async fn a_waiting_charge_is_granted_when_room_frees() {
    // Server 20: its common half (10) taken by one peer, its reserve by two others as
    // far as it lets them (3 and 2: what each holds stays within what is left).
    let ledger = Ledger::new(limits(10, 20, 20));
    let a = ledger.account(addr("10.0.0.1:1"));
    let b = ledger.account(addr("10.0.0.2:1"));
    let first = a.try_charge(Resource::Bytes, 10).unwrap();
    let _c = ledger
        .account(addr("10.0.0.3:1"))
        .try_charge(Resource::Bytes, 5)
        .unwrap();
    let _d = ledger
        .account(addr("10.0.0.4:1"))
        .try_charge(Resource::Bytes, 2)
        .unwrap();
    assert!(b.try_charge(Resource::Bytes, 4).is_err());
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.charge(Resource::Bytes, 4).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished(), "the server is full: it waits");
    drop(first);
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted once room frees")
        .unwrap();
    assert_eq!(granted.amount(), 4);
    assert_eq!(b.held(Resource::Bytes, Scope::Server), 11);
}

#[test]
fn peers_that_left_are_swept() {
    let ledger = Ledger::new(limits(1, 1, 1 << 20));
    for i in 0..10_000u32 {
        let ip = Ipv4Addr::from(i);
        drop(ledger.account(Some(SocketAddr::new(ip.into(), 1))));
    }
    assert!(
        ledger.peer_entries() <= 64,
        "{} entries",
        ledger.peer_entries()
    );
    // A live peer survives sweeps and is found again.
    let live = ledger.account(addr("192.168.0.1:1"));
    let _held = live.try_charge(Resource::Calls, 1).unwrap();
    for i in 0..1000u32 {
        drop(ledger.account(Some(SocketAddr::new(Ipv4Addr::from(i).into(), 1))));
    }
    let again = ledger.account(addr("192.168.0.1:9"));
    assert_eq!(
        again.try_charge(Resource::Calls, 1).unwrap_err().scope,
        Scope::Peer
    );
}

#[test]
fn peers_filling_the_common_half_leave_a_light_peer_room_in_the_reserve() {
    // Server 100: a common half of 50, first come; a reserve of 50, which a peer draws
    // on only while what it holds of it is no more than what is left.
    let ledger = Ledger::new(limits(100, 100, 100));
    for attackers in [1usize, 4, 20] {
        let peers: Vec<Account> = (0..attackers)
            .map(|i| ledger.account(addr(&format!("10.0.1.{i}:1"))))
            .collect();
        let mut held = Vec::new();
        // The attackers take what they can, 1 at a time, in turns.
        loop {
            let before = held.len();
            for a in &peers {
                if let Ok(charge) = a.try_charge(Resource::Bytes, 1) {
                    held.push(charge);
                }
            }
            if held.len() == before {
                break;
            }
        }
        let total: usize = held.iter().map(Charge::amount).sum();
        assert_eq!(peers[0].held(Resource::Bytes, Scope::Server), total);
        // k attackers leave at least 1/(k + 1) of the reserve.
        let free = 100 - total;
        assert!(free >= 50 / (attackers + 1), "{attackers}: {free} left");
        let refused = peers[0].try_charge(Resource::Bytes, 1).unwrap_err();
        assert_eq!((refused.scope, refused.limit), (Scope::Server, 100));
        // A light peer finds room: half of what is left, as one charge.
        let light = ledger.account(addr("10.0.0.9:1"));
        let mine = light
            .try_charge(Resource::Bytes, free / 2)
            .unwrap_or_else(|e| panic!("{attackers}: {free} left, {e}"));
        drop((held, mine));
        assert_eq!(light.held(Resource::Bytes, Scope::Server), 0);
    }
    // A lone peer: the common half, and half of the reserve.
    let lone = ledger.account(addr("10.0.0.7:1"));
    let all = lone.try_charge(Resource::Bytes, 100).unwrap();
    assert_eq!(all.amount(), 50, "one charge takes at most the common half");
    let more = lone
        .try_charge(Resource::Bytes, 25)
        .expect("half the reserve");
    assert!(lone.try_charge(Resource::Bytes, 1).is_err());
    drop((all, more));
}

#[test]
fn a_split_charge_moves_its_reserve_share_with_it() {
    let ledger = Ledger::new(limits(100, 100, 20));
    let a = ledger.account(addr("10.0.0.1:1"));
    let b = ledger.account(addr("10.0.0.2:1"));
    let common = a.try_charge(Resource::Bytes, 10).unwrap();
    let reserve = a.try_charge(Resource::Bytes, 5).unwrap();
    let mut both = common;
    both.merge(reserve);
    assert_eq!(both.amount(), 15);
    // The reserve has 5 left: b may hold at most what is left after its charge.
    assert!(b.try_charge(Resource::Bytes, 3).is_err());
    let b1 = b.try_charge(Resource::Bytes, 2).unwrap();
    // Splitting off 7 takes a's 5 of the reserve first: a holds none of it after.
    let part = both.split(7);
    drop(part);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 8 + 2);
    // The reserve has 8 left, b holds 2: it may take 3 more (5 <= 5), not 4.
    assert!(b.try_charge(Resource::Bytes, 4).is_err());
    let b2 = b.try_charge(Resource::Bytes, 3).unwrap();
    assert_eq!(b.held(Resource::Bytes, Scope::Server), 13);
    drop((both, b1, b2));
    assert_eq!(b.held(Resource::Bytes, Scope::Server), 0);
}

#[tokio::test]
async fn a_charge_given_up_while_it_waits_holds_nothing_at_any_level() {
    let ledger = Ledger::new(limits(10, 10, 100));
    let a = ledger.account(addr("10.0.0.1:1"));
    let b = ledger.account(addr("10.0.0.1:2"));
    // The peer is full through b: a's charge takes its connection's part and waits at
    // the peer's.
    let full = b.try_charge(Resource::Bytes, 10).unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(20), a.charge(Resource::Bytes, 4));
    assert!(waiting.await.is_err(), "the peer has no room");
    assert_eq!(a.held(Resource::Bytes, Scope::Connection), 0);
    // Served once there is room, at every level, and given back whole.
    let charge = tokio::spawn({
        let a = a.clone();
        async move { a.charge(Resource::Bytes, 4).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(full);
    let charge = charge.await.unwrap();
    assert_eq!(a.held(Resource::Bytes, Scope::Connection), 4);
    assert_eq!(a.held(Resource::Bytes, Scope::Peer), 4);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 4);
    drop(charge);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 0);
    assert_eq!(a.held(Resource::Bytes, Scope::Connection), 0);
}
