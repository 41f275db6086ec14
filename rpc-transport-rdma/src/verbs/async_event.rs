//! Asynchronous events of a device (`ibv_get_async_event(3)`): a queue pair or completion
//! queue that failed outside any work request, a port that went down or up, a device
//! that died. They arrive on the context's `async_fd`, not on a completion queue.

use std::mem::MaybeUninit;
use std::time::Duration;

use rdma_sys::{ibv_ack_async_event, ibv_async_event, ibv_event_type, ibv_get_async_event};

use super::Context;

/// One asynchronous event, copied out of the verbs structure before it was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AsyncEvent {
    /// Queue pair `qp_num` failed (`what`: fatal, request error, access error).
    QueuePair {
        /// The QP number.
        qp_num: u32,
        /// The event's name.
        what: &'static str,
    },
    /// A completion queue overflowed or failed; `cq` is its address (the address of the
    /// `ibv_cq`, as [`CompletionQueue::as_ptr`](super::CompletionQueue) gives it).
    CompletionQueue {
        /// The CQ's address.
        cq: usize,
    },
    /// Port `port` went down.
    PortDown(u8),
    /// Port `port` came up.
    PortUp(u8),
    /// The device failed; every resource on it is dead.
    DeviceFatal,
    /// Anything else (informational for this transport).
    Other(u32),
}

impl Context {
    /// Waits up to `timeout` for an asynchronous event to be readable.
    ///
    /// # Errors
    /// `poll(2)` failed.
    pub(crate) fn wait_async_event(&self, timeout: Duration) -> std::io::Result<bool> {
        // SAFETY: `as_ptr` is a live context (this `&self` keeps it open), whose
        // `async_fd` field is set by ibv_open_device and constant afterwards.
        let fd = unsafe { (*self.as_ptr()).async_fd };
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid, initialised pollfd for the duration of the call; poll(2)
        // only writes its `revents`.
        let ret = unsafe { libc::poll(&mut pollfd, 1, ms) };
        match ret {
            -1 => {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
            0 => Ok(false),
            _ => Ok(true),
        }
    }

    /// Reads one asynchronous event (blocks until there is one: call after
    /// [`Context::wait_async_event`] said it is readable) and acknowledges it.
    ///
    /// # Errors
    /// `ibv_get_async_event` failed.
    pub(crate) fn next_async_event(&self) -> std::io::Result<AsyncEvent> {
        let mut raw = MaybeUninit::<ibv_async_event>::uninit();
        // SAFETY: a live context; ibv_get_async_event(3) fills the event on success (0)
        // and returns -1 with errno otherwise.
        let ret = unsafe { ibv_get_async_event(self.as_ptr(), raw.as_mut_ptr()) };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = raw.as_mut_ptr();
        // SAFETY: the call above initialised the event. Its type is read as the C enum's
        // u32, not as the binding's Rust enum, so that a type this binding does not know
        // (a newer kernel's) is a number, not undefined behaviour.
        let kind = unsafe { std::ptr::addr_of!((*ptr).event_type).cast::<u32>().read() };
        // SAFETY: initialised above; the union is plain data (pointers and an int).
        let element = unsafe { std::ptr::addr_of!((*ptr).element).read() };
        // SAFETY: every bit pattern is a valid c_int; meaningful for port events only.
        let port = unsafe { element.port_num } as u8;
        const QP_FATAL: u32 = ibv_event_type::IBV_EVENT_QP_FATAL as u32;
        const QP_REQ_ERR: u32 = ibv_event_type::IBV_EVENT_QP_REQ_ERR as u32;
        const QP_ACCESS_ERR: u32 = ibv_event_type::IBV_EVENT_QP_ACCESS_ERR as u32;
        const CQ_ERR: u32 = ibv_event_type::IBV_EVENT_CQ_ERR as u32;
        const PORT_ERR: u32 = ibv_event_type::IBV_EVENT_PORT_ERR as u32;
        const PORT_ACTIVE: u32 = ibv_event_type::IBV_EVENT_PORT_ACTIVE as u32;
        const DEVICE_FATAL: u32 = ibv_event_type::IBV_EVENT_DEVICE_FATAL as u32;
        let event = match kind {
            QP_FATAL | QP_REQ_ERR | QP_ACCESS_ERR => {
                let what = match kind {
                    QP_FATAL => "queue pair fatal error",
                    QP_REQ_ERR => "queue pair request error",
                    _ => "queue pair access error",
                };
                // SAFETY: for QP events the union holds the QP, which stays valid until
                // the event is acknowledged (ibv_destroy_qp waits for that), and it is read
                // before the acknowledgement below.
                let qp_num = unsafe { (*element.qp).qp_num };
                AsyncEvent::QueuePair { qp_num, what }
            }
            CQ_ERR => {
                // SAFETY: for CQ events the union holds the CQ pointer; only its value is
                // used, never dereferenced.
                let cq = unsafe { element.cq } as usize;
                AsyncEvent::CompletionQueue { cq }
            }
            PORT_ERR => AsyncEvent::PortDown(port),
            PORT_ACTIVE => AsyncEvent::PortUp(port),
            DEVICE_FATAL => AsyncEvent::DeviceFatal,
            other => AsyncEvent::Other(other),
        };
        // SAFETY: the event came from ibv_get_async_event and is acknowledged exactly once
        // (ibv_ack_async_event(3)), after the last read of its contents.
        unsafe { ibv_ack_async_event(ptr) };
        Ok(event)
    }
}
