//! [`Context`]: opening the RDMA device, port and GID a connection uses.
//!
//! Every device's ports and GID tables are read into [`DeviceTable`]s (the fabric as
//! data) and the choice is made on them by [`fabric::select`]; only the chosen device
//! stays open.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::net::Ipv6Addr;
use std::ptr::NonNull;

use rdma_sys::{
    ___ibv_query_port, ibv_close_device, ibv_context, ibv_device, ibv_device_attr,
    ibv_free_device_list, ibv_get_device_list, ibv_get_device_name, ibv_gid, ibv_open_device,
    ibv_port_attr, ibv_query_device, ibv_query_gid, ibv_transport_type,
};

use super::error::{check_ret, Error, Result};
use crate::fabric::{
    self, Choice, DeviceTable, Gid, GidKind, LinkLayer, Mtu, Port, PortState, Transport, Wanted,
};

/// How many GID table entries are scanned per port (rxe has 1024, real NICs 128-256;
/// the entries of the configured addresses come first in practice).
const MAX_GID_SCAN: i32 = 256;

/// Where the kernel publishes the type ("IB/RoCE v1" or "RoCE v2") of each GID entry.
const SYSFS_IB: &str = "/sys/class/infiniband";

/// `IBV_LINK_LAYER_ETHERNET` of `ibv_port_attr::link_layer` (0, unspecified, and 1 are
/// InfiniBand).
const LINK_LAYER_ETHERNET: u8 = 2;

/// An open RDMA device (`ibv_context`) with the port and GID chosen on it and the device
/// attributes QP set-up needs.
///
/// Invariant: `ptr` came from `ibv_open_device` and is closed exactly once, in `Drop`;
/// children ([`ProtectionDomain`](super::ProtectionDomain), [`CompChannel`](super::CompChannel),
/// [`CompletionQueue`](super::CompletionQueue)) hold an `Arc<Context>`, so it is closed last.
#[derive(Debug)]
pub(crate) struct Context {
    ptr: NonNull<ibv_context>,
    name: String,
    /// The port and GID connections on this context use.
    choice: Choice,
    attrs: DeviceAttrs,
}

/// What QP and CQ set-up need from `ibv_device_attr`.
#[derive(Debug, Clone, Copy)]
struct DeviceAttrs {
    /// `max_qp_rd_atom`: outstanding RDMA READs per QP, as target.
    max_qp_rd_atom: u8,
    /// `max_qp_init_rd_atom`: outstanding RDMA READs per QP, as initiator.
    max_qp_init_rd_atom: u8,
    /// `max_cqe`: entries of one completion queue at most.
    max_cqe: u32,
    /// Completion vectors (interrupt lines) the device offers, at least 1.
    comp_vectors: u32,
}

// SAFETY: an `ibv_context` is not tied to the thread that opened it; libibverbs is
// thread-safe and every verb taking a context (`ibv_alloc_pd`, `ibv_create_cq`,
// `ibv_query_*`, ...) may be called from any thread, concurrently (rdma-core serialises
// the shared command fd in the kernel and guards its own lists with mutexes).
unsafe impl Send for Context {}
// SAFETY: see `Send`: all `&self` methods only call thread-safe verbs or read fields that
// never change after `open`.
unsafe impl Sync for Context {}

/// Whether this host has at least one RDMA device. Cheap: lists devices, opens none.
///
/// Returns `false` on kernels without RDMA support (where `ibv_get_device_list` fails with
/// `ENOSYS`) instead of failing; use it to decide between RDMA and TCP.
pub fn rdma_available() -> bool {
    DeviceList::get().is_ok()
}

/// A device opened to read its tables, closed on drop unless kept.
struct Opened {
    /// `None` once [`Context::open`] took it.
    ptr: Option<NonNull<ibv_context>>,
    table: DeviceTable,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some(ptr) = self.ptr.take() {
            // SAFETY: `ptr` came from ibv_open_device, nothing was created on it, and it
            // was not taken by a `Context` (which would have set `None`).
            unsafe { ibv_close_device(ptr.as_ptr()) };
        }
    }
}

impl Context {
    #[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
    /// Opens the device, port and GID [`fabric::select`] chooses for `wanted`: by the
    /// local address (the RoCE GID that holds it, as rdma_cm would pick; an InfiniBand
    /// port when no RoCE entry does), within the device, port and GID index named.
    ///
    /// # Errors
    ///
    /// [`Error::NoDevice`] on a host without RDMA, [`Error::NoPath`] naming the missing
    /// device, port, LID or GID, or [`Error::Verb`] when opening or querying a device
    /// fails.
    pub(crate) fn open(wanted: &Wanted<'_>) -> Result<Self> {
        let list = DeviceList::get()?;
        let mut opened = Vec::new();
        let mut failed = None;
        for dev in list.iter() {
            let name = device_name_of(dev);
            if wanted.device.is_some_and(|n| n != name) {
                continue;
            }
            // A device this process cannot open (a container given only some of the
            // host's /dev/infiniband/uverbs*) does not hide the others.
            match Self::read(dev, name.clone()) {
                Ok(device) => opened.push(device),
                Err(error) if wanted.device.is_none() => {
                    tracing::debug!(device = %name, %error, "RDMA device passed over");
                    failed.get_or_insert(error);
                }
                Err(error) => return Err(error),
            }
        }
        if let (true, Some(error)) = (opened.is_empty(), failed) {
            return Err(error);
        }
        if opened.is_empty() {
            // The name was not found: let `select` say so, listing every device.
            let tables: Vec<DeviceTable> = list
                .iter()
                .map(|d| DeviceTable {
                    name: device_name_of(d),
                    transport: Transport::Other,
                    ports: Vec::new(),
                })
                .collect();
            let why = fabric::select(&tables, wanted).err();
            return Err(why.unwrap_or(fabric::NoPath::NoDevice).into());
        }
        let tables: Vec<DeviceTable> = opened.iter().map(|o| o.table.clone()).collect();
        let choice = fabric::select(&tables, wanted)?;
        let mut chosen = opened.swap_remove(choice.device);
        drop(opened);
        // The context owns the device from here (and closes it on every return).
        let ptr = chosen
            .ptr
            .take()
            .expect("opened devices hold their context");
        let mut ctx = Context {
            ptr,
            name: mem::take(&mut chosen.table.name),
            choice: Choice {
                device: 0,
                ..choice
            },
            attrs: DeviceAttrs {
                max_qp_rd_atom: 1,
                max_qp_init_rd_atom: 1,
                max_cqe: 1,
                comp_vectors: 1,
            },
        };
        ctx.attrs = query_attrs(ptr)?;
        tracing::debug!(
            device = %ctx.name, port = choice.port, link_layer = %choice.link_layer,
            gid_index = choice.gid.index, gid = %choice.gid.gid, lid = choice.lid,
            mtu = choice.mtu.bytes(), "opened RDMA device"
        );
        Ok(ctx)
    }

    /// A context of its own on the device of `cm_verbs` (the context librdmacm opened
    /// for an id), with `port` and the GID `sgid` the id's route starts from chosen.
    /// librdmacm's context is not used beyond finding the device: it may close it when
    /// the device goes away and its last id is destroyed, while this one lives as long as
    /// the queue pairs and CQs made on it.
    ///
    /// # Errors
    /// [`Error::Verb`] when the device cannot be opened or queried; [`Error::NoPath`] when
    /// it has no such port.
    pub(super) fn for_cm(cm_verbs: NonNull<ibv_context>, port: u8, sgid: [u8; 16]) -> Result<Self> {
        // SAFETY: `cm_verbs` is the live context of an id the caller holds (`CmId::bound`
        // read it from the id; librdmacm keeps a device's context open while any id is
        // bound to it); its `device` is set at open and never changes, and the device
        // object lives in libibverbs' list for as long as any context of it is open.
        let dev = NonNull::new(unsafe { (*cm_verbs.as_ptr()).device })
            .ok_or_else(|| Error::last_os("rdma_cm id without a device"))?;
        let mut opened = Self::read(dev, device_name_of(dev))?;
        let iwarp = opened.table.transport == Transport::Iwarp;
        let Some(table) = opened.table.ports.iter_mut().find(|p| p.num == port) else {
            return Err(fabric::NoPath::PortNotFound {
                device: opened.table.name.clone(),
                port,
                ports: opened.table.ports.len(),
            }
            .into());
        };
        if iwarp {
            for gid in &mut table.gids {
                gid.kind = GidKind::Iwarp;
            }
        }
        let sgid = Ipv6Addr::from(sgid);
        // The route's source GID on that port; iWARP's GID (a MAC) may not be listed.
        let fallback = Gid {
            index: 0,
            gid: sgid,
            kind: GidKind::Iwarp,
        };
        let gid = table
            .gids
            .iter()
            .find(|g| g.gid == sgid)
            .or(table.gids.first())
            .copied()
            .unwrap_or(fallback);
        let choice = Choice {
            device: 0,
            port,
            link_layer: table.link_layer,
            lid: table.lid,
            mtu: table.active_mtu,
            gid,
        };
        let ptr = opened
            .ptr
            .take()
            .expect("opened devices hold their context");
        let mut ctx = Context {
            ptr,
            name: mem::take(&mut opened.table.name),
            choice,
            attrs: DeviceAttrs {
                max_qp_rd_atom: 1,
                max_qp_init_rd_atom: 1,
                max_cqe: 1,
                comp_vectors: 1,
            },
        };
        ctx.attrs = query_attrs(ptr)?;
        Ok(ctx)
    }

    /// Opens `dev` and reads its ports and GID tables.
    fn read(dev: NonNull<ibv_device>, name: String) -> Result<Opened> {
        // SAFETY: `dev` is an entry of a live device list (`DeviceList` frees it only when
        // dropped, after this call); ibv_open_device(3) returns NULL + errno on failure.
        let ptr = unsafe { ibv_open_device(dev.as_ptr()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("ibv_open_device"))?;
        // SAFETY: `dev` is a live list entry; `transport_type` is set by libibverbs when
        // it lists the device and never changes.
        let transport = match unsafe { (*dev.as_ptr()).transport_type } {
            ibv_transport_type::IBV_TRANSPORT_IB => Transport::InfiniBand,
            ibv_transport_type::IBV_TRANSPORT_IWARP => Transport::Iwarp,
            _ => Transport::Other,
        };
        let mut opened = Opened {
            ptr: Some(ptr),
            table: DeviceTable {
                name,
                transport,
                ports: Vec::new(),
            },
        };
        // From here on `opened`'s Drop closes the device on every early return.
        // SAFETY: `ibv_device_attr` is plain C data (integers and a char array): all-zero
        // is a valid value.
        let mut attr: ibv_device_attr = unsafe { mem::zeroed() };
        // SAFETY: `ptr` is an open context and `attr` a valid, writable out-parameter
        // (ibv_query_device(3)).
        check_ret("ibv_query_device", unsafe {
            ibv_query_device(ptr.as_ptr(), &mut attr)
        })?;
        for num in 1..=attr.phys_port_cnt {
            let port = read_port(ptr, &opened.table.name, num)?;
            opened.table.ports.push(port);
        }
        Ok(opened)
    }

    /// The device name, e.g. `rxe0` or `mlx5_0`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The device, port and GID in words, e.g. `rxe0 port 1 (Ethernet), GID fd00::1 (RoCE
    /// v2, index 3)` or `mlx5_0 port 1 (InfiniBand, LID 4), GID fe80::... (index 0)`.
    pub(crate) fn describe(&self) -> String {
        let c = &self.choice;
        let link = match c.link_layer {
            LinkLayer::InfiniBand => format!("InfiniBand, LID {}", c.lid),
            LinkLayer::Ethernet => "Ethernet".to_owned(),
        };
        let kind = match c.gid.kind {
            GidKind::InfiniBand => "",
            GidKind::Iwarp => "iWARP, ",
            GidKind::RoceV1 => "RoCE v1, ",
            GidKind::RoceV2 => "RoCE v2, ",
        };
        let gid = fabric::ip_of(c.gid.gid);
        format!(
            "{} port {} ({link}), GID {gid} ({kind}index {})",
            self.name, c.port, c.gid.index
        )
    }

    /// The port and GID chosen: `gid.gid` (`::ffff:a.b.c.d` for RoCE on IPv4) is sent
    /// to the peer as its `dgid`, `gid.index` is the `sgid_index` of address vectors.
    pub(crate) fn choice(&self) -> &Choice {
        &self.choice
    }

    /// Whether the device is iWARP (its queue pairs connect through rdma_cm only, and an
    /// RDMA READ's sink must be remote-writable).
    pub(crate) fn is_iwarp(&self) -> bool {
        self.choice.gid.kind == GidKind::Iwarp
    }

    /// Outstanding RDMA READs the device accepts per QP as responder (clamped to 1..=16).
    pub(crate) fn max_qp_rd_atom(&self) -> u8 {
        self.attrs.max_qp_rd_atom
    }

    /// Outstanding RDMA READs the device issues per QP as initiator (clamped to 1..=16).
    pub(crate) fn max_qp_init_rd_atom(&self) -> u8 {
        self.attrs.max_qp_init_rd_atom
    }

    /// Entries one completion queue may have at most (`max_cqe`).
    pub(crate) fn max_cqe(&self) -> u32 {
        self.attrs.max_cqe
    }

    /// Completion vectors of the device (at least 1): CQs spread over them spread their
    /// completion interrupts.
    pub(crate) fn comp_vectors(&self) -> u32 {
        self.attrs.comp_vectors
    }

    /// The raw context, for the sibling wrappers' verbs calls.
    pub(crate) fn as_ptr(&self) -> *mut ibv_context {
        self.ptr.as_ptr()
    }
}

/// Reads port `num`'s attributes and GID table.
fn read_port(ptr: NonNull<ibv_context>, device: &str, num: u8) -> Result<Port> {
    // SAFETY: `ibv_port_attr` is plain C data (integers only): all-zero is valid.
    let mut attr: ibv_port_attr = unsafe { mem::zeroed() };
    // SAFETY: `ptr` is an open context; `attr` is a full-size `ibv_port_attr`, which
    // is what `___ibv_query_port` (the static-inline ibv_query_port(3) of verbs.h,
    // re-implemented by rdma-sys) expects, unlike the exported compat symbol.
    check_ret("ibv_query_port", unsafe {
        ___ibv_query_port(ptr.as_ptr(), num, &mut attr)
    })?;
    let link_layer = if attr.link_layer == LINK_LAYER_ETHERNET {
        LinkLayer::Ethernet
    } else {
        LinkLayer::InfiniBand
    };
    let mut gids = Vec::new();
    for index in 0..attr.gid_tbl_len.min(MAX_GID_SCAN) {
        // SAFETY: `ibv_gid` is a union of a byte array and two u64s: all-zero is valid.
        let mut gid: ibv_gid = unsafe { mem::zeroed() };
        // SAFETY: `ptr` is an open context and `gid` a writable out-parameter;
        // ibv_query_gid(3) fails (non-zero) past the end of the table, which ends the scan.
        if unsafe { ibv_query_gid(ptr.as_ptr(), num, index, &mut gid) } != 0 {
            break;
        }
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        let raw = Ipv6Addr::from(unsafe { gid.raw });
        if raw.is_unspecified() {
            continue; // an empty entry
        }
        let kind = match link_layer {
            LinkLayer::InfiniBand => GidKind::InfiniBand,
            LinkLayer::Ethernet if gid_is_roce_v2(device, num, index) => GidKind::RoceV2,
            LinkLayer::Ethernet => GidKind::RoceV1,
        };
        // `index < MAX_GID_SCAN = 256`, so it fits (an address vector's `sgid_index`
        // is a u8: entries past 255 cannot be used anyway).
        gids.push(Gid {
            index: index as u8,
            gid: raw,
            kind,
        });
    }
    Ok(Port {
        num,
        state: PortState::from_raw(attr.state),
        link_layer,
        lid: attr.lid,
        sm_lid: attr.sm_lid,
        active_mtu: Mtu::from_code(attr.active_mtu),
        gids,
    })
}

/// Whether GID entry `index` of `port` is RoCE v2, per sysfs (false when unknown).
fn gid_is_roce_v2(device: &str, port: u8, index: i32) -> bool {
    let path = format!("{SYSFS_IB}/{device}/ports/{port}/gid_attrs/types/{index}");
    std::fs::read_to_string(path).is_ok_and(|t| t.trim().eq_ignore_ascii_case("RoCE v2"))
}

/// The attributes of an open device that QP and CQ set-up need.
fn query_attrs(ptr: NonNull<ibv_context>) -> Result<DeviceAttrs> {
    // SAFETY: `ibv_device_attr` is plain C data: all-zero is a valid value.
    let mut attr: ibv_device_attr = unsafe { mem::zeroed() };
    // SAFETY: `ptr` is an open context and `attr` a valid, writable out-parameter.
    check_ret("ibv_query_device", unsafe {
        ibv_query_device(ptr.as_ptr(), &mut attr)
    })?;
    // SAFETY: `ptr` is an open context; `num_comp_vectors` is set by
    // ibv_open_device(3) and never changes.
    let vectors = unsafe { (*ptr.as_ptr()).num_comp_vectors };
    Ok(DeviceAttrs {
        max_qp_rd_atom: attr.max_qp_rd_atom.clamp(1, 16) as u8,
        max_qp_init_rd_atom: attr.max_qp_init_rd_atom.clamp(1, 16) as u8,
        max_cqe: u32::try_from(attr.max_cqe).unwrap_or(0).max(1),
        comp_vectors: u32::try_from(vectors).unwrap_or(0).max(1),
    })
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_open_device and is closed only here; every child
        // object holds an `Arc<Context>`, so none is left when this runs (ibv_close_device(3)
        // requires all resources of the context to be released first).
        let ret = unsafe { ibv_close_device(self.ptr.as_ptr()) };
        if ret != 0 {
            tracing::error!(device = %self.name, error = %Error::from_ret("ibv_close_device", ret), "cannot close RDMA device");
        }
    }
}

/// The name of a device of a live device list.
/// The names of this host's RDMA devices (none without an RDMA stack), for errors that
/// name what there is.
pub(crate) fn device_names() -> Vec<String> {
    DeviceList::get().map_or_else(|_| Vec::new(), |l| l.iter().map(device_name_of).collect())
}

pub(super) fn device_name_of(dev: NonNull<ibv_device>) -> String {
    // SAFETY: `dev` is an entry of a live list; ibv_get_device_name(3) returns a pointer to
    // a NUL-terminated name owned by the device, valid while the list is, and copied here.
    let name = unsafe { ibv_get_device_name(dev.as_ptr()) };
    if name.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL, NUL-terminated, alive for the duration of this call (see above).
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// The result of `ibv_get_device_list`, freed on drop.
struct DeviceList {
    list: NonNull<*mut ibv_device>,
    len: usize,
}

impl DeviceList {
    /// Lists the devices; an absent RDMA stack and an empty list are both `NoDevice`.
    fn get() -> Result<Self> {
        let mut num: i32 = 0;
        // SAFETY: `num` is a valid out-parameter; ibv_get_device_list(3) returns NULL with
        // errno set (ENOSYS when the kernel lacks the RDMA subsystem) or a NULL-terminated
        // array that must be released with ibv_free_device_list.
        let list = unsafe { ibv_get_device_list(&mut num) };
        let Some(list) = NonNull::new(list) else {
            return Err(Error::NoDevice {
                source: io::Error::last_os_error(),
            });
        };
        let list = DeviceList {
            list,
            len: usize::try_from(num).unwrap_or(0),
        };
        if list.len == 0 {
            return Err(Error::NoDevice {
                source: io::Error::from_raw_os_error(libc::ENODEV),
            });
        }
        Ok(list)
    }

    fn iter(&self) -> impl Iterator<Item = NonNull<ibv_device>> + '_ {
        (0..self.len).filter_map(|i| {
            // SAFETY: the array holds `len` device pointers (followed by a NULL), per
            // ibv_get_device_list(3), and stays allocated until `self` is dropped.
            NonNull::new(unsafe { *self.list.as_ptr().add(i) })
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed only here. Contexts
        // opened from its entries stay valid: ibv_free_device_list(3) only drops the
        // references of devices that were not opened.
        unsafe { ibv_free_device_list(self.list.as_ptr()) };
    }
}
