//! [`MemoryWindow`]: a type-2 memory window, the unit in which registered memory is lent
//! to one peer for one transfer.
//!
//! A window is allocated once in a protection domain and then bound, by a work request
//! on one queue pair, over (part of) an [`Access::Windowed`](super::Access::Windowed)
//! region; each bind gives it a new rkey (the key's low byte changes). A type-2 window
//! bound on a QP is usable only by that QP's peer, and only until it is invalidated
//! (`LOCAL_INV`): the stale key then fails with a remote access error. Measured on rxe
//! (shared/softroce/verbs-probes, finding 1): rxe checks a window's QP and key but only
//! its region's range, not the window's own, so the transport binds each window over a
//! whole region that holds nothing but the lent frame.

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::{ibv_alloc_mw, ibv_dealloc_mw, ibv_mw, ibv_mw_type};

use super::error::{Error, Result};
use super::pd::ProtectionDomain;

/// A type-2 memory window (`ibv_mw`), unbound or bound.
///
/// Invariant: `ptr` came from `ibv_alloc_mw(pd, IBV_MW_TYPE_2)` and is freed exactly once,
/// in `Drop`; the window holds an `Arc` of its PD, so the PD outlives it. `rkey` is the
/// key of the latest bind posted, also written to `ibv_mw::rkey` (see `set_rkey`).
#[derive(Debug)]
pub(crate) struct MemoryWindow {
    ptr: NonNull<ibv_mw>,
    rkey: u32,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: an `ibv_mw` is a kernel object with no thread affinity; `ibv_dealloc_mw` may run
// on any thread. Binds and invalidations are work requests, serialised by the QP.
unsafe impl Send for MemoryWindow {}
// SAFETY: `&self` only reads the immutable pointer and the key.
unsafe impl Sync for MemoryWindow {}

impl MemoryWindow {
    /// Allocates an unbound type-2 window in `pd`.
    ///
    /// # Errors
    /// [`Error::Verb`] if the provider has no memory windows (`EOPNOTSUPP`) or
    /// `ibv_alloc_mw` fails.
    pub(crate) fn new(pd: &Arc<ProtectionDomain>) -> Result<MemoryWindow> {
        // SAFETY: `pd` is a live PD (kept alive by the `Arc` stored below); ibv_alloc_mw(3)
        // returns NULL + errno on failure, and the wrapper returns None (errno EOPNOTSUPP)
        // for a provider without the verb.
        let ptr = unsafe { ibv_alloc_mw(pd.as_ptr(), ibv_mw_type::IBV_MW_TYPE_2) }
            .unwrap_or(std::ptr::null_mut());
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::last_os("ibv_alloc_mw"))?;
        // SAFETY: `ptr` is the live window just allocated; `rkey` is plain data.
        let rkey = unsafe { (*ptr.as_ptr()).rkey };
        Ok(MemoryWindow {
            ptr,
            rkey,
            pd: Arc::clone(pd),
        })
    }

    /// The key of the latest bind (or the initial, unbound key).
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The key the next bind gives: the same window index with the next key byte (as
    /// `ibv_inc_rkey`), so a key of an earlier bind never matches again until the byte
    /// wraps (256 binds later).
    pub(super) fn next_rkey(&self) -> u32 {
        (self.rkey & !0xff) | (self.rkey.wrapping_add(1) & 0xff)
    }

    /// Records the key of a bind that was posted, here and in the provider's `ibv_mw`:
    /// the next bind's work request names the window by that field, and the kernel (rxe)
    /// refuses a bind whose window key is not the window's current one. Providers do not
    /// update it for binds posted as work requests (the verbs probe does the same).
    pub(super) fn set_rkey(&mut self, rkey: u32) {
        self.rkey = rkey;
        // SAFETY: `ptr` is the live window (invariant) and `&mut self` makes this the only
        // access from Rust; the provider reads the field only while posting a bind, which
        // takes `&mut MemoryWindow` too.
        unsafe { (*self.ptr.as_ptr()).rkey = rkey };
    }

    /// The protection domain the window belongs to.
    pub(crate) fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The raw window, for the bind work request.
    pub(super) fn as_ptr(&self) -> *mut ibv_mw {
        self.ptr.as_ptr()
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_alloc_mw and is freed only here; a bound window may
        // be deallocated (the binding ends with it, ibv_alloc_mw(3)).
        let ret = unsafe { ibv_dealloc_mw(self.ptr.as_ptr()) };
        if ret != 0 {
            tracing::error!(error = %Error::from_ret("ibv_dealloc_mw", ret), "cannot free memory window");
        }
    }
}
