//! [`MemoryRegion`]: an owned, page-aligned buffer registered once with the NIC.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::slice;
use std::sync::Arc;

use rdma_sys::{ibv_access_flags, ibv_dereg_mr, ibv_mr, ibv_reg_mr, ibv_reg_mr_iova2};

use super::error::{check_ret, Error, Result};
use super::pd::ProtectionDomain;

/// Minimum alignment of every registered allocation; the actual one is the page size when
/// larger, so that registrations never share a page with unrelated heap data (pinning and
/// fork's copy-on-write work per page).
const MR_ALIGN: usize = 4096;

const _: () = assert!(MR_ALIGN.is_power_of_two());

/// Which remote access a [`MemoryRegion`] grants. Local write access is always granted
/// (RECVs and READ targets need it); remote access only to what the transport hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Access {
    /// Local access only: send and receive rings (on iWARP also remote write, which READ
    /// sinks need there and the queue pairs refuse to the peer).
    Local,
    /// Also readable by the peer with RDMA READ given the MR's rkey (whole region, any
    /// QP of the protection domain): for tests and probes only; the transport lends
    /// through memory windows ([`Access::Lendable`]).
    RemoteRead,
    /// Readable by the peer with RDMA READ given the rkey, addressed from 0 (registered
    /// with IOVA 0: a peer is told offsets, never heap addresses). Rendezvous source
    /// buffers, registered in their connection's own protection domain, so only that
    /// connection's QP can use the key; also READ sinks, and on iWARP remote-writable as
    /// iWARP's READ responses need (the QP lets no peer WRITE in).
    Lendable,
    /// No remote access of its own (its rkey is useless to a peer), but memory windows
    /// may be bound over it (`IBV_ACCESS_MW_BIND`); addressed from 0 like
    /// [`Access::Lendable`]. For lending per transfer through windows (`mw.rs`); used by
    /// the verbs tests only, until lending moves to windows.
    #[cfg(test)]
    Windowed,
}

/// An owned, zero-initialised, page-aligned allocation of `len` bytes, registered with
/// `IBV_ACCESS_LOCAL_WRITE` (plus `IBV_ACCESS_REMOTE_READ` for [`Access::RemoteRead`]).
///
/// ```text
///   addr()                                             addr() + len()
///   |<------------------------- len bytes ------------------------->|
///   [ slot 0 | slot 1 | ...                                          ]
///     ^ the caller carves it into ranges by offset; a range that is part of a posted work
///       request belongs to the NIC until its completion is reaped.
/// ```
///
/// # Aliasing
///
/// The NIC reads and writes this memory behind the compiler's back. The safe accessors
/// (`slice`, `slice_mut`, `as_slice`, `as_mut_slice`, `read_at`, `write_at`) create
/// ordinary Rust references; they are sound because every posting method that hands a
/// range to the NIC is an `unsafe fn` whose caller promises not to touch that range
/// (through these accessors or otherwise) until its completion is reaped. Mutation needs
/// `&mut self`; concurrent writers to disjoint ranges of a shared region go through the
/// `unsafe` [`MemoryRegion::range_mut_unchecked`].
///
/// Invariant: `mr` came from `ibv_reg_mr` over exactly `buf[..layout.size()]`; the region is
/// deregistered in `Drop` before the allocation is freed, and it holds an
/// `Arc<ProtectionDomain>`, so the PD outlives it.
#[derive(Debug)]
pub(crate) struct MemoryRegion {
    mr: NonNull<ibv_mr>,
    buf: NonNull<u8>,
    /// The layout `buf` was allocated with: its size is the region's length; page-aligned.
    layout: Layout,
    access: Access,
    pd: Arc<ProtectionDomain>,
    /// The pinned pages charged to the PD's account; `None` once leaked with the region.
    charge: Option<crate::memlock::Charge>,
}

// SAFETY: the registration (`ibv_mr`) is a kernel object with no thread affinity, and
// `ibv_dereg_mr` may run on any thread. The buffer is owned like a `Box<[u8]>`.
unsafe impl Send for MemoryRegion {}
// SAFETY: `&self` only gives shared (`&[u8]`) access to the bytes and reads immutable keys;
// mutation needs `&mut self` or the unsafe `range_mut_unchecked`, whose caller guarantees
// exclusivity. Concurrency with the NIC is governed by the posting methods' contracts.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Allocates `len` zeroed, page-aligned bytes and registers them in `pd`.
    ///
    /// Registration pins the pages, which is slow (hundreds of µs per MiB) and counts
    /// against `RLIMIT_MEMLOCK` for unprivileged processes (8 MiB by default): do it once at
    /// start-up, in pools, never per call.
    ///
    /// # Errors
    ///
    /// [`Error::TooLarge`] for `len == 0` or a length that cannot be laid out,
    /// [`Error::Alloc`] if the memory cannot be allocated,
    /// [`Error::Memlock`] if the PD's account cannot take the pages (the process's
    /// locked-memory limit), [`Error::Verb`] if `ibv_reg_mr` fails (`ENOMEM`/`EPERM`:
    /// a limit the account did not know of).
    pub(crate) fn new(pd: &Arc<ProtectionDomain>, len: usize, access: Access) -> Result<Self> {
        let layout = Layout::from_size_align(len, page_size().max(MR_ALIGN))
            .ok()
            .filter(|_| len > 0)
            .ok_or(Error::TooLarge {
                what: "memory region",
                len,
                max: isize::MAX as usize,
            })?;
        // The kernel pins whole pages: charged before it is asked, so that a registration
        // over the process's limit is refused by name instead of by ENOMEM.
        let charge = pd
            .account()
            .charge(len.next_multiple_of(layout.align()))
            .map_err(|e| Error::Memlock(Box::new(e)))?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let buf = unsafe { alloc::alloc_zeroed(layout) };
        // A failed allocation is an error of this call or connection, never an abort of
        // the process (a peer's large message must not take the server down).
        let Some(buf) = NonNull::new(buf) else {
            return Err(Error::Alloc { len });
        };
        let mut flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
        let mr = match access {
            Access::Local | Access::RemoteRead => {
                if access == Access::RemoteRead {
                    flags |= ibv_access_flags::IBV_ACCESS_REMOTE_READ;
                }
                if pd.context().is_iwarp() {
                    // Send slots are READ sinks too (a bounced READ, `tracker/bounce.rs`),
                    // and iWARP delivers a READ's response as a tagged write into the sink
                    // (RFC 5040). The queue pairs allow the peer no WRITE.
                    flags |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
                }
                // SAFETY: `pd` is a live PD (kept alive by the `Arc` stored below) and
                // `buf[..len]` is a live allocation that is freed only after ibv_dereg_mr
                // (see Drop); ibv_reg_mr(3) returns NULL + errno on failure. The flag bits
                // fit in an i32.
                unsafe { ibv_reg_mr(pd.as_ptr(), buf.as_ptr().cast(), len, flags.0 as i32) }
            }
            Access::Lendable => {
                flags |= ibv_access_flags::IBV_ACCESS_REMOTE_READ;
                let iova = if pd.context().is_iwarp() {
                    // iWARP delivers a READ's response as a tagged write into the sink
                    // (RFC 5040): the sink must be remote-writable. The queue pairs allow
                    // the peer READs only, so no peer WRITE reaches it.
                    flags |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
                    buf.as_ptr() as u64 // see `nic_addr`
                } else {
                    0
                };
                // SAFETY: as above; ibv_reg_mr_iova2(3) registers the same memory with the
                // NIC-visible base address `iova` (every SGE and loan then uses it).
                unsafe { ibv_reg_mr_iova2(pd.as_ptr(), buf.as_ptr().cast(), len, iova, flags.0) }
            }
            #[cfg(test)]
            Access::Windowed => {
                flags |= ibv_access_flags::IBV_ACCESS_MW_BIND;
                // SAFETY: as for `Access::Lendable`.
                unsafe { ibv_reg_mr_iova2(pd.as_ptr(), buf.as_ptr().cast(), len, 0, flags.0) }
            }
        };
        let Some(mr) = NonNull::new(mr) else {
            let err = Error::last_os("ibv_reg_mr");
            // SAFETY: `buf` was allocated above with `layout` and is not registered.
            unsafe { alloc::dealloc(buf.as_ptr(), layout) };
            return Err(err);
        };
        Ok(MemoryRegion {
            mr,
            buf,
            layout,
            access,
            pd: Arc::clone(pd),
            charge: Some(charge),
        })
    }

    /// Start address of the buffer, as the NIC sees it (the `addr` of an SGE or of a
    /// remote READ descriptor).
    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// The address of byte 0 as the NIC knows it: what SGEs, window binds and loans use.
    /// The CPU address ([`MemoryRegion::addr`]), except for [`Access::Lendable`] and
    /// [`Access::Windowed`] regions, registered with IOVA 0 so that a peer is told
    /// offsets, never heap addresses. Not on iWARP: Soft-iWARP (Linux 6.1,
    /// `siw_reg_user_mr`) ignores the IOVA and bases a region's key at its CPU address,
    /// and no verbs attribute says which iWARP devices honour it; there lendable regions
    /// keep their CPU address, which the peer then learns.
    pub(crate) fn nic_addr(&self) -> u64 {
        match self.access {
            Access::Lendable if self.pd.context().is_iwarp() => self.addr(),
            Access::Lendable => 0,
            #[cfg(test)]
            Access::Windowed => 0,
            Access::Local | Access::RemoteRead => self.addr(),
        }
    }

    #[cfg(test)]
    /// The raw registration, for the sibling wrappers' verbs calls (window binds).
    pub(super) fn as_ptr(&self) -> *mut ibv_mr {
        self.mr.as_ptr()
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// The local key, for SGEs of work requests posted on QPs of the same PD.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: `mr` is live (invariant) and its keys never change after registration.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// The remote key: it grants remote reads only for [`Access::RemoteRead`] and
    /// [`Access::Lendable`] regions, to QPs of the region's protection domain.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as in `lkey`.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    /// The access this region was registered with.
    pub(crate) fn access(&self) -> Access {
        self.access
    }

    /// The protection domain the region is registered in.
    pub(crate) fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// Checks that `offset..offset + len` lies inside the region.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] if it does not.
    pub(crate) fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.layout.size() => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                region_len: self.layout.size(),
            }),
        }
    }

    /// The bytes `offset..offset + len`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] if the range is not inside the region.
    pub(crate) fn slice(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.check_range(offset, len)?;
        // SAFETY: the range is inside the allocation (checked) and initialised (zeroed at
        // allocation, then only written as bytes); no `&mut` to it can exist while `&self`
        // is borrowed, except through `range_mut_unchecked`, whose caller excludes overlap.
        Ok(unsafe { slice::from_raw_parts(self.buf.as_ptr().add(offset), len) })
    }

    /// The bytes `offset..offset + len`, mutably.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] if the range is not inside the region.
    #[cfg(any(test, feature = "unstable-test-peer"))]
    pub(crate) fn slice_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8]> {
        self.check_range(offset, len)?;
        // SAFETY: as in `slice`, and `&mut self` makes this the only reference.
        Ok(unsafe { slice::from_raw_parts_mut(self.buf.as_ptr().add(offset), len) })
    }

    /// The whole buffer.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: as in `slice`, for the whole allocation.
        unsafe { slice::from_raw_parts(self.buf.as_ptr(), self.layout.size()) }
    }

    /// The whole buffer, mutably.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `slice_mut`, for the whole allocation.
        unsafe { slice::from_raw_parts_mut(self.buf.as_ptr(), self.layout.size()) }
    }

    #[cfg(test)]
    /// Copies `src` into the region starting at `offset`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] if the range is not inside the region.
    pub(crate) fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.slice_mut(offset, src.len())?.copy_from_slice(src);
        Ok(())
    }

    /// The bytes `offset..offset + len`, mutably, through a shared reference: for rings
    /// whose disjoint slots are filled concurrently.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] if the range is not inside the region.
    ///
    /// # Safety
    ///
    /// For as long as the returned slice lives, no other reference to any byte of the range
    /// may exist or be created (no overlapping `range_mut_unchecked`, `slice`, `as_slice`,
    /// `read_at`, ...), and no posted work request may cover the range.
    #[allow(clippy::mut_from_ref)] // exclusivity is the caller's documented obligation
    pub(crate) unsafe fn range_mut_unchecked(
        &self,
        offset: usize,
        len: usize,
    ) -> Result<&mut [u8]> {
        self.check_range(offset, len)?;
        // SAFETY: in bounds (checked) and initialised; exclusivity is the caller's contract.
        Ok(unsafe { slice::from_raw_parts_mut(self.buf.as_ptr().add(offset), len) })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: `mr` came from ibv_reg_mr and is deregistered only here; once
        // ibv_dereg_mr(3) returns, the NIC no longer translates addresses of the buffer.
        let ret = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if let Err(error) = check_ret("ibv_dereg_mr", ret) {
            // The NIC may still be able to reach the pages: leak them rather than hand them
            // back to the allocator.
            tracing::error!(%error, len = self.layout.size(), "cannot deregister memory region; leaking it");
            // Its pages stay pinned: so does their charge.
            if let Some(charge) = self.charge.take() {
                charge.leak();
            }
            return;
        }
        // SAFETY: `buf` was allocated in `new` with this very layout and is freed only here,
        // after the registration is gone.
        unsafe { alloc::dealloc(self.buf.as_ptr(), self.layout) };
    }
}

/// The system page size (4 KiB when it cannot be determined).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf(3) only reads a system constant; it returns -1 for unknown names.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(MR_ALIGN)
}
