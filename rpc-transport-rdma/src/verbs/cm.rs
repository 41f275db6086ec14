//! rdma_cm (librdmacm): connecting queue pairs on every fabric.
//!
//! An [`EventChannel`] delivers the events of its [`CmId`]s; a `CmId` resolves an IP
//! address to a device, port and route (ARP or neighbour discovery on RoCE and iWARP,
//! IPoIB and the subnet manager's path records on InfiniBand), listens, connects,
//! accepts or rejects, carrying private data in the connect request. The queue pairs
//! themselves are created by hand on the id's device ([`CmId::context`]) and moved through
//! their states with the attributes `rdma_init_qp_attr` computes (`cm_qp.rs`: `QueuePair::cm_init`,
//! ...); on iWARP the kernel's connection manager moves the client's queue pair itself
//! (MPA), and the client sees `Established` where InfiniBand and RoCE show
//! `ConnectResponse` (measured: probes/rdma-cm/README.md).

use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    ibv_context, ibv_qp_attr, ibv_qp_state, rdma_accept, rdma_bind_addr, rdma_cm_id,
    rdma_conn_param, rdma_connect, rdma_create_id, rdma_destroy_id, rdma_disconnect,
    rdma_establish, rdma_get_src_port, rdma_init_qp_attr, rdma_listen, rdma_port_space,
    rdma_reject, rdma_resolve_addr, rdma_resolve_route,
};

use super::cm_event::{CmEventKind, EventChannel};
use super::context::Context;
use super::error::{check_ret, Error, Result};
use super::qp::RNR_RETRY;

/// Private data of a connect request at most: what every fabric carries (InfiniBand's
/// REQ holds 92 bytes, iWARP's MPA request 512 less rdma_cm's own header; RoCE pads to
/// 56). rdma_cm's own limit on InfiniBand and RoCE is 56.
pub(crate) const MAX_PRIVATE_DATA: usize = 56;

/// The device name, port and source GID an id is bound to ([`CmId::binding`]).
pub(crate) type Binding = (String, u8, [u8; 16]);

/// One rdma_cm event, acknowledged, its data copied out.
#[derive(Debug)]
pub(crate) struct CmEvent {
    /// What happened.
    pub(crate) kind: CmEventKind,
    /// The event's status (an errno, negative, or a fabric's reject reason).
    pub(crate) status: i32,
    /// The id it is about, by key ([`CmId::key`]); for a connect request, the
    /// listener's.
    pub(crate) id: usize,
    /// For a connect request: the new connection's id, to accept or reject.
    pub(crate) request: Option<CmId>,
    /// The private data of a connect request, response or reject.
    pub(crate) private_data: Vec<u8>,
}

impl EventChannel {
    /// The next event, waiting at most `timeout`; `None` when none came in time. The
    /// event is acknowledged before it is returned (its data copied out); a connect
    /// request's new id is handed over as a [`CmId`] with a key of its own.
    ///
    /// # Errors
    /// [`Error::Verb`] if polling or `rdma_get_cm_event` fails.
    pub(crate) fn next(self: &Arc<Self>, timeout: Duration) -> Result<Option<CmEvent>> {
        if !self.readable(timeout)? {
            return Ok(None);
        }
        let Some(raw) = self.take()? else {
            return Ok(None);
        };
        let request = match (raw.kind, raw.id) {
            (CmEventKind::ConnectRequest, Some(new)) => Some(CmId::requested(new, self.clone())),
            _ => None,
        };
        Ok(Some(CmEvent {
            kind: raw.kind,
            status: raw.status,
            id: if request.is_some() {
                raw.listen_key
            } else {
                raw.id_key
            },
            request,
            private_data: raw.private_data,
        }))
    }
}

/// What a connect or accept asks of the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnParam<'a> {
    /// Private data (at most [`MAX_PRIVATE_DATA`] bytes).
    pub(crate) private_data: &'a [u8],
    /// The local queue pair.
    pub(crate) qp_num: u32,
    /// RDMA READs the peer may have in flight against this side.
    pub(crate) responder_resources: u8,
    /// RDMA READs this side may have in flight.
    pub(crate) initiator_depth: u8,
    /// Transport retries (0..=7).
    pub(crate) retry_count: u8,
}

/// An rdma_cm identifier (`rdma_cm_id`), the handle of one listener or connection.
///
/// Invariant: `ptr` is destroyed once, in `Drop`, before its channel (held by `Arc`);
/// queue pairs created on its device are destroyed by their owners before it is (they
/// hold an `Arc<Context>` of the device, which librdmacm keeps open for the process).
#[derive(Debug)]
pub(crate) struct CmId {
    ptr: NonNull<rdma_cm_id>,
    /// Held, never read: the channel must outlive its ids (rdma_destroy_event_channel(3)).
    #[allow(dead_code, reason = "held for the destruction order, never read")]
    channel: Arc<EventChannel>,
}

// SAFETY: an id has no thread affinity: librdmacm's calls may be made from any thread.
// Not `Sync`: reading an event for an id (`rdma_get_cm_event`, wherever the channel is
// read) writes its device, port and route fields, which `context` reads; see there.
unsafe impl Send for CmId {}

/// A new id's key ([`CmId::key`]), carried in its `context` field, which librdmacm
/// hands back in events and never reads.
fn new_key() -> *mut libc::c_void {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    ptr::without_provenance_mut(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A socket address as the C `sockaddr_storage` rdma_cm takes; an IPv4-mapped IPv6
/// address (what a dual-stack socket reports) as IPv4, which the kernel routes.
fn sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is plain C data: all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let addr = match addr {
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => {
            SocketAddr::new(a.ip().to_canonical(), a.port())
        }
        other => other,
    };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: `sockaddr_storage` is large and aligned enough for `sockaddr_in`.
            let sin = unsafe { &mut *ptr::addr_of_mut!(ss).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for `sockaddr_in6`.
            let sin6 = unsafe { &mut *ptr::addr_of_mut!(ss).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
        }
    }
    ss
}

impl CmId {
    /// The new id of a connect request on `channel`, given a key of its own.
    fn requested(ptr: NonNull<rdma_cm_id>, channel: Arc<EventChannel>) -> Self {
        // SAFETY: the request's new id is this process's alone from here; `context` is an
        // opaque field librdmacm copied from the listener and never reads, which only
        // this id's owner reads after this (`key`).
        unsafe { (*ptr.as_ptr()).context = new_key() };
        CmId { ptr, channel }
    }

    /// A new id on `channel` for reliable connections (`RDMA_PS_TCP`).
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_create_id` fails.
    pub(crate) fn new(channel: &Arc<EventChannel>) -> Result<Self> {
        let mut id: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: `channel` is live and `id` a valid out-parameter; rdma_create_id(3)
        // returns non-zero with errno set on failure.
        let ret = unsafe {
            rdma_create_id(
                channel.ptr.as_ptr(),
                &mut id,
                new_key(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if ret != 0 {
            return Err(Error::last_os("rdma_create_id"));
        }
        let ptr = NonNull::new(id).ok_or_else(|| Error::last_os("rdma_create_id"))?;
        Ok(CmId {
            ptr,
            channel: channel.clone(),
        })
    }

    /// The id's key, as events name it ([`CmEvent::id`]): a number of this process's
    /// own, never reused (an id's address may be a destroyed one's, whose last event may
    /// not have been dispatched yet).
    pub(crate) fn key(&self) -> usize {
        // SAFETY: `ptr` is a live id; `context` was set when it was created (or handed
        // over on a connect request) and is never written again.
        unsafe { (*self.ptr.as_ptr()).context.addr() }
    }

    /// Binds to `addr` (port 0: any free port) and listens.
    ///
    /// # Errors
    /// [`Error::Verb`] if binding (e.g. no RDMA device has the address) or listening fails.
    pub(crate) fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<()> {
        self.bind(addr)?;
        // SAFETY: `ptr` is a live, bound id.
        if unsafe { rdma_listen(self.ptr.as_ptr(), backlog) } != 0 {
            return Err(Error::last_os("rdma_listen"));
        }
        Ok(())
    }

    /// Binds to `addr` (port 0: any free port): fails when no RDMA device holds the
    /// address (`ENODEV`, `EADDRNOTAVAIL`), which tells a client before it offers RDMA.
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_bind_addr` fails.
    pub(crate) fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut ss = sockaddr(addr);
        // SAFETY: `ptr` is a live id; `ss` is a valid socket address for the call.
        let ret = unsafe { rdma_bind_addr(self.ptr.as_ptr(), ptr::addr_of_mut!(ss).cast()) };
        if ret != 0 {
            return Err(Error::last_os("rdma_bind_addr"));
        }
        Ok(())
    }

    /// The device name, port and source GID the id is bound to (after binding, address
    /// resolution or on a connect request): what names its [`CmId::context`] in a cache.
    ///
    /// # Errors
    /// [`Error::Unsupported`] before the id has a device.
    pub(crate) fn binding(&self) -> Result<Binding> {
        let (verbs, port, sgid) = self.bound()?;
        // SAFETY: a live id's context has its `device` set at open, never changed; the
        // device lives in libibverbs' list while any context of it is open.
        let dev = NonNull::new(unsafe { (*verbs.as_ptr()).device }).ok_or(Error::Unsupported {
            what: "an rdma_cm id without a device",
        })?;
        Ok((super::context::device_name_of(dev), port, sgid))
    }

    /// The device context, port and source GID rdma_cm bound the id to.
    fn bound(&self) -> Result<(NonNull<ibv_context>, u8, [u8; 16])> {
        // SAFETY: `ptr` is a live id. librdmacm writes `verbs`, `port_num` and the route
        // only while reading an event that answers a request on the id (address or route
        // resolved, a connect request or response); the owner reads them after it got
        // the event that set them and before its next request, so no such write runs
        // meanwhile (the events that come unasked, a disconnect or a device's removal,
        // write none of these fields; `CmId` is not `Sync`).
        let (verbs, port, sgid) = unsafe {
            let id = &*self.ptr.as_ptr();
            (id.verbs, id.port_num, id.route.addr.addr.ibaddr.sgid.raw)
        };
        let verbs = NonNull::new(verbs).ok_or(Error::Unsupported {
            what: "an rdma_cm id without a device",
        })?;
        Ok((verbs, port, sgid))
    }

    /// The other side's IP address (on a connect request: where it came from), as
    /// rdma_cm's route holds it; `None` before the id has one.
    pub(crate) fn peer_ip(&self) -> Option<IpAddr> {
        // SAFETY: as in `bound`: the route is read between the event that set it and the
        // owner's next request. The pointer is taken to the whole destination union (a
        // `sockaddr_storage`), not through a `&sockaddr`, so reading an IPv6 address
        // stays within what it points to.
        let sa: *const libc::sockaddr =
            unsafe { ptr::addr_of!((*self.ptr.as_ptr()).route.addr.dst_addr_union).cast() };
        // SAFETY: `sa` points to that union, whose family field says which address it
        // holds; each arm reads no more than that address's type.
        unsafe {
            match i32::from((*sa).sa_family) {
                libc::AF_INET => {
                    let sin = &*sa.cast::<libc::sockaddr_in>();
                    Some(IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()))
                }
                libc::AF_INET6 => {
                    let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                    Some(IpAddr::from(sin6.sin6_addr.s6_addr).to_canonical())
                }
                _ => None,
            }
        }
    }

    /// The local port (after [`CmId::listen`], the one chosen for port 0).
    pub(crate) fn local_port(&self) -> u16 {
        // SAFETY: `ptr` is a live id; rdma_get_src_port(3) reads its bound address.
        u16::from_be(unsafe { rdma_get_src_port(self.ptr.as_ptr()) })
    }

    /// Starts resolving `dst` from `src` (the local address, with its scope for a
    /// link-local IPv6 one, as the side channel's socket reports it; or any): an
    /// `AddrResolved` or `AddrError` event follows within `timeout`.
    ///
    /// # Errors
    /// [`Error::Verb`] if the request cannot be made.
    pub(crate) fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let mut src = src.map(|mut a| {
            a.set_port(0);
            sockaddr(a)
        });
        let src_ptr = src
            .as_mut()
            .map_or(ptr::null_mut(), |s| ptr::addr_of_mut!(*s).cast());
        let mut dst = sockaddr(dst);
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `ptr` is a live id; both addresses are valid (or NULL for src) during
        // the call, which copies them.
        let ret = unsafe {
            rdma_resolve_addr(
                self.ptr.as_ptr(),
                src_ptr,
                ptr::addr_of_mut!(dst).cast(),
                ms,
            )
        };
        if ret != 0 {
            return Err(Error::last_os("rdma_resolve_addr"));
        }
        Ok(())
    }

    /// Starts resolving the route to the resolved address: a `RouteResolved` or
    /// `RouteError` event follows within `timeout`.
    ///
    /// # Errors
    /// [`Error::Verb`] if the request cannot be made.
    pub(crate) fn resolve_route(&self, timeout: Duration) -> Result<()> {
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `ptr` is a live id whose address was resolved.
        check_ret("rdma_resolve_route", unsafe {
            rdma_resolve_route(self.ptr.as_ptr(), ms)
        })
    }

    /// A context of its own (`Context::for_cm`) on the device and port the id is bound
    /// to (after address resolution, or on a connect request), with the GID its route
    /// starts from.
    ///
    /// # Errors
    /// [`Error::Unsupported`] before the id has a device; [`Error::NoPath`] or
    /// [`Error::Verb`] when the device cannot be opened or its port read.
    pub(crate) fn context(&self) -> Result<Context> {
        let (verbs, port, sgid) = self.bound()?;
        Context::for_cm(verbs, port, sgid)
    }

    /// Sends a connect request (the client).
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_connect` fails.
    pub(crate) fn connect(&self, param: &ConnParam<'_>) -> Result<()> {
        let mut raw = conn_param(param)?;
        // SAFETY: `ptr` is a live id with a resolved route; `raw` and the private data it
        // points to are valid during the call, which copies them.
        check_ret("rdma_connect", unsafe {
            rdma_connect(self.ptr.as_ptr(), &mut raw)
        })
    }

    /// Accepts a connect request (the server), whose queue pair is ready to receive.
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_accept` fails.
    pub(crate) fn accept(&self, param: &ConnParam<'_>) -> Result<()> {
        let mut raw = conn_param(param)?;
        // SAFETY: as in `connect`, on a connect request's id.
        check_ret("rdma_accept", unsafe {
            rdma_accept(self.ptr.as_ptr(), &mut raw)
        })
    }

    /// Rejects a connect request, with `data` (at most [`MAX_PRIVATE_DATA`] bytes) for
    /// the client.
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_reject` fails.
    pub(crate) fn reject(&self, data: &[u8]) -> Result<()> {
        let len = private_len(data)?;
        // SAFETY: `ptr` is a connect request's id; `data` is valid for `len` bytes.
        check_ret("rdma_reject", unsafe {
            rdma_reject(self.ptr.as_ptr(), data.as_ptr().cast(), len)
        })
    }

    /// Completes the client's side once its queue pair is in RTS (after a
    /// `ConnectResponse`).
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_establish` fails.
    pub(crate) fn establish(&self) -> Result<()> {
        // SAFETY: `ptr` is a live, connecting id.
        check_ret("rdma_establish", unsafe {
            rdma_establish(self.ptr.as_ptr())
        })
    }

    /// Closes the connection (the peer sees `Disconnected`); errors are only logged: the
    /// id is dropped next anyway.
    pub(crate) fn disconnect(&self) {
        // SAFETY: `ptr` is a live id.
        let ret = unsafe { rdma_disconnect(self.ptr.as_ptr()) };
        if ret != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "rdma_disconnect");
        }
    }

    /// The QP attributes rdma_cm computes for moving a queue pair to `state`, and their
    /// mask (`cm_qp.rs`).
    pub(super) fn qp_attr(&self, state: ibv_qp_state::Type) -> Result<(ibv_qp_attr, i32)> {
        // SAFETY: `ibv_qp_attr` is plain C data: all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = state;
        let mut mask = 0;
        // SAFETY: `ptr` is a live id; both out-parameters are valid for writes.
        let ret = unsafe { rdma_init_qp_attr(self.ptr.as_ptr(), &mut attr, &mut mask) };
        if ret != 0 {
            return Err(Error::last_os("rdma_init_qp_attr"));
        }
        Ok((attr, mask))
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from rdma_create_id (or a connect request) and is destroyed
        // only here; its events were acknowledged when read (`EventChannel::next`).
        if unsafe { rdma_destroy_id(self.ptr.as_ptr()) } != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "rdma_destroy_id");
        }
    }
}

/// The length of private data, at most [`MAX_PRIVATE_DATA`].
fn private_len(data: &[u8]) -> Result<u8> {
    if data.len() > MAX_PRIVATE_DATA {
        return Err(Error::TooLarge {
            what: "rdma_cm private data",
            len: data.len(),
            max: MAX_PRIVATE_DATA,
        });
    }
    Ok(data.len() as u8)
}

fn conn_param(p: &ConnParam<'_>) -> Result<rdma_conn_param> {
    let len = private_len(p.private_data)?;
    Ok(rdma_conn_param {
        private_data: if len == 0 {
            ptr::null()
        } else {
            p.private_data.as_ptr().cast()
        },
        private_data_len: len,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: 0,
        retry_count: p.retry_count.min(7),
        // Credits guarantee a posted RECV for every SEND: an RNR NAK is a bug (qp.rs).
        rnr_retry_count: RNR_RETRY,
        srq: 0,
        qp_num: p.qp_num,
    })
}
