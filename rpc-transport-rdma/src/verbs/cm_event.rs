//! rdma_cm's event channel ([`EventChannel`]) and the kinds of its events: what the ids
//! of `cm.rs` report, acknowledged at once and copied out (`cm.rs` wraps a connect
//! request's new id).

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    rdma_ack_cm_event, rdma_cm_event, rdma_cm_event_type, rdma_cm_id, rdma_create_event_channel,
    rdma_destroy_event_channel, rdma_event_channel, rdma_event_str, rdma_get_cm_event,
};

use super::error::{Error, Result};

/// An rdma_cm event channel: the events of its ids, read by one thread at a time.
///
/// Invariant: `ptr` came from `rdma_create_event_channel` and is destroyed once, in
/// `Drop`, after every id on it (each holds an `Arc` of it).
#[derive(Debug)]
pub(crate) struct EventChannel {
    pub(super) ptr: NonNull<rdma_event_channel>,
}

// SAFETY: an event channel is a file descriptor with librdmacm's bookkeeping; librdmacm
// serialises its id lists with its own mutex, and reading events from one thread while
// ids are created or destroyed on others is what its man pages describe.
unsafe impl Send for EventChannel {}
// SAFETY: see `Send`.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    /// A new event channel, its descriptor non-blocking (events are waited for with
    /// [`EventChannel::next`]'s timeout).
    ///
    /// # Errors
    /// [`Error::Verb`] if librdmacm cannot open `/dev/infiniband/rdma_cm`.
    pub(crate) fn new() -> Result<Arc<Self>> {
        // SAFETY: rdma_create_event_channel(3) takes no arguments and returns NULL with
        // errno set on failure.
        let ptr = unsafe { rdma_create_event_channel() };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("rdma_create_event_channel"))?;
        let channel = Arc::new(EventChannel { ptr });
        let fd = channel.fd();
        // SAFETY: `fd` is the channel's open descriptor; F_GETFL/F_SETFL only change its
        // status flags.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(Error::last_os("fcntl(rdma_cm channel, O_NONBLOCK)"));
        }
        Ok(channel)
    }

    /// The channel's file descriptor (readable when an event is pending).
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: `ptr` is a live channel; `fd` is set at creation and never changes.
        unsafe { (*self.ptr.as_ptr()).fd }
    }

    /// Whether an event is pending within `timeout` (`false` also when interrupted).
    pub(super) fn readable(&self, timeout: Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(Error::Verb {
                verb: "poll(rdma_cm channel)",
                source: err,
            });
        }
        Ok(n > 0)
    }

    /// The pending event, if any, acknowledged before it is returned (its data copied
    /// out).
    ///
    /// # Errors
    /// [`Error::Verb`] if `rdma_get_cm_event` fails.
    pub(super) fn take(&self) -> Result<Option<RawEvent>> {
        let mut event: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: `ptr` is a live channel and `event` a valid out-parameter; on a
        // non-blocking channel rdma_get_cm_event(3) fails with EAGAIN when none is pending.
        if unsafe { rdma_get_cm_event(self.ptr.as_ptr(), &mut event) } != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::Verb {
                verb: "rdma_get_cm_event",
                source: err,
            });
        }
        // SAFETY: on success `event` points to an event owned by librdmacm until it is
        // acknowledged below; every field read here is plain data or a pointer copied out.
        let (kind, status, id, (id_key, listen_key), data) = unsafe {
            let e = &*event;
            let conn = &e.param.conn;
            let data = if conn.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            let key_of = |id: *mut rdma_cm_id| {
                if id.is_null() {
                    0
                } else {
                    (*id).context.addr()
                }
            };
            let keys = (key_of(e.id), key_of(e.listen_id));
            (e.event, e.status, e.id, keys, data)
        };
        // SAFETY: `event` came from rdma_get_cm_event and is acknowledged once; for a
        // connect request the new id stays ours after that (rdma_ack_cm_event(3)).
        unsafe { rdma_ack_cm_event(event) };
        Ok(Some(RawEvent {
            kind: CmEventKind::from_raw(kind),
            status,
            id: NonNull::new(id),
            id_key,
            listen_key,
            private_data: data,
        }))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from rdma_create_event_channel and is destroyed only here;
        // every id on it holds an `Arc` of it, so none is left (rdma_destroy_event_channel(3)).
        unsafe { rdma_destroy_event_channel(self.ptr.as_ptr()) };
    }
}

/// The kind of an rdma_cm event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmEventKind {
    /// `rdma_resolve_addr` found the local device.
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// `rdma_resolve_route` found the path.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A listener got a connect request (a new id comes with it).
    ConnectRequest,
    /// The client's request was answered (InfiniBand, RoCE): move the QP and establish.
    ConnectResponse,
    /// The connection is up.
    Established,
    /// The peer rejected the request.
    Rejected,
    /// No answer, or the peer is unreachable.
    Unreachable,
    /// A connection error.
    ConnectError,
    /// The connection was closed.
    Disconnected,
    /// The device went away.
    DeviceRemoval,
    /// Any other event, by its number.
    Other(u32),
}

impl CmEventKind {
    fn from_raw(raw: rdma_cm_event_type::Type) -> Self {
        use rdma_cm_event_type as t;
        match raw {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            t::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            t::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            t::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            t::RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
            t::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            t::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            t::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            t::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            t::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            t::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            other => CmEventKind::Other(other),
        }
    }
}

impl std::fmt::Display for CmEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmEventKind::Other(n) => {
                // SAFETY: rdma_event_str(3) returns a static string for any value.
                let name = unsafe { CStr::from_ptr(rdma_event_str(*n)) };
                f.write_str(&name.to_string_lossy())
            }
            known => write!(f, "{known:?}"),
        }
    }
}

/// An event as rdma_cm gave it, acknowledged, its data copied out (`CmEvent` wraps a
/// connect request's new id).
#[derive(Debug)]
pub(super) struct RawEvent {
    pub(super) kind: CmEventKind,
    pub(super) status: i32,
    /// The id the event is about (for a connect request, the new one).
    pub(super) id: Option<NonNull<rdma_cm_id>>,
    /// Its key, and the listener's for a connect request (0 for none).
    pub(super) id_key: usize,
    pub(super) listen_key: usize,
    pub(super) private_data: Vec<u8>,
}
