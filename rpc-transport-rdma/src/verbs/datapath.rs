//! The hot path: posting work requests on a [`QueuePair`] and polling a
//! [`CompletionQueue`]. No allocation, no locks of ours, one verbs call each.
//!
//! Every method that hands registered memory to the NIC is an `unsafe fn`: bounds, key,
//! protection domain and length are checked here, and the one obligation left to the
//! caller is the hand-over rule of CONTRIBUTING.md rule 6: the range belongs to the NIC until the
//! completion of its work request is reaped (or the QP is destroyed after being flushed).

use std::mem;
use std::ptr;
use std::sync::Arc;

#[cfg(test)]
use rdma_sys::{bind_mw_t, ibv_access_flags, ibv_mw_bind_info};
use rdma_sys::{
    ibv_poll_cq, ibv_post_recv, ibv_post_send, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge,
    ibv_wc, ibv_wr_opcode, rdma_t,
};

use super::cq::CompletionQueue;
use super::error::{Error, Result};
#[cfg(test)]
use super::mr::Access;
use super::mr::MemoryRegion;
#[cfg(test)]
use super::mw::MemoryWindow;
use super::qp::QueuePair;
use super::qp_state::{QpStage, RecvReady, Rts};
use super::wc::{Completion, WrId};

/// Receive work requests chained into one `ibv_post_recv` call by
/// [`QueuePair::post_recv_batch`] (one doorbell per batch instead of per buffer).
pub(crate) const MAX_RECV_BATCH: usize = 32;

/// How a SEND is posted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SendOptions {
    /// Produce a completion for this SEND. Unsignaled sends complete silently, but the send
    /// queue only frees their slots when a later signaled one completes: signal at least
    /// every `max_send_wr`-th send.
    pub(crate) signaled: bool,
    /// Copy the payload into the WQE at post time (`IBV_SEND_INLINE`); only up to
    /// [`QueuePair::max_inline`] bytes. The buffer is free again as soon as the call returns.
    pub(crate) inline: bool,
    /// 32 bits of immediate data delivered with the RECV completion (`SEND_WITH_IMM`),
    /// e.g. piggybacked credits.
    pub(crate) imm: Option<u32>,
}

/// A buffer of the peer that this side may RDMA READ: what a rendezvous descriptor carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteBuf {
    /// Start address in the peer's address space.
    pub(crate) addr: u64,
    /// The peer's rkey for the region holding it.
    pub(crate) rkey: u32,
}

/// A work-completion array for [`CompletionQueue::poll`], zero-initialised.
pub(crate) fn wc_buffer(len: usize) -> Box<[ibv_wc]> {
    (0..len)
        // SAFETY: `ibv_wc` is plain C data (integers and a union of two u32s): all-zero is
        // a valid value.
        .map(|_| unsafe { mem::zeroed::<ibv_wc>() })
        .collect()
}

impl CompletionQueue {
    /// Reaps up to `wcs.len()` completions into `wcs`, without blocking.
    ///
    /// # Returns
    ///
    /// How many entries of `wcs` were filled (0 if the CQ is empty). Convert them with
    /// `Completion::from(&wcs[i])`.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_poll_cq` reports a failure (a negative return; the CQ is
    /// then unusable).
    pub(crate) fn poll(&self, wcs: &mut [ibv_wc]) -> Result<usize> {
        let n = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: the CQ is live (invariant of `CompletionQueue`) and `wcs` is writable for
        // `n <= wcs.len()` entries; ibv_poll_cq(3) writes at most `n` and returns how many,
        // or a negative value on error. It is thread-safe (the provider locks the CQ).
        let ret = unsafe { ibv_poll_cq(self.as_ptr(), n, wcs.as_mut_ptr()) };
        usize::try_from(ret).map_err(|_| Error::Verb {
            verb: "ibv_poll_cq",
            source: std::io::Error::from_raw_os_error(ret.saturating_neg()),
        })
    }

    /// Reaps up to `wcs.len()` completions and appends them to `out` as [`Completion`]s.
    ///
    /// # Returns
    ///
    /// How many completions were appended.
    ///
    /// # Errors
    ///
    /// As [`CompletionQueue::poll`].
    pub(crate) fn poll_into(&self, wcs: &mut [ibv_wc], out: &mut Vec<Completion>) -> Result<usize> {
        let n = self.poll(wcs)?;
        out.extend(wcs[..n].iter().map(Completion::from));
        Ok(n)
    }
}

/// The failure of a batched post: the first `posted` work requests were posted (and their
/// buffers now belong to the NIC), the rest were not.
#[derive(Debug, thiserror::Error)]
#[error("posted {posted} of a batch: {source}")]
pub(crate) struct BatchError {
    /// Work requests of the batch that were posted before the failure.
    pub(crate) posted: usize,
    /// Why the next one was refused.
    #[source]
    pub(crate) source: Error,
}

impl<S: RecvReady> QueuePair<S> {
    /// Posts one RECV of `mr[offset..offset + len]`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignRegion`] (MR of another PD),
    /// [`Error::TooLarge`] (len > u32::MAX), or [`Error::Verb`] from `ibv_post_recv`
    /// (e.g. `ENOMEM`: the receive queue is full). On error nothing was posted.
    ///
    /// # Safety
    ///
    /// Until the completion with `wr_id` is reaped from the receive CQ (or the QP has been
    /// destroyed), `mr` must not be dropped and the CPU must neither read nor write the
    /// range (the NIC writes into it at any time): keep the region and the range owned by
    /// the completion tracker, keyed by `wr_id`.
    pub(crate) unsafe fn post_recv(
        &self,
        wr_id: WrId,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract is exactly `post_recv_batch`'s, for a batch of one.
        unsafe { self.post_recv_batch(mr, &[(wr_id, offset, len)]) }.map_err(|e| e.source)
    }

    /// Posts one RECV per `(wr_id, offset, len)` of `recvs`, all in `mr`, chaining up to
    /// [`MAX_RECV_BATCH`] per `ibv_post_recv` call.
    ///
    /// # Errors
    ///
    /// [`BatchError`] with how many were posted; the first failing entry and all later
    /// ones were not (reasons as in [`QueuePair::post_recv`]). Ranges are all checked
    /// before anything is posted.
    ///
    /// # Safety
    ///
    /// For every posted entry, as in [`QueuePair::post_recv`]: `mr` stays alive and the
    /// range untouched by the CPU until that entry's completion is reaped. Ranges of
    /// entries must not overlap each other.
    pub(crate) unsafe fn post_recv_batch(
        &self,
        mr: &MemoryRegion,
        recvs: &[(WrId, usize, usize)],
    ) -> Result<(), BatchError> {
        let fail = |posted, source| BatchError { posted, source };
        self.check_region(mr).map_err(|e| fail(0, e))?;
        for &(_, offset, len) in recvs {
            check_sge(mr, offset, len).map_err(|e| fail(0, e))?;
        }
        let mut posted = 0;
        for chunk in recvs.chunks(MAX_RECV_BATCH) {
            let mut sges = [ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; MAX_RECV_BATCH];
            let mut wrs = [ibv_recv_wr {
                wr_id: 0,
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: 0,
            }; MAX_RECV_BATCH];
            for (i, &(wr_id, offset, len)) in chunk.iter().enumerate() {
                sges[i] = sge(mr, offset, len);
                wrs[i].wr_id = wr_id.0;
                wrs[i].sg_list = &mut sges[i];
                wrs[i].num_sge = i32::from(len != 0);
            }
            for i in 1..chunk.len() {
                wrs[i - 1].next = &mut wrs[i];
            }
            let mut bad: *mut ibv_recv_wr = ptr::null_mut();
            // SAFETY: the QP is live and in INIT/RTR/RTS (typed by `S: RecvReady`), as
            // ibv_post_recv(3) requires; `wrs[..chunk.len()]` is a NULL-terminated chain of
            // WRs whose SGEs lie inside `mr` (checked above), which is registered in the
            // QP's PD (checked). The WRs and SGEs are only read during the call. That the
            // ranges stay valid and untouched until completion is the caller's contract.
            let ret = unsafe { ibv_post_recv(self.inner.ptr.as_ptr(), wrs.as_mut_ptr(), &mut bad) };
            if ret != 0 {
                // `bad` points at the first WR that was not posted.
                let ok = (0..chunk.len())
                    .position(|i| ptr::eq(&wrs[i], bad))
                    .unwrap_or(0);
                return Err(fail(posted + ok, Error::from_ret("ibv_post_recv", ret)));
            }
            posted += chunk.len();
        }
        Ok(())
    }
}

impl QueuePair<Rts> {
    /// Posts a SEND of `mr[offset..offset + len]`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignRegion`], [`Error::TooLarge`] (length, or
    /// inline above [`QueuePair::max_inline`]), or [`Error::Verb`] from `ibv_post_send`
    /// (e.g. `ENOMEM`: send queue full). On error nothing was posted.
    ///
    /// # Safety
    ///
    /// Unless `opts.inline`: until this SEND's completion is reaped — or, if unsignaled,
    /// the completion of a later signaled send on this QP — (or the QP is destroyed), `mr`
    /// must not be dropped and the CPU must not write the range (the NIC reads it at any
    /// time). With `opts.inline` the payload is copied during the call and nothing is
    /// required after it returns.
    pub(crate) unsafe fn post_send(
        &self,
        wr_id: WrId,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        opts: SendOptions,
    ) -> Result<()> {
        self.check_region(mr)?;
        let mut sge = check_sge(mr, offset, len).map(|()| sge(mr, offset, len))?;
        // SAFETY: the range is inside `mr`, registered in this QP's PD (both checked); that
        // it stays valid and unwritten until completion is the caller's contract.
        unsafe { self.post_send_sge(wr_id, &mut sge, opts) }
    }

    #[cfg(test)]
    /// Posts an inline SEND of `data`, which is copied into the WQE during the call, so
    /// `data` may be any memory and is free again on return.
    ///
    /// # Errors
    ///
    /// [`Error::TooLarge`] if `data` exceeds [`QueuePair::max_inline`], or
    /// [`Error::Verb`] from `ibv_post_send`.
    pub(crate) fn post_send_inline(
        &self,
        wr_id: WrId,
        data: &[u8],
        signaled: bool,
        imm: Option<u32>,
    ) -> Result<()> {
        let max = self.inner.max_inline as usize;
        if data.len() > max {
            return Err(Error::TooLarge {
                what: "inline send",
                len: data.len(),
                max,
            });
        }
        let mut sge = ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len() as u32, // <= max_inline: u32
            lkey: 0,
        };
        let opts = SendOptions {
            signaled,
            inline: true,
            imm,
        };
        // SAFETY: with IBV_SEND_INLINE the provider copies the SGE's bytes into the WQE
        // before ibv_post_send returns and never reads the lkey (ibv_post_send(3),
        // IBV_SEND_INLINE), so `data` only needs to be valid for the call, which the borrow
        // guarantees; its length is within the granted inline size (checked).
        unsafe { self.post_send_sge(wr_id, &mut sge, opts) }
    }

    /// Posts an RDMA READ of `len` bytes from `remote` into `local[offset..offset + len]`.
    ///
    /// # Errors
    ///
    /// As [`QueuePair::post_send`]. A bad rkey or remote range is reported later, as a
    /// `RemAccess` completion.
    ///
    /// # Safety
    ///
    /// Until this READ's completion is reaped (or the QP is destroyed), `local` must not
    /// be dropped and the CPU must neither read nor write the range (the NIC writes it).
    pub(crate) unsafe fn post_read(
        &self,
        wr_id: WrId,
        local: &MemoryRegion,
        offset: usize,
        len: usize,
        remote: RemoteBuf,
    ) -> Result<()> {
        self.check_region(local)?;
        check_sge(local, offset, len)?;
        let mut sge = sge(local, offset, len);
        // SAFETY: `ibv_send_wr` is plain C data (pointers, integers, unions of those): all-
        // zero is a valid value.
        let mut wr: ibv_send_wr = unsafe { mem::zeroed() };
        wr.wr_id = wr_id.0;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.rdma = rdma_t {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        };
        // SAFETY: the QP is live and in RTS (typed); the SGE lies inside `local`, which is
        // registered in this QP's PD with local write access (checked); `wr` and `sge` are
        // only read during the call. The range's hand-over is the caller's contract.
        self.post(&mut wr, "ibv_post_send(READ)")
    }

    #[cfg(test)]
    /// Binds `mw` over `mr[offset..offset + len]` for remote READ by this QP's peer (a
    /// `BIND_MW` work request; the window is usable by the peer once the bind is
    /// processed, which the send queue does in order, before any later SEND). Returns the
    /// window's new rkey: what the peer is given, with `offset` as the remote address.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignRegion`] (region or window of another PD), [`Error::OutOfBounds`],
    /// [`Error::Unsupported`] for a region not registered [`Access::Windowed`], or
    /// [`Error::Verb`] from `ibv_post_send`. On error nothing was posted and the window's
    /// key is unchanged.
    ///
    /// # Safety
    ///
    /// Until an invalidation of the returned key completes ([`QueuePair::post_local_inv`],
    /// its completion reaped) or the QP is destroyed, the peer may read the range at any
    /// time: `mr` must not be dropped and the CPU must not write the range.
    pub(crate) unsafe fn post_bind_mw(
        &self,
        wr_id: WrId,
        mw: &mut MemoryWindow,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        signaled: bool,
    ) -> Result<u32> {
        self.check_region(mr)?;
        if !Arc::ptr_eq(mw.pd(), &self.inner.pd) {
            return Err(Error::ForeignRegion);
        }
        if mr.access() != Access::Windowed {
            return Err(Error::Unsupported {
                what: "binding a memory window over a region registered without MW_BIND",
            });
        }
        check_sge(mr, offset, len)?;
        let rkey = mw.next_rkey();
        // SAFETY: `ibv_send_wr` is plain C data: all-zero is a valid value.
        let mut wr: ibv_send_wr = unsafe { mem::zeroed() };
        wr.wr_id = wr_id.0;
        wr.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
        if signaled {
            wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        wr.bind_mw_tso_union.bind_mw = bind_mw_t {
            mw: mw.as_ptr(),
            rkey,
            bind_info: ibv_mw_bind_info {
                mr: mr.as_ptr(),
                addr: mr.nic_addr() + offset as u64,
                length: len as u64,
                mw_access_flags: ibv_access_flags::IBV_ACCESS_REMOTE_READ.0,
            },
        };
        // SAFETY: the QP is in RTS (typed); window and region are live and of this QP's PD
        // (checked), the range is inside the region (checked); `wr` is only read during the
        // call. Keeping the range valid and unwritten while bound is the caller's contract.
        self.post(&mut wr, "ibv_post_send(BIND_MW)")?;
        mw.set_rkey(rkey);
        Ok(rkey)
    }

    #[cfg(test)]
    /// Invalidates the window (or region) with `rkey` (`LOCAL_INV`): once this work
    /// request completes, the key no longer grants the peer anything. Safe: it only
    /// revokes access.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_post_send`.
    pub(crate) fn post_local_inv(&self, wr_id: WrId, rkey: u32, signaled: bool) -> Result<()> {
        // SAFETY: `ibv_send_wr` is plain C data: all-zero is a valid value.
        let mut wr: ibv_send_wr = unsafe { mem::zeroed() };
        wr.wr_id = wr_id.0;
        wr.opcode = ibv_wr_opcode::IBV_WR_LOCAL_INV;
        if signaled {
            wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        self.post(&mut wr, "ibv_post_send(LOCAL_INV)")
    }

    /// # Safety
    ///
    /// `sge` must describe memory valid for the NIC to read until the completion (or, with
    /// `opts.inline`, for the duration of the call), registered in this QP's PD unless inline.
    unsafe fn post_send_sge(
        &self,
        wr_id: WrId,
        sge: &mut ibv_sge,
        opts: SendOptions,
    ) -> Result<()> {
        if opts.inline && sge.length > self.inner.max_inline {
            return Err(Error::TooLarge {
                what: "inline send",
                len: sge.length as usize,
                max: self.inner.max_inline as usize,
            });
        }
        // SAFETY: `ibv_send_wr` is plain C data: all-zero is a valid value.
        let mut wr: ibv_send_wr = unsafe { mem::zeroed() };
        wr.wr_id = wr_id.0;
        wr.sg_list = sge;
        wr.num_sge = i32::from(sge.length != 0);
        let mut flags = ibv_send_flags(0);
        if opts.signaled {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED;
        }
        if opts.inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE;
        }
        wr.send_flags = flags.0;
        match opts.imm {
            Some(imm) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            None => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
        }
        // SAFETY: memory validity is this function's contract; the QP is in RTS (typed).
        self.post(&mut wr, "ibv_post_send(SEND)")
    }

    /// Posts one send-queue WR.
    fn post(&self, wr: &mut ibv_send_wr, verb: &'static str) -> Result<()> {
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live and in RTS (typed); `wr` is a single, NULL-terminated WR
        // whose SGE was validated by the caller, only read during the call. ibv_post_send(3)
        // returns an errno value on failure and then posted nothing of a one-WR chain.
        let ret = unsafe { ibv_post_send(self.inner.ptr.as_ptr(), wr, &mut bad) };
        if ret == 0 {
            Ok(())
        } else {
            Err(Error::from_ret(verb, ret))
        }
    }
}

impl<S: QpStage> QueuePair<S> {
    /// Checks that `mr` is registered in this QP's protection domain.
    fn check_region(&self, mr: &MemoryRegion) -> Result<()> {
        if Arc::ptr_eq(mr.pd(), &self.inner.pd) {
            Ok(())
        } else {
            Err(Error::ForeignRegion)
        }
    }
}

/// Checks that `mr[offset..offset + len]` exists and fits an SGE length.
fn check_sge(mr: &MemoryRegion, offset: usize, len: usize) -> Result<()> {
    mr.check_range(offset, len)?;
    if u32::try_from(len).is_err() {
        return Err(Error::TooLarge {
            what: "work request",
            len,
            max: u32::MAX as usize,
        });
    }
    Ok(())
}

/// The SGE for an already checked range of `mr`.
fn sge(mr: &MemoryRegion, offset: usize, len: usize) -> ibv_sge {
    ibv_sge {
        addr: mr.nic_addr() + offset as u64,
        length: len as u32,
        lkey: mr.lkey(),
    }
}
