//! [`address`]: how a queue pair on the chosen port reaches its peer.
//!
//! InfiniBand routes by LID inside a subnet: the address vector carries the peer's LID
//! and no global route header. A peer in another subnet (another GID prefix) is refused:
//! its path through a router comes from the subnet manager, through rdma_cm. RoCE has no LIDs: every packet carries a GRH whose
//! destination GID is the peer's IP address (RoCE v2 puts it in the IP header), from
//! the local GID entry chosen by [`select`](super::select). The path MTU is the smaller
//! of both ports' active MTUs.

use std::net::Ipv6Addr;

use super::select::Choice;
use super::table::{GidKind, LinkLayer, Mtu};

/// Hop limit of the GRH (RoCE v2 carries it as the IP TTL; on InfiniBand it bounds
/// router hops).
pub(crate) const HOP_LIMIT: u8 = 64;

/// Largest unicast LID; 0xC000..=0xFFFE are multicast, 0xFFFF the permissive LID.
const MAX_UNICAST_LID: u16 = 0xBFFF;

/// What the peer announced about its queue pair's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    /// Its GID.
    pub(crate) gid: Ipv6Addr,
    /// Its LID (0 on RoCE).
    pub(crate) lid: u16,
    /// Its port's active MTU.
    pub(crate) mtu: Mtu,
}

/// The global route header of an address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grh {
    /// The peer's GID.
    pub(crate) dgid: Ipv6Addr,
    /// The local GID entry packets come from.
    pub(crate) sgid_index: u8,
    /// See [`HOP_LIMIT`].
    pub(crate) hop_limit: u8,
}

/// An address vector (`ibv_ah_attr`) and the path MTU, as the verbs layer applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AddressVector {
    /// The local port.
    pub(crate) port: u8,
    /// The peer's LID (0 on RoCE).
    pub(crate) dlid: u16,
    /// The service level (0: the default lane).
    pub(crate) sl: u8,
    /// The GRH, on RoCE always, on InfiniBand across subnets.
    pub(crate) grh: Option<Grh>,
    /// The path MTU.
    pub(crate) mtu: Mtu,
}

/// Why the peer cannot be reached from the chosen port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// An InfiniBand port and a peer without a usable LID.
    #[error("the peer offered LID {0}, not a unicast LID, and this InfiniBand port reaches a peer by its LID (is the peer on RoCE?)")]
    BadLid(u16),
    /// A RoCE port and a peer that announced a LID.
    #[error(
        "the peer offered LID {0} but this RoCE port routes by GID (is the peer on InfiniBand?)"
    )]
    UnexpectedLid(u16),
    /// An InfiniBand peer in another subnet: its LID means nothing here; the path
    /// through a router comes from the subnet manager (rdma_cm), not yet used.
    #[error("the peer's GID {0} is in another InfiniBand subnet: routing through a router needs the subnet manager's path record")]
    OtherSubnet(Ipv6Addr),
    /// A GID that addresses no single port.
    #[error("the peer's GID {0} is not a unicast address")]
    BadGid(Ipv6Addr),
    /// rdma_cm's path (on a server: from the client's connect request) leads elsewhere
    /// than to the side channel's peer.
    #[error("the rdma_cm path leads to GID {gid}, not to {peer}, the handshake's peer")]
    NotThePeer {
        /// The path's destination GID.
        gid: Ipv6Addr,
        /// The side channel's peer address.
        peer: std::net::IpAddr,
    },
    /// RoCE v2 between an IPv4 and an IPv6 GID.
    #[error("the peer's GID {peer} and this side's {local} are of different IP versions: RoCE v2 cannot connect them")]
    Family {
        /// This side's GID.
        local: Ipv6Addr,
        /// The peer's.
        peer: Ipv6Addr,
    },
}

/// The address vector from the port in `local` to `peer`.
///
/// # Errors
/// A LID or GID the port cannot route to ([`PathError`]).
pub(crate) fn address(local: &Choice, peer: &Peer) -> Result<AddressVector, PathError> {
    if peer.gid.is_unspecified() || peer.gid.is_multicast() {
        return Err(PathError::BadGid(peer.gid));
    }
    let grh = Grh {
        dgid: peer.gid,
        sgid_index: local.gid.index,
        hop_limit: HOP_LIMIT,
    };
    let mtu = local.mtu.min(peer.mtu);
    match local.link_layer {
        LinkLayer::InfiniBand => {
            if peer.lid == 0 || peer.lid > MAX_UNICAST_LID {
                return Err(PathError::BadLid(peer.lid));
            }
            // Across subnets the DLID is the local router's, from a path record: the
            // peer's own LID would name a port of this subnet.
            if peer.gid.octets()[..8] != local.gid.gid.octets()[..8] {
                return Err(PathError::OtherSubnet(peer.gid));
            }
            Ok(AddressVector {
                port: local.port,
                dlid: peer.lid,
                sl: 0,
                grh: None,
                mtu,
            })
        }
        LinkLayer::Ethernet => {
            if peer.lid != 0 {
                return Err(PathError::UnexpectedLid(peer.lid));
            }
            let v4 = |g: Ipv6Addr| g.to_ipv4_mapped().is_some();
            if local.gid.kind == GidKind::RoceV2 && v4(local.gid.gid) != v4(peer.gid) {
                return Err(PathError::Family {
                    local: local.gid.gid,
                    peer: peer.gid,
                });
            }
            Ok(AddressVector {
                port: local.port,
                dlid: 0,
                sl: 0,
                grh: Some(grh),
                mtu,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;
    use crate::fabric::devinfo::parse;
    use crate::fabric::select::{select, Wanted};

    fn choice(table: &str, local: &str) -> Choice {
        let wanted = Wanted {
            local: Some(local.parse().unwrap()),
            ..Wanted::default()
        };
        select(&parse(table), &wanted).unwrap()
    }

    fn gid(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    const IB: &str = include_str!("tables/ib_mlx5.txt");
    const ROCE: &str = include_str!("tables/roce_mlx5.txt");

    #[test]
    fn infiniband_routes_by_lid_within_its_subnet() {
        let local = choice(IB, "192.168.7.1");
        // The other HCA's GID: the same default subnet prefix, fe80::/64.
        let peer = Peer {
            gid: gid("fe80::88e9:a4ff:ff25:a463"),
            lid: 5,
            mtu: Mtu::Mtu2048,
        };
        let av = address(&local, &peer).unwrap();
        assert_eq!(
            av,
            AddressVector {
                port: 1,
                dlid: 5,
                sl: 0,
                grh: None,
                mtu: Mtu::Mtu2048
            }
        );
        let routed = Peer {
            gid: gid("fec0:0:0:1:88e9:a4ff:ff25:b001"),
            ..peer
        };
        assert_eq!(
            address(&local, &routed),
            Err(PathError::OtherSubnet(routed.gid))
        );
        // The highest unicast LID is one.
        assert_eq!(
            address(
                &local,
                &Peer {
                    lid: 0xBFFF,
                    ..peer
                }
            )
            .unwrap()
            .dlid,
            0xBFFF
        );
        for lid in [0, 0xC000, 0xFFFF] {
            assert_eq!(
                address(&local, &Peer { lid, ..peer }),
                Err(PathError::BadLid(lid))
            );
        }
    }

    #[test]
    fn roce_routes_by_gid_from_the_chosen_entry() {
        let local = choice(ROCE, "10.0.3.1");
        let peer = Peer {
            gid: gid("::ffff:10.0.3.2"),
            lid: 0,
            mtu: Mtu::Mtu4096,
        };
        let av = address(&local, &peer).unwrap();
        assert_eq!(
            av,
            AddressVector {
                port: 1,
                dlid: 0,
                sl: 0,
                grh: Some(Grh {
                    dgid: peer.gid,
                    sgid_index: 5,
                    hop_limit: HOP_LIMIT
                }),
                // The smaller of both ports' MTUs.
                mtu: Mtu::Mtu1024,
            }
        );
        let v6 = choice(ROCE, "fe80::8e2a:8eff:fe40:a37c");
        let peer6 = Peer {
            gid: gid("fe80::1"),
            ..peer
        };
        assert_eq!(address(&v6, &peer6).unwrap().grh.unwrap().sgid_index, 1);
    }

    #[test]
    fn peers_the_port_cannot_reach_are_refused() {
        let local = choice(ROCE, "10.0.3.1");
        let peer = Peer {
            gid: gid("fd00::2"),
            lid: 0,
            mtu: Mtu::Mtu1024,
        };
        assert_eq!(
            address(&local, &peer),
            Err(PathError::Family {
                local: gid("::ffff:10.0.3.1"),
                peer: peer.gid
            })
        );
        let lid = Peer {
            gid: gid("::ffff:10.0.3.2"),
            lid: 9,
            ..peer
        };
        assert_eq!(address(&local, &lid), Err(PathError::UnexpectedLid(9)));
        for bad in ["::", "ff02::1"] {
            let forged = Peer {
                gid: gid(bad),
                ..peer
            };
            assert_eq!(address(&local, &forged), Err(PathError::BadGid(gid(bad))));
        }
        let ib = choice(IB, "192.168.7.1");
        let forged = Peer {
            gid: gid("ff12::1"),
            lid: 3,
            ..peer
        };
        assert_eq!(address(&ib, &forged), Err(PathError::BadGid(forged.gid)));
    }
}
