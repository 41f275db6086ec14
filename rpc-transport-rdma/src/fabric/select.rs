//! [`select`]: the device, port and GID a connection uses.
//!
//! On RoCE a GID is an IP address, so the local address of the connection (the side
//! channel's) names the device, the port and the entry, as rdma_cm would pick them; a
//! RoCE v2 entry is preferred over a RoCE v1 one for the same address. On InfiniBand the
//! GIDs name ports, not addresses: an InfiniBand port is taken when no RoCE entry owns
//! the address (the connection then runs over IPoIB beside it), the first active one
//! with a LID, by its port GID (index 0). Settings may name the device, the port and the
//! GID index; what they name must exist and be usable, or the error says what is missing.

use std::fmt;
use std::net::IpAddr;

use super::table::{ip_of, DeviceTable, Gid, GidKind, LinkLayer, Mtu, Port, PortState, Transport};

/// What the settings and the connection ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wanted<'a> {
    /// The device's name (`device` setting).
    pub(crate) device: Option<&'a str>,
    /// The port's number (`port` setting).
    pub(crate) port: Option<u8>,
    /// The GID table index (`gid_index` setting).
    pub(crate) gid_index: Option<u8>,
    /// The connection's local IP address.
    pub(crate) local: Option<IpAddr>,
}

/// What [`select`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The device, as an index into the tables given.
    pub(crate) device: usize,
    /// The port's number.
    pub(crate) port: u8,
    /// The port's link layer.
    pub(crate) link_layer: LinkLayer,
    /// The port's LID (0 on Ethernet).
    pub(crate) lid: u16,
    /// The port's active MTU.
    pub(crate) mtu: Mtu,
    /// The GID entry the connection's packets come from.
    pub(crate) gid: Gid,
}

/// Why a port could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Why {
    /// It is not active.
    NotActive(PortState),
    /// It is an InfiniBand port without a LID: no subnet manager has configured it.
    NoLid,
    /// The named GID index holds no valid entry.
    NoGidIndex(u8),
    /// No RoCE entry holds the address (or, without one, any IP address).
    NoGidFor(Option<IpAddr>),
    /// The named GID index holds another address than the connection's.
    GidIndexOtherAddress(u8, IpAddr),
    /// The whole device (port 0) is not InfiniBand or RoCE.
    Transport(Transport),
}

/// A port that was looked at and why it could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unusable {
    /// The device's name.
    pub(crate) device: String,
    /// The port's number.
    pub(crate) port: u8,
    /// Why.
    pub(crate) why: Why,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Why::Transport(transport) = self.why {
            return write!(f, "{} is {}", self.device, transport_text(transport));
        }
        write!(f, "port {} of {}", self.port, self.device)?;
        match &self.why {
            Why::Transport(_) => Ok(()),
            Why::NotActive(state) => write!(f, " is {state}"),
            Why::NoLid => {
                f.write_str(" (InfiniBand) has no LID: no subnet manager has configured it")
            }
            Why::NoGidIndex(index) => write!(f, " has no GID at index {index}"),
            Why::NoGidFor(Some(addr)) => write!(f, " has no RoCE GID for {addr}"),
            Why::NoGidFor(None) => f.write_str(" has no RoCE GID with an IP address"),
            Why::GidIndexOtherAddress(index, addr) => {
                write!(
                    f,
                    ": GID index {index} does not hold the connection's address {addr}"
                )
            }
        }
    }
}

/// Why no device, port and GID could be chosen; each names what is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoPath {
    /// The host has no RDMA device.
    #[error("no RDMA device on this host")]
    NoDevice,
    /// The named device does not exist.
    #[error("RDMA device {name:?} not found (this host has {have})")]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices there are, comma-separated.
        have: String,
    },
    /// The named port does not exist on the device.
    #[error("RDMA device {device} has no port {port} (it has {ports})")]
    PortNotFound {
        /// The device.
        device: String,
        /// The port asked for.
        port: u8,
        /// How many ports it has.
        ports: usize,
    },
    /// No InfiniBand or RoCE device has the named port.
    #[error("no InfiniBand or RoCE device on this host has a port {port}")]
    NoSuchPort {
        /// The port asked for.
        port: u8,
    },
    /// The named device is not an InfiniBand or RoCE device (iWARP, whose queue pairs
    /// only the kernel's connection manager connects; or another transport).
    #[error("RDMA device {device} is {}", transport_text(*.transport))]
    Transport {
        /// The device.
        device: String,
        /// Its transport.
        transport: Transport,
    },
    /// Every port looked at is unusable, each for its reason.
    #[error("{}", unusable_text(.0))]
    Unusable(Vec<Unusable>),
}

fn transport_text(transport: Transport) -> &'static str {
    match transport {
        Transport::Iwarp => "iWARP: its queue pairs connect only through the kernel's connection manager (rdma_cm), which this transport does not use yet",
        Transport::InfiniBand => "InfiniBand or RoCE",
        Transport::Other => "neither InfiniBand, RoCE nor iWARP (no reliable connections here)",
    }
}

fn unusable_text(ports: &[Unusable]) -> String {
    match ports {
        [] => "no usable RDMA port".into(),
        [one] => one.to_string(),
        many => {
            let each: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!("no usable RDMA port: {}", each.join("; "))
        }
    }
}

/// Chooses the device, port and GID for a connection whose local address is
/// `wanted.local`, within what `wanted` names.
///
/// # Errors
/// What is missing: the device, the port, a LID, the GID ([`NoPath`]).
pub(crate) fn select(devices: &[DeviceTable], wanted: &Wanted<'_>) -> Result<Choice, NoPath> {
    if devices.is_empty() {
        return Err(NoPath::NoDevice);
    }
    let candidates: Vec<usize> = match wanted.device {
        Some(name) => {
            let Some(i) = devices.iter().position(|d| d.name == name) else {
                let have: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
                return Err(NoPath::DeviceNotFound {
                    name: name.to_owned(),
                    have: have.join(", "),
                });
            };
            vec![i]
        }
        None => (0..devices.len()).collect(),
    };
    let local = wanted.local.map(|ip| match ip {
        IpAddr::V6(v6) => ip_of(v6),
        v4 => v4,
    });
    let mut unusable = Vec::new();
    let mut infiniband = None;
    let mut port_seen = false;
    for i in candidates {
        let device = &devices[i];
        if device.transport != Transport::InfiniBand {
            if wanted.device.is_some() {
                return Err(NoPath::Transport {
                    device: device.name.clone(),
                    transport: device.transport,
                });
            }
            unusable.push(Unusable {
                device: device.name.clone(),
                port: 0,
                why: Why::Transport(device.transport),
            });
            continue;
        }
        let ports = ports_of(device, wanted.port);
        port_seen |= !ports.is_empty();
        if ports.is_empty() && wanted.device.is_some() {
            return Err(port_not_found(device, wanted.port));
        }
        for port in ports {
            match usable(port, wanted.gid_index, local) {
                Ok((gid, by_address)) => {
                    let choice = Choice {
                        device: i,
                        port: port.num,
                        link_layer: port.link_layer,
                        lid: port.lid,
                        mtu: port.active_mtu,
                        gid,
                    };
                    if by_address {
                        return Ok(choice);
                    }
                    infiniband.get_or_insert(choice);
                }
                Err(why) => unusable.push(Unusable {
                    device: device.name.clone(),
                    port: port.num,
                    why,
                }),
            }
        }
    }
    if let Some(choice) = infiniband {
        return Ok(choice);
    }
    match wanted.port {
        // A port number no InfiniBand or RoCE device has.
        Some(port) if !port_seen => Err(NoPath::NoSuchPort { port }),
        _ => Err(NoPath::Unusable(unusable)),
    }
}

/// The ports of `device` to look at: the one named (none if it has no such port), or all.
fn ports_of(device: &DeviceTable, named: Option<u8>) -> Vec<&Port> {
    device
        .ports
        .iter()
        .filter(|p| named.is_none_or(|n| p.num == n))
        .collect()
}

fn port_not_found(device: &DeviceTable, port: Option<u8>) -> NoPath {
    NoPath::PortNotFound {
        device: device.name.clone(),
        port: port.unwrap_or(0),
        ports: device.ports.len(),
    }
}

/// The GID `port` offers for `local` (or at `gid_index`), and whether it was chosen by
/// the address or the index (`true`) or is an InfiniBand port GID (`false`: taken only
/// if no port matches the address).
fn usable(port: &Port, gid_index: Option<u8>, local: Option<IpAddr>) -> Result<(Gid, bool), Why> {
    if port.state != PortState::Active {
        return Err(Why::NotActive(port.state));
    }
    if port.link_layer == LinkLayer::InfiniBand && port.lid == 0 {
        return Err(Why::NoLid);
    }
    if let Some(index) = gid_index {
        let gid = port.gid(index).ok_or(Why::NoGidIndex(index))?;
        // On RoCE the entry must hold the connection's address (a VLAN's entry holds the
        // VLAN interface's); an InfiniBand GID holds none.
        if let (Some(ip), Some(want)) = (gid.ip(), local) {
            if ip != want {
                return Err(Why::GidIndexOtherAddress(index, want));
            }
        }
        return Ok((*gid, true));
    }
    match port.link_layer {
        LinkLayer::InfiniBand => port.gid(0).map(|g| (*g, false)).ok_or(Why::NoGidIndex(0)),
        LinkLayer::Ethernet => {
            let owns = |g: &&Gid| match (g.ip(), local) {
                (Some(ip), Some(want)) => ip == want,
                (Some(_), None) => true,
                (None, _) => false,
            };
            let mut entries = port.gids.iter().filter(owns);
            let first = entries.clone().next();
            entries
                .find(|g| g.kind == GidKind::RoceV2)
                .or(first)
                .map(|g| (*g, true))
                .ok_or(Why::NoGidFor(local))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::fabric::devinfo::parse;

    fn table(name: &str) -> Vec<DeviceTable> {
        parse(match name {
            "rxe" => include_str!("tables/rxe.txt"),
            "roce" => include_str!("tables/roce_mlx5.txt"),
            "ib" => include_str!("tables/ib_mlx5.txt"),
            "ib_dual" => include_str!("tables/ib_mlx4_dual.txt"),
            "iwarp" => include_str!("tables/iwarp.txt"),
            other => panic!("no table {other}"),
        })
    }

    fn at(local: &str) -> Wanted<'static> {
        Wanted {
            local: Some(local.parse().unwrap()),
            ..Wanted::default()
        }
    }

    #[test]
    fn the_tables_read_as_the_devices_reported_them() {
        let ib = table("ib");
        assert_eq!(ib.len(), 2);
        assert_eq!(ib[0].transport, Transport::InfiniBand);
        let port = &ib[0].ports[0];
        assert_eq!(
            (port.num, port.state, port.lid, port.sm_lid),
            (1, PortState::Active, 4, 1)
        );
        assert_eq!(
            (port.link_layer, port.active_mtu),
            (LinkLayer::InfiniBand, Mtu::Mtu4096)
        );
        assert_eq!(port.gids[0].kind, GidKind::InfiniBand);
        assert_eq!(
            port.gids[0].ip(),
            None,
            "an InfiniBand GID is no IP address"
        );
        let roce = table("roce");
        let gids = &roce[0].ports[0].gids;
        assert_eq!(gids.len(), 6);
        assert_eq!(gids[5].ip(), Some(IpAddr::V4(Ipv4Addr::new(10, 0, 3, 1))));
        assert_eq!(
            (gids[4].kind, gids[5].kind),
            (GidKind::RoceV1, GidKind::RoceV2)
        );
        assert_eq!(table("iwarp")[0].transport, Transport::Iwarp);
        let dual = table("ib_dual");
        assert_eq!(
            dual.iter().map(|d| d.ports.len()).collect::<Vec<_>>(),
            [2, 2]
        );
    }

    #[test]
    fn on_roce_the_local_address_names_the_gid_and_v2_is_preferred() {
        let roce = table("roce");
        let choice = select(&roce, &at("10.0.3.1")).unwrap();
        assert_eq!((choice.device, choice.port, choice.gid.index), (0, 1, 5));
        assert_eq!(
            (choice.gid.kind, choice.link_layer, choice.lid),
            (GidKind::RoceV2, LinkLayer::Ethernet, 0)
        );
        assert_eq!(choice.mtu, Mtu::Mtu1024);
        // An IPv4-mapped IPv6 local address (a dual-stack socket) is the IPv4 address.
        let mapped = select(&roce, &at("::ffff:10.0.3.1")).unwrap();
        assert_eq!(mapped.gid.index, 5);
        // Its IPv6 link-local address, by the RoCE v2 entry again.
        let v6 = select(&roce, &at("fe80::8e2a:8eff:fe40:a37c")).unwrap();
        assert_eq!((v6.gid.index, v6.gid.kind), (1, GidKind::RoceV2));
        // Named: a RoCE v1 entry.
        let named = Wanted {
            gid_index: Some(4),
            ..at("10.0.3.1")
        };
        assert_eq!(select(&roce, &named).unwrap().gid.kind, GidKind::RoceV1);
        // An older table (no types) on Soft-RoCE: the only entry for the address, v1.
        let rxe = select(&table("rxe"), &at("10.11.11.251")).unwrap();
        assert_eq!((rxe.gid.index, rxe.gid.kind), (1, GidKind::RoceV1));
    }

    #[test]
    fn what_is_missing_is_named() {
        let roce = table("roce");
        let err = select(&roce, &at("10.0.3.9")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "port 1 of rocep0s6 has no RoCE GID for 10.0.3.9"
        );
        let err = select(
            &roce,
            &Wanted {
                gid_index: Some(9),
                ..at("10.0.3.1")
            },
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "port 1 of rocep0s6 has no GID at index 9");
        let err = select(
            &roce,
            &Wanted {
                port: Some(2),
                ..at("10.0.3.1")
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no InfiniBand or RoCE device on this host has a port 2"
        );
        let ib = table("ib");
        let err = select(
            &ib,
            &Wanted {
                device: Some("mlx5_7"),
                ..at("10.0.3.1")
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "RDMA device \"mlx5_7\" not found (this host has mlx5_0, mlx5_1)"
        );
        let err = select(
            &ib,
            &Wanted {
                device: Some("mlx5_1"),
                ..at("10.0.3.1")
            },
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "port 1 of mlx5_1 is down");
        let dual = table("ib_dual");
        let err = select(
            &dual,
            &Wanted {
                device: Some("mlx4_0"),
                port: Some(2),
                ..Wanted::default()
            },
        );
        assert_eq!(err.unwrap_err().to_string(), "port 2 of mlx4_0 is down");
        // An InfiniBand port no subnet manager has configured: active here, without a LID.
        let mut no_sm = ib.clone();
        no_sm[0].ports[0].lid = 0;
        no_sm[0].ports[0].sm_lid = 0;
        let err = select(&no_sm, &at("192.168.7.1")).unwrap_err();
        assert_eq!(
            err,
            NoPath::Unusable(vec![
                Unusable {
                    device: "mlx5_0".into(),
                    port: 1,
                    why: Why::NoLid
                },
                Unusable {
                    device: "mlx5_1".into(),
                    port: 1,
                    why: Why::NotActive(PortState::Down)
                },
            ])
        );
        assert_eq!(
            err.to_string(),
            "no usable RDMA port: port 1 of mlx5_0 (InfiniBand) has no LID: no subnet manager has \
             configured it; port 1 of mlx5_1 is down"
        );
        assert_eq!(select(&[], &at("10.0.3.1")), Err(NoPath::NoDevice));
    }

    #[test]
    fn infiniband_is_taken_when_no_roce_gid_holds_the_address() {
        // An IPoIB address: no GID holds it; the active InfiniBand port with a LID, by
        // its port GID.
        let ib = table("ib");
        let choice = select(&ib, &at("192.168.7.1")).unwrap();
        assert_eq!((choice.device, choice.port, choice.lid), (0, 1, 4));
        assert_eq!(
            (choice.link_layer, choice.gid.index),
            (LinkLayer::InfiniBand, 0)
        );
        assert_eq!(
            choice.gid.gid,
            "fe80::88e9:a4ff:ff25:a462".parse::<Ipv6Addr>().unwrap()
        );
        // On a host with both, the RoCE device that holds the address wins even when the
        // InfiniBand HCAs are listed first, and InfiniBand carries every other address.
        let mut both = ib.clone();
        both.extend(table("roce"));
        let roce = select(&both, &at("10.0.3.1")).unwrap();
        assert_eq!((roce.device, roce.gid.index), (2, 5));
        assert_eq!(select(&both, &at("192.168.7.1")).unwrap().device, 0);
    }

    #[test]
    fn a_named_port_or_gid_index_is_looked_for_where_it_can_be() {
        // Port 2 without a device: the single-port HCAs are passed over, the dual-port
        // ones' second ports are down; port 3 nobody has.
        let mut hosts = table("ib");
        hosts.extend(table("ib_dual"));
        let err = select(
            &hosts,
            &Wanted {
                port: Some(2),
                ..at("192.168.7.1")
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no usable RDMA port: port 2 of mlx4_1 is down; port 2 of mlx4_0 is down"
        );
        let err = select(
            &hosts,
            &Wanted {
                port: Some(3),
                ..at("192.168.7.1")
            },
        )
        .unwrap_err();
        assert_eq!(err, NoPath::NoSuchPort { port: 3 });
        let port1 = select(
            &hosts,
            &Wanted {
                port: Some(1),
                ..at("192.168.7.1")
            },
        )
        .unwrap();
        assert_eq!((port1.device, port1.port), (0, 1));
        // Two RoCE NICs, a GID index named: the NIC whose entry holds the address.
        let mut two = table("roce");
        let mut second = two[0].clone();
        second.name = "rocep0s7".into();
        for gid in &mut second.ports[0].gids {
            if let Some(IpAddr::V4(_)) = gid.ip() {
                gid.gid = Ipv4Addr::new(10, 0, 4, 1).to_ipv6_mapped();
            }
        }
        two.push(second);
        let named = Wanted {
            gid_index: Some(5),
            ..at("10.0.4.1")
        };
        let choice = select(&two, &named).unwrap();
        assert_eq!((choice.device, choice.gid.index), (1, 5));
        let err = select(&two[..1], &named).unwrap_err();
        assert_eq!(
            err.to_string(),
            "port 1 of rocep0s6: GID index 5 does not hold the connection's address 10.0.4.1"
        );
        // A RoCE port that is down is passed over for the one that is up.
        two[1].ports[0].state = PortState::Down;
        let err = select(&two, &at("10.0.4.1")).unwrap_err();
        assert!(
            err.to_string().contains("port 1 of rocep0s7 is down"),
            "{err}"
        );
        // A device of another transport is named as such.
        let mut other = table("roce");
        other[0].transport = Transport::Other;
        let err = select(&other, &at("10.0.3.1")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("rocep0s6 is neither InfiniBand"),
            "{err}"
        );
    }

    #[test]
    fn iwarp_devices_are_passed_over_and_refused_by_name() {
        let iwarp = table("iwarp");
        let err = select(&iwarp, &at("10.0.0.1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "qedr0 is iWARP: its queue pairs connect only through the kernel's connection \
             manager (rdma_cm), which this transport does not use yet"
        );
        let err = select(
            &iwarp,
            &Wanted {
                device: Some("qedr0"),
                ..at("10.0.0.1")
            },
        )
        .unwrap_err();
        assert!(
            matches!(err, NoPath::Transport { ref device, transport: Transport::Iwarp } if device == "qedr0"),
            "{err}"
        );
    }
}
