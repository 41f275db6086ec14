//! [`DeviceTable`]: what a device reports about its ports and GIDs.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// A path MTU as InfiniBand encodes it (`ibv_mtu`: 1 = 256 bytes ... 5 = 4096).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes (Soft-RoCE on a 1500-byte Ethernet link).
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes (RoCE on jumbo frames, InfiniBand).
    Mtu4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub(crate) fn bytes(self) -> u32 {
        128 << self.code()
    }

    /// The InfiniBand code (`ibv_mtu`, 1..=5).
    pub(crate) fn code(self) -> u32 {
        match self {
            Mtu::Mtu256 => 1,
            Mtu::Mtu512 => 2,
            Mtu::Mtu1024 => 3,
            Mtu::Mtu2048 => 4,
            Mtu::Mtu4096 => 5,
        }
    }

    /// The MTU of an InfiniBand code; an unknown code is taken as 1024, which every
    /// port supports.
    pub(crate) fn from_code(code: u32) -> Self {
        match code {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => Mtu::Mtu1024,
        }
    }
}

/// How a device's queue pairs are connected (`ibv_device::transport_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// InfiniBand transport: InfiniBand and RoCE ports (queue pairs moved by hand or
    /// through rdma_cm).
    InfiniBand,
    /// iWARP (RDMA over TCP): queue pairs are connected only through the kernel's
    /// connection manager (MPA).
    Iwarp,
    /// Anything else the device reports (usNIC, unknown).
    Other,
}

/// A port's link layer (`ibv_port_attr::link_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkLayer {
    /// InfiniBand: routed by LID inside a subnet, by GID across subnets.
    InfiniBand,
    /// Ethernet: RoCE (or iWARP), addressed by GID, which holds an IP address.
    Ethernet,
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        })
    }
}

/// A port's logical state (`ibv_port_attr::state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortState {
    /// `PORT_DOWN`: no link.
    Down,
    /// `PORT_INIT`: link up, not configured by a subnet manager yet (InfiniBand).
    Init,
    /// `PORT_ARMED`: configured, not active yet.
    Armed,
    /// `PORT_ACTIVE`: usable.
    Active,
    /// Any other value (`NOP`, `ACTIVE_DEFER`), by its number.
    Other(u32),
}

impl PortState {
    /// The state of `ibv_port_state` value `raw`.
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            other => PortState::Other(other),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("down"),
            PortState::Init => f.write_str("init (no subnet manager has configured it)"),
            PortState::Armed => f.write_str("armed"),
            PortState::Active => f.write_str("active"),
            PortState::Other(n) => write!(f, "in state {n}"),
        }
    }
}

/// What a GID entry is, per sysfs `ports/N/gid_attrs/types/I` and the link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GidKind {
    /// An InfiniBand GID: subnet prefix and port GUID, no IP address.
    InfiniBand,
    /// RoCE v1: Ethernet frames, not routable across IP subnets.
    RoceV1,
    /// RoCE v2: UDP/IP, routable; preferred when both exist for an address.
    RoceV2,
    /// An iWARP device's GID (from its MAC address): no IP address; iWARP connections
    /// are addressed by IP through rdma_cm.
    Iwarp,
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gid {
    /// Its index, the `sgid_index` of address vectors that use it.
    pub(crate) index: u8,
    /// The GID.
    pub(crate) gid: Ipv6Addr,
    /// Its type.
    pub(crate) kind: GidKind,
}

impl Gid {
    /// The IP address a RoCE GID holds (an IPv4-mapped GID is its IPv4 address); `None`
    /// for an InfiniBand GID, which names a port, not an address.
    pub(crate) fn ip(&self) -> Option<IpAddr> {
        match self.kind {
            GidKind::InfiniBand | GidKind::Iwarp => None,
            GidKind::RoceV1 | GidKind::RoceV2 => Some(ip_of(self.gid)),
        }
    }
}

/// The IP address an IPv6 GID or address stands for: an IPv4-mapped one is IPv4.
pub(crate) fn ip_of(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// One port of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Port {
    /// Its number, from 1.
    pub(crate) num: u8,
    /// Its logical state.
    pub(crate) state: PortState,
    /// Its link layer.
    pub(crate) link_layer: LinkLayer,
    /// Its base LID (0 on Ethernet, and on an InfiniBand port no subnet manager has
    /// configured).
    pub(crate) lid: u16,
    /// The LID of its subnet manager (0 on Ethernet).
    pub(crate) sm_lid: u16,
    /// The active MTU: the path MTU unless the peer's is smaller.
    pub(crate) active_mtu: Mtu,
    /// The valid (non-zero) entries of its GID table, in index order.
    pub(crate) gids: Vec<Gid>,
}

impl Port {
    /// The entry at `index`, if it is valid.
    pub(crate) fn gid(&self, index: u8) -> Option<&Gid> {
        self.gids.iter().find(|g| g.index == index)
    }
}

/// A device and its ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceTable {
    /// Its name, e.g. `mlx5_0`, `rxe0`, `siw0`.
    pub(crate) name: String,
    /// How its queue pairs are connected.
    pub(crate) transport: Transport,
    /// Its ports, in number order.
    pub(crate) ports: Vec<Port>,
}
