//! Reads `ibv_devinfo -v` output into [`DeviceTable`]s, for the tests: the tables in
//! `tables/` are what real devices reported (their sources are in each file's header).

use std::net::Ipv6Addr;

use super::table::{DeviceTable, Gid, GidKind, LinkLayer, Mtu, Port, PortState, Transport};

/// The devices `text` (the output of `ibv_devinfo -v`) describes; lines starting with
/// `#` are comments.
pub(crate) fn parse(text: &str) -> Vec<DeviceTable> {
    let mut devices: Vec<DeviceTable> = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        if key == "hca_id" {
            devices.push(DeviceTable {
                name: value.to_owned(),
                transport: Transport::Other,
                ports: Vec::new(),
            });
            continue;
        }
        let Some(device) = devices.last_mut() else {
            continue;
        };
        match key {
            "transport" if value.starts_with("InfiniBand") => {
                device.transport = Transport::InfiniBand;
            }
            "transport" if value.starts_with("iWARP") => device.transport = Transport::Iwarp,
            "port" => device.ports.push(Port {
                num: value.parse().expect("port number"),
                state: PortState::Other(0),
                link_layer: LinkLayer::InfiniBand,
                lid: 0,
                sm_lid: 0,
                active_mtu: Mtu::Mtu1024,
                gids: Vec::new(),
            }),
            _ => {
                if let Some(port) = device.ports.last_mut() {
                    port_line(port, key, value);
                }
            }
        }
    }
    // The GID types are known once the link layer and transport are (they may follow
    // the GIDs).
    for device in &mut devices {
        let iwarp = device.transport == Transport::Iwarp;
        for port in &mut device.ports {
            for gid in &mut port.gids {
                if iwarp {
                    gid.kind = GidKind::Iwarp;
                } else if port.link_layer == LinkLayer::InfiniBand {
                    gid.kind = GidKind::InfiniBand;
                }
            }
        }
    }
    devices
}

/// `(5)` in `4096 (5)`, `(4)` in `PORT_ACTIVE (4)`.
fn code(value: &str) -> u32 {
    let inner = value
        .rsplit_once('(')
        .and_then(|(_, c)| c.strip_suffix(')'));
    inner.and_then(|c| c.trim().parse().ok()).unwrap_or(0)
}

fn port_line(port: &mut Port, key: &str, value: &str) {
    let number = |v: &str| match v.strip_prefix("0x") {
        Some(hex) => u16::from_str_radix(hex, 16).expect("hex number"),
        None => v.parse().expect("number"),
    };
    match key {
        "state" => port.state = PortState::from_raw(code(value)),
        "active_mtu" => port.active_mtu = Mtu::from_code(code(value)),
        "sm_lid" => port.sm_lid = number(value),
        "port_lid" => port.lid = number(value),
        "link_layer" if value == "Ethernet" => port.link_layer = LinkLayer::Ethernet,
        "link_layer" => port.link_layer = LinkLayer::InfiniBand,
        gid if gid.starts_with("GID[") => {
            let index = gid["GID[".len()..gid.len() - 1]
                .trim()
                .parse()
                .expect("GID index");
            let (addr, kind) = value.split_once(',').unwrap_or((value, ""));
            let gid: Ipv6Addr = addr.trim().parse().expect("GID");
            if gid.is_unspecified() {
                return;
            }
            // Older ibv_devinfo prints no type: such tables are RoCE v1 (or InfiniBand,
            // fixed once the link layer is read).
            let kind = if kind.contains("v2") {
                GidKind::RoceV2
            } else {
                GidKind::RoceV1
            };
            port.gids.push(Gid { index, gid, kind });
        }
        _ => {}
    }
}
