//! [`Context`]: opening an RDMA device and choosing the GID that owns a local address.

use std::ffi::CStr;
use std::io;
use std::mem;
use std::net::Ipv4Addr;
use std::ptr::NonNull;

use rdma_sys::{
    ___ibv_query_port, ibv_close_device, ibv_context, ibv_device, ibv_device_attr,
    ibv_free_device_list, ibv_get_device_list, ibv_get_device_name, ibv_gid, ibv_mtu,
    ibv_open_device, ibv_port_attr, ibv_port_state, ibv_query_device, ibv_query_gid,
};

use super::error::{check_ret, Error, Result};

/// The port used on every device. RoCE NICs and Soft-RoCE expose one port per device.
pub(crate) const PORT_NUM: u8 = 1;

/// How many GID table entries are scanned per device (rxe has 1024, real NICs 128–256;
/// the IPv4-mapped entries of the configured addresses come first in practice).
const MAX_GID_SCAN: i32 = 256;

/// Where the kernel publishes the type ("IB/RoCE v1" or "RoCE v2") of each GID entry.
const SYSFS_IB: &str = "/sys/class/infiniband";

/// A path MTU as the verbs encode it (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
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
        128 << self.to_raw()
    }

    /// The MTU for a byte count, if it is one of the five valid ones.
    pub(crate) fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The `ibv_mtu` value for `ibv_qp_attr::path_mtu`.
    pub(crate) fn to_raw(self) -> ibv_mtu::Type {
        match self {
            Mtu::Mtu256 => ibv_mtu::IBV_MTU_256,
            Mtu::Mtu512 => ibv_mtu::IBV_MTU_512,
            Mtu::Mtu1024 => ibv_mtu::IBV_MTU_1024,
            Mtu::Mtu2048 => ibv_mtu::IBV_MTU_2048,
            Mtu::Mtu4096 => ibv_mtu::IBV_MTU_4096,
        }
    }

    fn from_raw(raw: ibv_mtu::Type) -> Self {
        match raw {
            ibv_mtu::IBV_MTU_256 => Mtu::Mtu256,
            ibv_mtu::IBV_MTU_512 => Mtu::Mtu512,
            ibv_mtu::IBV_MTU_2048 => Mtu::Mtu2048,
            ibv_mtu::IBV_MTU_4096 => Mtu::Mtu4096,
            // 1024 is what every RoCE port supports; a garbage value falls back to it.
            _ => Mtu::Mtu1024,
        }
    }
}

/// What this crate needs from `ibv_port_attr` of [`PORT_NUM`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortInfo {
    /// The active MTU of the port: the path MTU to use unless the peer's is smaller.
    pub(crate) active_mtu: Mtu,
    /// The port's LID (0 on RoCE, where routing uses the GID).
    pub(crate) lid: u16,
    /// Whether the port is `IBV_PORT_ACTIVE` (link up).
    pub(crate) active: bool,
}

/// An open RDMA device (`ibv_context`) together with the GID index that owns the chosen
/// local address and the attributes QP set-up needs.
///
/// Invariant: `ptr` came from `ibv_open_device` and is closed exactly once, in `Drop`;
/// children ([`ProtectionDomain`](super::ProtectionDomain), [`CompChannel`](super::CompChannel),
/// [`CompletionQueue`](super::CompletionQueue)) hold an `Arc<Context>`, so it is closed last.
#[derive(Debug)]
pub(crate) struct Context {
    ptr: NonNull<ibv_context>,
    name: String,
    gid_index: u8,
    gid: [u8; 16],
    port: PortInfo,
    /// `max_qp_rd_atom` of the device: outstanding RDMA READs per QP, as target.
    max_qp_rd_atom: u8,
    /// `max_qp_init_rd_atom` of the device: outstanding RDMA READs per QP, as initiator.
    max_qp_init_rd_atom: u8,
    /// `max_cqe` of the device: entries of one completion queue at most.
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

impl Context {
    /// Opens a device and picks the RoCE GID that owns `local_ip`.
    ///
    /// - `device_name` given: that device, and on it the GID for `local_ip` (or its first
    ///   IPv4-mapped GID when `local_ip` is `None`).
    /// - only `local_ip` given: the first device (in `ibv_get_device_list` order) whose
    ///   GID table holds `::ffff:local_ip`; this is the device rdma_cm would bind to.
    /// - neither: the first device and its first IPv4-mapped GID.
    ///
    /// Among entries with the same address a RoCE v2 one (routable, UDP-encapsulated) is
    /// preferred over RoCE v1, judged by `/sys/class/infiniband/DEV/ports/1/gid_attrs/types/N`.
    ///
    /// # Errors
    ///
    /// [`Error::NoDevice`] on a host without RDMA, [`Error::DeviceNotFound`],
    /// [`Error::NoDeviceForAddress`], [`Error::NoGid`], or [`Error::Verb`] when opening or
    /// querying the device fails.
    pub(crate) fn open(device_name: Option<&str>, local_ip: Option<Ipv4Addr>) -> Result<Self> {
        let list = DeviceList::get()?;
        if let Some(name) = device_name {
            let dev = list
                .iter()
                .find(|&d| device_name_of(d) == name)
                .ok_or_else(|| Error::DeviceNotFound {
                    name: name.to_owned(),
                })?;
            return Self::open_device(dev, local_ip)?.ok_or_else(|| Error::NoGid {
                device: name.to_owned(),
                addr: local_ip,
            });
        }
        for dev in list.iter() {
            if let Some(ctx) = Self::open_device(dev, local_ip)? {
                return Ok(ctx);
            }
        }
        Err(match local_ip {
            Some(addr) => Error::NoDeviceForAddress { addr },
            None => Error::NoGid {
                device: list.iter().next().map(device_name_of).unwrap_or_default(),
                addr: None,
            },
        })
    }

    /// Opens `dev`, queries it, and returns it if it has a matching GID (`None` otherwise;
    /// the context is then closed again by `Drop`).
    fn open_device(dev: NonNull<ibv_device>, local_ip: Option<Ipv4Addr>) -> Result<Option<Self>> {
        let name = device_name_of(dev);
        // SAFETY: `dev` is an entry of a live device list (`DeviceList` frees it only when
        // dropped, after this call); ibv_open_device(3) returns NULL + errno on failure.
        let ptr = unsafe { ibv_open_device(dev.as_ptr()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("ibv_open_device"))?;
        let mut ctx = Context {
            ptr,
            name,
            gid_index: 0,
            gid: [0; 16],
            port: PortInfo {
                active_mtu: Mtu::Mtu1024,
                lid: 0,
                active: false,
            },
            max_qp_rd_atom: 1,
            max_qp_init_rd_atom: 1,
            max_cqe: 1,
            comp_vectors: 1,
        };
        // From here on `ctx`'s Drop closes the device on every early return.
        ctx.port = ctx.query_port()?;
        // SAFETY: `ibv_device_attr` is plain C data (integers and a char array): all-zero is
        // a valid value.
        let mut attr: ibv_device_attr = unsafe { mem::zeroed() };
        // SAFETY: `ctx.ptr` is an open context and `attr` a valid, writable out-parameter
        // (ibv_query_device(3)).
        check_ret("ibv_query_device", unsafe {
            ibv_query_device(ctx.ptr.as_ptr(), &mut attr)
        })?;
        ctx.max_qp_rd_atom = attr.max_qp_rd_atom.clamp(1, 16) as u8;
        ctx.max_qp_init_rd_atom = attr.max_qp_init_rd_atom.clamp(1, 16) as u8;
        ctx.max_cqe = u32::try_from(attr.max_cqe).unwrap_or(0).max(1);
        // SAFETY: `ctx.ptr` is an open context; `num_comp_vectors` is set by
        // ibv_open_device(3) and never changes.
        let vectors = unsafe { (*ctx.ptr.as_ptr()).num_comp_vectors };
        ctx.comp_vectors = u32::try_from(vectors).unwrap_or(0).max(1);
        let Some((index, gid)) = ctx.find_gid(local_ip)? else {
            return Ok(None);
        };
        ctx.gid_index = index;
        ctx.gid = gid;
        tracing::debug!(
            device = %ctx.name, gid_index = index, gid = %Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]),
            mtu = ctx.port.active_mtu.bytes(), active = ctx.port.active, "opened RDMA device"
        );
        if !ctx.port.active {
            tracing::warn!(device = %ctx.name, "RDMA port {PORT_NUM} is not active");
        }
        Ok(Some(ctx))
    }

    /// Queries [`PORT_NUM`]'s attributes (active MTU, LID, state).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_query_port` fails.
    pub(crate) fn query_port(&self) -> Result<PortInfo> {
        // SAFETY: `ibv_port_attr` is plain C data (integers only): all-zero is valid.
        let mut attr: ibv_port_attr = unsafe { mem::zeroed() };
        // SAFETY: `self.ptr` is an open context; `attr` is a full-size `ibv_port_attr`, which
        // is what `___ibv_query_port` (the static-inline ibv_query_port(3) of verbs.h,
        // re-implemented by rdma-sys) expects, unlike the exported compat symbol.
        check_ret("ibv_query_port", unsafe {
            ___ibv_query_port(self.ptr.as_ptr(), PORT_NUM, &mut attr)
        })?;
        Ok(PortInfo {
            active_mtu: Mtu::from_raw(attr.active_mtu),
            lid: attr.lid,
            active: attr.state == ibv_port_state::IBV_PORT_ACTIVE,
        })
    }

    /// Scans the GID table for `::ffff:local_ip` (or any IPv4-mapped entry when `None`),
    /// preferring a RoCE v2 entry; returns its index and value.
    fn find_gid(&self, local_ip: Option<Ipv4Addr>) -> Result<Option<(u8, [u8; 16])>> {
        let mut best: Option<(u8, [u8; 16], bool)> = None;
        for index in 0..MAX_GID_SCAN {
            // SAFETY: `ibv_gid` is a union of a byte array and two u64s: all-zero is valid.
            let mut gid: ibv_gid = unsafe { mem::zeroed() };
            // SAFETY: `self.ptr` is an open context and `gid` a writable out-parameter;
            // ibv_query_gid(3) fails (non-zero) past the end of the table, which ends the scan.
            if unsafe { ibv_query_gid(self.ptr.as_ptr(), PORT_NUM, index, &mut gid) } != 0 {
                break;
            }
            // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
            let raw = unsafe { gid.raw };
            let Some(addr) = ipv4_of_gid(&raw) else {
                continue;
            };
            if local_ip.is_some_and(|want| want != addr) {
                continue;
            }
            let v2 = self.gid_is_roce_v2(index);
            if best.is_none_or(|(_, _, best_v2)| v2 && !best_v2) {
                // `index < MAX_GID_SCAN <= 256`, so it fits in `sgid_index: u8`.
                best = Some((index as u8, raw, v2));
            }
            if v2 {
                break;
            }
        }
        Ok(best.map(|(index, raw, _)| (index, raw)))
    }

    /// Whether GID entry `index` is RoCE v2, per sysfs (false when unknown).
    fn gid_is_roce_v2(&self, index: i32) -> bool {
        let path = format!(
            "{SYSFS_IB}/{}/ports/{PORT_NUM}/gid_attrs/types/{index}",
            self.name
        );
        std::fs::read_to_string(path).is_ok_and(|t| t.trim().eq_ignore_ascii_case("RoCE v2"))
    }

    /// The device name, e.g. `rxe0` or `mlx5_0`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The GID table index used as `sgid_index` in address vectors.
    pub(crate) fn gid_index(&self) -> u8 {
        self.gid_index
    }

    /// The chosen GID (`::ffff:a.b.c.d` for RoCE on IPv4), sent to the peer as its `dgid`.
    pub(crate) fn gid(&self) -> [u8; 16] {
        self.gid
    }

    #[cfg(test)]
    /// The IPv4 address the chosen GID encodes.
    pub(crate) fn local_ip(&self) -> Option<Ipv4Addr> {
        ipv4_of_gid(&self.gid)
    }

    /// Port attributes queried at open time.
    pub(crate) fn port(&self) -> PortInfo {
        self.port
    }

    /// Outstanding RDMA READs the device accepts per QP as responder (clamped to 1..=16).
    pub(crate) fn max_qp_rd_atom(&self) -> u8 {
        self.max_qp_rd_atom
    }

    /// Outstanding RDMA READs the device issues per QP as initiator (clamped to 1..=16).
    pub(crate) fn max_qp_init_rd_atom(&self) -> u8 {
        self.max_qp_init_rd_atom
    }

    /// Entries one completion queue may have at most (`max_cqe`).
    pub(crate) fn max_cqe(&self) -> u32 {
        self.max_cqe
    }

    /// Completion vectors of the device (at least 1): CQs spread over them spread their
    /// completion interrupts.
    pub(crate) fn comp_vectors(&self) -> u32 {
        self.comp_vectors
    }

    /// The raw context, for the sibling wrappers' verbs calls.
    pub(crate) fn as_ptr(&self) -> *mut ibv_context {
        self.ptr.as_ptr()
    }
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

/// The address encoded in an IPv4-mapped GID (`::ffff:a.b.c.d`), if it is one.
fn ipv4_of_gid(raw: &[u8; 16]) -> Option<Ipv4Addr> {
    let mapped = raw[..10].iter().all(|&b| b == 0) && raw[10] == 0xff && raw[11] == 0xff;
    mapped.then(|| Ipv4Addr::new(raw[12], raw[13], raw[14], raw[15]))
}

/// The name of a device of a live device list.
fn device_name_of(dev: NonNull<ibv_device>) -> String {
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
