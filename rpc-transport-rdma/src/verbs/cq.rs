//! [`CompChannel`] and [`CompletionQueue`]: set-up, teardown and completion events.
//! Polling lives in `datapath.rs`.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_req_notify_cq,
};

use super::context::Context;
use super::error::{check_ret, Error, Result};

/// A completion event channel (`ibv_comp_channel`): a file descriptor that becomes readable
/// when a CQ armed with [`CompletionQueue::req_notify`] gets a completion.
///
/// The fd is non-blocking, so it can be registered with tokio's `AsyncFd` (readable
/// interest) and drained with [`CompletionQueue::get_event_and_ack`] until it reports
/// `false`.
///
/// Invariant: `ptr` came from `ibv_create_comp_channel` and is destroyed once, in `Drop`;
/// CQs using it hold an `Arc<CompChannel>`, so they are destroyed first.
#[derive(Debug)]
pub(crate) struct CompChannel {
    ptr: NonNull<ibv_comp_channel>,
    ctx: Arc<Context>,
}

// SAFETY: a completion channel is a file descriptor plus a refcount that libibverbs guards
// with the context mutex; ibv_get_cq_event(3) is a read(2) on the fd and may be called from
// any thread.
unsafe impl Send for CompChannel {}
// SAFETY: see `Send`; concurrent `ibv_get_cq_event` calls each consume distinct events.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    /// Creates a completion channel on `ctx` and makes its fd non-blocking.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_create_comp_channel` or `fcntl` fails.
    pub(crate) fn new(ctx: &Arc<Context>) -> Result<Self> {
        // SAFETY: `ctx.as_ptr()` is an open context kept alive by the `Arc` stored below;
        // ibv_create_comp_channel(3) returns NULL + errno on failure.
        let ptr = unsafe { ibv_create_comp_channel(ctx.as_ptr()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("ibv_create_comp_channel"))?;
        let channel = CompChannel {
            ptr,
            ctx: Arc::clone(ctx),
        };
        let fd = channel.as_raw_fd();
        // SAFETY: `fd` is the channel's open fd (owned by libibverbs, alive until Drop);
        // F_GETFL/F_SETFL only change its status flags, as ibv_get_cq_event(3) suggests for
        // non-blocking use.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(Error::last_os("fcntl(O_NONBLOCK)"));
        }
        Ok(channel)
    }

    /// The raw channel, for the sibling wrappers' verbs calls.
    pub(crate) fn as_ptr(&self) -> *mut ibv_comp_channel {
        self.ptr.as_ptr()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: `ptr` is a live channel (invariant); `fd` is set at creation and never
        // changed by libibverbs.
        unsafe { (*self.ptr.as_ptr()).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_create_comp_channel and is destroyed only here; CQs on
        // it hold an `Arc<CompChannel>`, so none is left (ibv_destroy_comp_channel(3) fails
        // with EBUSY otherwise).
        let ret = unsafe { ibv_destroy_comp_channel(self.ptr.as_ptr()) };
        if ret != 0 {
            tracing::error!(device = %self.ctx.name(), error = %Error::from_ret("ibv_destroy_comp_channel", ret), "cannot destroy completion channel");
        }
    }
}

/// A completion queue (`ibv_cq`), optionally reporting to a [`CompChannel`].
///
/// Invariant: `ptr` came from `ibv_create_cq` and is destroyed once, in `Drop`; QPs using
/// it hold an `Arc<CompletionQueue>`. Every event taken from the channel is acknowledged
/// at once, so `ibv_destroy_cq` never waits for unacknowledged events.
#[derive(Debug)]
pub(crate) struct CompletionQueue {
    ptr: NonNull<ibv_cq>,
    depth: u32,
    channel: Option<Arc<CompChannel>>,
    ctx: Arc<Context>,
}

// SAFETY: an `ibv_cq` has no thread affinity; ibv_poll_cq(3), ibv_req_notify_cq(3) and
// ibv_ack_cq_events(3) are thread-safe (providers take the CQ's spinlock while polling, and
// libibverbs guards the event counters with the CQ's mutex).
unsafe impl Send for CompletionQueue {}
// SAFETY: see `Send`: concurrent polls from several threads each reap distinct entries.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// Creates a CQ with room for at least `depth` completions on `ctx`, reporting to
    /// `channel` when armed, on completion vector `vector` (taken modulo the device's
    /// vectors).
    ///
    /// Size it for the worst case of every QP using it: an overflowing CQ moves all of them
    /// to the error state (see `DEFAULT_CQ_DEPTH`).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_create_cq` fails (e.g. `depth` above the device's `max_cqe`).
    pub(crate) fn new(
        ctx: &Arc<Context>,
        depth: u32,
        channel: Option<&Arc<CompChannel>>,
        vector: u32,
    ) -> Result<Self> {
        let cqe = i32::try_from(depth).map_err(|_| Error::TooLarge {
            what: "CQ depth",
            len: depth as usize,
            max: i32::MAX as usize,
        })?;
        let channel_ptr = channel.map_or(ptr::null_mut(), |c| c.as_ptr());
        // Below the device's count, which is at least 1 and fits an i32.
        let vector = (vector % ctx.comp_vectors()) as i32;
        // SAFETY: `ctx.as_ptr()` is an open context and `channel_ptr` NULL or a channel of
        // the same context, both kept alive by the `Arc`s stored below; ibv_create_cq(3)
        // returns NULL + errno on failure. No cq_context is used; `vector` is below the
        // device's `num_comp_vectors`.
        let ptr = unsafe { ibv_create_cq(ctx.as_ptr(), cqe, ptr::null_mut(), channel_ptr, vector) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("ibv_create_cq"))?;
        // SAFETY: `ptr` is a live CQ; `cqe` is set by ibv_create_cq to the actual size (>= asked).
        let actual = unsafe { (*ptr.as_ptr()).cqe };
        Ok(CompletionQueue {
            ptr,
            depth: u32::try_from(actual).unwrap_or(depth),
            channel: channel.cloned(),
            ctx: Arc::clone(ctx),
        })
    }

    /// The number of completions the CQ can hold (may exceed what was asked).
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    #[cfg(test)]
    /// The channel this CQ reports to, if any.
    pub(crate) fn channel(&self) -> Option<&Arc<CompChannel>> {
        self.channel.as_ref()
    }

    /// Arms the CQ: the next completion (or next solicited one) triggers one event on the
    /// channel. Re-arm after every event, then poll again before sleeping, or a completion
    /// that arrived in between is missed.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_req_notify_cq` fails.
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: `ptr` is a live CQ (invariant); ibv_req_notify_cq(3) is thread-safe and
        // returns an errno value on failure.
        let ret = unsafe { ibv_req_notify_cq(self.ptr.as_ptr(), i32::from(solicited_only)) };
        check_ret("ibv_req_notify_cq", ret)
    }

    /// Takes one pending event from this CQ's channel without blocking and acknowledges it.
    ///
    /// # Returns
    ///
    /// `Ok(true)` if an event was consumed, `Ok(false)` if none was pending (`EAGAIN`) or
    /// the CQ has no channel. If several CQs share the channel, the event may belong to
    /// another of them; it is acknowledged on its own CQ, and the caller should poll every
    /// CQ of the channel.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_get_cq_event` fails with anything but `EAGAIN`.
    pub(crate) fn get_event_and_ack(&self) -> Result<bool> {
        let Some(channel) = &self.channel else {
            return Ok(false);
        };
        let mut ev_cq: *mut ibv_cq = ptr::null_mut();
        let mut ev_ctx: *mut libc::c_void = ptr::null_mut();
        // SAFETY: the channel is alive (we hold an `Arc`) and its fd non-blocking, so
        // ibv_get_cq_event(3) returns -1 with errno EAGAIN instead of blocking; the two
        // out-parameters are valid for writes.
        let ret = unsafe { ibv_get_cq_event(channel.as_ptr(), &mut ev_cq, &mut ev_ctx) };
        if ret != 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock => Ok(false),
                _ => Err(Error::Verb {
                    verb: "ibv_get_cq_event",
                    source: err,
                }),
            };
        }
        // SAFETY: `ev_cq` is the CQ that produced the event, a live CQ of this channel:
        // ibv_destroy_cq(3) of it cannot complete until this event is acknowledged, which is
        // what ibv_ack_cq_events(3) requires.
        unsafe { ibv_ack_cq_events(ev_cq, 1) };
        Ok(true)
    }

    /// The raw CQ, for the sibling wrappers' verbs calls.
    pub(crate) fn as_ptr(&self) -> *mut ibv_cq {
        self.ptr.as_ptr()
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_create_cq and is destroyed only here; QPs on it hold an
        // `Arc<CompletionQueue>` (ibv_destroy_cq(3) fails with EBUSY otherwise), and every
        // event of it was acknowledged in `get_event_and_ack`.
        let ret = unsafe { ibv_destroy_cq(self.ptr.as_ptr()) };
        if ret != 0 {
            tracing::error!(device = %self.ctx.name(), error = %Error::from_ret("ibv_destroy_cq", ret), "cannot destroy completion queue");
        }
    }
}

/// Registers a completion channel with the tokio reactor, for the driver to sleep on.
///
/// # Errors
/// If the reactor refuses the descriptor.
///
/// # Panics
/// Outside a tokio runtime.
pub(crate) fn register_channel(
    channel: Arc<CompChannel>,
) -> std::io::Result<tokio::io::unix::AsyncFd<Arc<CompChannel>>> {
    // SAFETY: AsyncFd::register requires the descriptor to stay open and refer to the same
    // file for the AsyncFd's whole life. It is the channel's own fd, closed only by
    // ibv_destroy_comp_channel in CompChannel's Drop, which cannot run while the AsyncFd
    // owns this Arc; `as_raw_fd` always returns that same fd.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(channel, tokio::io::Interest::READABLE)
            .map_err(|e| e.into())
    }
}
