//! The fabric as data, and the decisions taken on it without I/O.
//!
//! A device's ports, their link layers (InfiniBand or Ethernet), LIDs and GID tables, as
//! `ibv_query_port`, `ibv_query_gid` and sysfs report them (`table.rs`; the verbs layer
//! fills them in `verbs/context.rs`); which device, port and GID a connection uses, from
//! the settings and the local address (`select.rs`); how a queue pair addresses its peer
//! on that port: by LID on InfiniBand, by GID (a global route header) on RoCE and across
//! InfiniBand subnets (`path.rs`). Each is unit-tested on tables as real devices report
//! them (`ibv_devinfo -v` output kept in `tables/`, read by `devinfo.rs`).

#[cfg(test)]
mod devinfo;
mod path;
mod select;
mod table;

pub(crate) use path::{address, PathError, Peer};
pub(crate) use select::{select, Choice, NoPath, Wanted};
pub(crate) use table::{
    ip_of, DeviceTable, Gid, GidKind, LinkLayer, Mtu, Port, PortState, Transport,
};
