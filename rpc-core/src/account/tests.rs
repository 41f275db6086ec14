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
    // Another peer has its own share, within what the server has left.
    let c1 = c.try_charge(Resource::Bytes, 2).unwrap();
    let refused = c.try_charge(Resource::Bytes, 1).unwrap_err();
    assert_eq!((refused.scope, refused.limit), (Scope::Server, 8));
    // A refused charge took nothing anywhere.
    assert_eq!(c.held(Resource::Bytes, Scope::Connection), 2);
    assert_eq!(c.held(Resource::Bytes, Scope::Peer), 2);
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 8);
    // Other resources are counted apart.
    let _call = c.try_charge(Resource::Calls, 1).unwrap();
    drop((held, b1, c1));
    assert_eq!(a.held(Resource::Bytes, Scope::Server), 0);
    assert_eq!(a.held(Resource::Calls, Scope::Server), 1);
}

#[test]
fn a_charge_larger_than_a_limit_fits_an_empty_account_as_the_whole_of_it() {
    let ledger = Ledger::new(limits(10, 20, 30));
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
    let ledger = Ledger::new(limits(10, 10, 10));
    let a = ledger.account(addr("10.0.0.1:1"));
    let b = ledger.account(addr("10.0.0.2:1"));
    let first = a.try_charge(Resource::Bytes, 10).unwrap();
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
    assert_eq!(b.held(Resource::Bytes, Scope::Server), 4);
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
