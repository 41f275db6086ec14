//! [`ProtectionDomain`]: the scope in which memory regions and queue pairs may be used together.

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::{ibv_alloc_pd, ibv_dealloc_pd, ibv_pd};

use super::context::Context;
use super::error::{Error, Result};
use crate::memlock::Account;

/// A protection domain (`ibv_pd`). A QP can only use memory regions of its own PD.
///
/// Invariant: `ptr` came from `ibv_alloc_pd` on `ctx` and is freed exactly once, in `Drop`;
/// memory regions and queue pairs hold an `Arc<ProtectionDomain>`, so they are gone first.
#[derive(Debug)]
pub(crate) struct ProtectionDomain {
    ptr: NonNull<ibv_pd>,
    ctx: Arc<Context>,
    /// What registrations in this PD are charged to (one connection's share of the
    /// process's locked memory).
    account: Arc<Account>,
}

// SAFETY: an `ibv_pd` is a kernel handle with no thread affinity; the verbs that take one
// (`ibv_reg_mr`, `ibv_create_qp`, `ibv_dealloc_pd`) are thread-safe in libibverbs.
unsafe impl Send for ProtectionDomain {}
// SAFETY: `&self` only hands the pointer to thread-safe verbs; nothing is mutated in Rust.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`, whose registrations charge `account`.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_alloc_pd` fails (e.g. out of resources).
    pub(crate) fn new(ctx: &Arc<Context>, account: Arc<Account>) -> Result<Self> {
        // SAFETY: `ctx.as_ptr()` is an open context kept alive by the `Arc` stored below;
        // ibv_alloc_pd(3) returns NULL + errno on failure.
        let ptr = unsafe { ibv_alloc_pd(ctx.as_ptr()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("ibv_alloc_pd"))?;
        Ok(ProtectionDomain {
            ptr,
            ctx: Arc::clone(ctx),
            account,
        })
    }

    /// What registrations in this PD are charged to.
    pub(crate) fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// The device this PD belongs to.
    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The raw PD, for the sibling wrappers' verbs calls.
    pub(crate) fn as_ptr(&self) -> *mut ibv_pd {
        self.ptr.as_ptr()
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_alloc_pd and is freed only here; MRs and QPs hold an
        // `Arc` of this PD, so none is left (ibv_dealloc_pd(3) fails with EBUSY otherwise).
        let ret = unsafe { ibv_dealloc_pd(self.ptr.as_ptr()) };
        if ret != 0 {
            tracing::error!(device = %self.ctx.name(), error = %Error::from_ret("ibv_dealloc_pd", ret), "cannot free protection domain");
        }
    }
}
