//! [`QueuePair`] set-up and teardown: an RC queue pair moved through the typed states
//! `Reset -> Init -> Rtr -> Rts`. Posting lives in `datapath.rs`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::mem;
use std::ptr::{self, NonNull};
use std::sync::Arc;

#[cfg(test)]
use rdma_sys::ibv_query_qp;
use rdma_sys::{
    ibv_access_flags, ibv_create_qp, ibv_destroy_qp, ibv_gid, ibv_modify_qp, ibv_mtu, ibv_qp,
    ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type,
};

use super::cq::CompletionQueue;
use super::error::{check_ret, Error, Result};
use super::pd::ProtectionDomain;
#[cfg(test)]
use super::qp_state::QpState;
use super::qp_state::{Init, QpStage, Reset, Rtr, Rts};
use super::{DEFAULT_MAX_RECV_WR, DEFAULT_MAX_SEND_WR, MAX_INLINE};
use crate::fabric::{self, Mtu, Peer};

/// Default local ACK timeout exponent: 4.096 µs × 2^14 ≈ 67 ms before a retransmission.
pub(crate) const DEFAULT_TIMEOUT: u8 = 14;
/// Default transport retries before a work request fails with `RetryExc` (3-bit field).
pub(crate) const DEFAULT_RETRY_CNT: u8 = 7;
/// RNR retries: always 0. Credits guarantee a posted RECV for every SEND, so an RNR NAK is
/// a bug, and it must surface as an error rather than as a silent 655 ms stall.
pub(crate) const RNR_RETRY: u8 = 0;
#[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
/// The RNR timer this QP advertises in the NAKs it sends (12 = 0.64 ms); unused by design.
const MIN_RNR_TIMER: u8 = 12;

/// RDMA READs this side keeps in flight per QP at most (the initiator depth).
pub(crate) const MAX_INITIATOR_DEPTH: u8 = 8;

const _: () = assert!(DEFAULT_TIMEOUT <= 31, "timeout is a 5-bit field");
const _: () = assert!(DEFAULT_RETRY_CNT <= 7, "retry_cnt is a 3-bit field");

/// Sizing and reliability knobs of a queue pair.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct QpConfig {
    /// Outstanding send work requests (SENDs and READs). Default [`DEFAULT_MAX_SEND_WR`].
    /// More allows deeper pipelining; each entry costs NIC memory.
    pub(crate) max_send_wr: u32,
    /// Posted receive work requests. Default [`DEFAULT_MAX_RECV_WR`]: must cover the
    /// receive ring, i.e. the credits granted to the peer.
    pub(crate) max_recv_wr: u32,
    /// Inline bytes per send WQE asked for. Default [`MAX_INLINE`]; the provider may grant
    /// more, see [`QueuePair::max_inline`].
    pub(crate) max_inline: u32,
    /// ACK timeout exponent (4.096 µs × 2^timeout, 0 = infinite). Default
    /// [`DEFAULT_TIMEOUT`]; lower detects a dead peer sooner but retransmits spuriously
    /// on a jittery (e.g. emulated) link.
    pub(crate) timeout: u8,
    /// Transport retries, 0..=7. Default [`DEFAULT_RETRY_CNT`].
    pub(crate) retry_cnt: u8,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            max_send_wr: DEFAULT_MAX_SEND_WR,
            max_recv_wr: DEFAULT_MAX_RECV_WR,
            max_inline: MAX_INLINE,
            timeout: DEFAULT_TIMEOUT,
            retry_cnt: DEFAULT_RETRY_CNT,
        }
    }
}

#[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
/// What a peer needs to connect its QP to ours; exchanged over the side channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpEndpoint {
    /// The QP number (24 bits).
    pub(crate) qp_num: u32,
    /// The first packet sequence number this QP sends (24 bits).
    pub(crate) psn: u32,
    /// The GID of the local device entry that owns the side channel's local address.
    pub(crate) gid: [u8; 16],
    /// The port LID (0 on RoCE).
    pub(crate) lid: u16,
    /// The local port's active MTU; the path uses the smaller of both sides'.
    pub(crate) mtu: Mtu,
}

/// The QP handle and its parents; destroyed once, in `Drop`.
#[derive(Debug)]
pub(super) struct QpInner {
    pub(super) ptr: NonNull<ibv_qp>,
    pub(super) qp_num: u32,
    pub(super) psn: u32,
    /// Inline bytes granted by the provider.
    pub(super) max_inline: u32,
    pub(super) timeout: u8,
    pub(super) retry_cnt: u8,
    pub(super) pd: Arc<ProtectionDomain>,
    /// Held, never read: the QP's CQs must outlive it (libibverbs' destruction order).
    #[allow(dead_code, reason = "held for the destruction order, never read")]
    send_cq: Arc<CompletionQueue>,
    #[allow(dead_code, reason = "held for the destruction order, never read")]
    recv_cq: Arc<CompletionQueue>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_create_qp and is destroyed only here, before the CQs
        // and PD it holds `Arc`s of (ibv_destroy_qp(3) requires them to still exist).
        // Work requests still outstanding are discarded by the NIC; buffers they reference
        // are kept alive by whoever posted them until they see the QP gone.
        let ret = unsafe { ibv_destroy_qp(self.ptr.as_ptr()) };
        if let Err(error) = check_ret("ibv_destroy_qp", ret) {
            tracing::error!(qp_num = self.qp_num, %error, "cannot destroy queue pair");
        }
    }
}

/// A reliable-connected queue pair (`ibv_qp`, `IBV_QPT_RC`) in typed state `S`.
///
/// A transition consumes the QP and returns it in the next state; if the transition fails
/// the QP is destroyed and the error returned (connection set-up is then abandoned).
/// Posting methods exist only in the states that allow them (`datapath.rs`).
///
/// Invariant: the QP holds `Arc`s of its PD and CQs, so it is destroyed before them.
#[derive(Debug)]
pub(crate) struct QueuePair<S: QpStage> {
    pub(super) inner: QpInner,
    _stage: PhantomData<S>,
}

// SAFETY: an `ibv_qp` has no thread affinity; ibv_post_send(3)/ibv_post_recv(3),
// ibv_modify_qp(3) and ibv_query_qp(3) are thread-safe (providers take the send/receive
// queue spinlocks while posting; rxe: `sq.lock`, `rq.lock`).
unsafe impl<S: QpStage> Send for QueuePair<S> {}
// SAFETY: see `Send`: concurrent posts from several threads are serialised by the
// provider; the Rust fields are immutable after creation.
unsafe impl<S: QpStage> Sync for QueuePair<S> {}

impl QueuePair<Reset> {
    /// Creates an RC QP in `pd`, completing sends on `send_cq` and receives on `recv_cq`
    /// (the same CQ may be given twice). Completions are not signalled by default: a send
    /// produces a completion only when posted with `signaled`.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_create_qp` fails (e.g. sizes above the device limits).
    pub(crate) fn new(
        pd: &Arc<ProtectionDomain>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        config: &QpConfig,
    ) -> Result<Self> {
        // SAFETY: `ibv_qp_init_attr` is plain C data (pointers, integers): all-zero is valid.
        let mut attr: ibv_qp_init_attr = unsafe { mem::zeroed() };
        attr.send_cq = send_cq.as_ptr();
        attr.recv_cq = recv_cq.as_ptr();
        attr.srq = ptr::null_mut();
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        attr.cap.max_send_wr = config.max_send_wr;
        attr.cap.max_recv_wr = config.max_recv_wr;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        // Inline data is a capability of the provider: one refuses what another grants
        // (siw refuses 256 bytes with EINVAL and grants 80 for 64; probes/rdma-cm). Ask
        // for the setting, then for less, down to none: sends inline what was granted.
        let mut ask = config.max_inline;
        let ptr = loop {
            attr.cap.max_inline_data = ask;
            // SAFETY: `pd` and both CQs are live objects of the same device, kept alive by
            // the `Arc`s stored below; `attr` is a valid in/out parameter. ibv_create_qp(3)
            // returns NULL + errno on failure and writes the granted capacities back into
            // `attr.cap`.
            let ptr = unsafe { ibv_create_qp(pd.as_ptr(), &mut attr) };
            match NonNull::new(ptr) {
                Some(ptr) => break ptr,
                None => {
                    let err = Error::last_os("ibv_create_qp");
                    let invalid = matches!(&err, Error::Verb { source, .. } if source.raw_os_error() == Some(libc::EINVAL));
                    if !invalid || ask == 0 {
                        return Err(err);
                    }
                    ask = if ask > 64 { ask / 2 } else { 0 };
                    // The other capacities may have been overwritten by the failed call.
                    attr.cap.max_send_wr = config.max_send_wr;
                    attr.cap.max_recv_wr = config.max_recv_wr;
                    attr.cap.max_send_sge = 1;
                    attr.cap.max_recv_sge = 1;
                }
            }
        };
        if ask < config.max_inline {
            tracing::debug!(
                asked = config.max_inline,
                granted = attr.cap.max_inline_data,
                "the RDMA provider refused the inline size asked for; using less"
            );
        }
        // SAFETY: `ptr` is a live QP; `qp_num` is set at creation and never changes.
        let qp_num = unsafe { (*ptr.as_ptr()).qp_num };
        let psn = (RandomState::new().hash_one(qp_num) & 0x00ff_ffff) as u32;
        Ok(QueuePair {
            inner: QpInner {
                ptr,
                qp_num,
                psn,
                max_inline: attr.cap.max_inline_data,
                timeout: config.timeout,
                retry_cnt: config.retry_cnt,
                pd: Arc::clone(pd),
                send_cq: Arc::clone(send_cq),
                recv_cq: Arc::clone(recv_cq),
            },
            _stage: PhantomData,
        })
    }

    #[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
    /// `RESET -> INIT` on the context's chosen port, allowing the peer RDMA READ (never WRITE) of
    /// memory regions registered with remote read access.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_modify_qp` fails; the QP is destroyed.
    pub(crate) fn into_init(self) -> Result<QueuePair<Init>> {
        // SAFETY: `ibv_qp_attr` is plain C data: all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = self.inner.pd.context().choice().port;
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut attr, mask, "ibv_modify_qp(INIT)")?;
        Ok(self.advance())
    }
}

impl QueuePair<Init> {
    #[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
    /// `INIT -> RTR`: connects to `remote` with the address vector [`fabric::address`]
    /// gives from the chosen port (by LID on InfiniBand, by GID on RoCE), path MTU =
    /// min(ours, theirs), and as many incoming READs as the device allows.
    ///
    /// # Errors
    ///
    /// [`Error::Path`] if the port cannot route to the peer's LID or GID, [`Error::Verb`]
    /// if `ibv_modify_qp` fails (e.g. unreachable GID); the QP is destroyed.
    pub(crate) fn into_rtr(self, remote: &QpEndpoint) -> Result<QueuePair<Rtr>> {
        let ctx = self.inner.pd.context();
        let peer = Peer {
            gid: remote.gid.into(),
            lid: remote.lid,
            mtu: remote.mtu,
        };
        let av = fabric::address(ctx.choice(), &peer)?;
        // SAFETY: `ibv_qp_attr` is plain C data: all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = av.mtu.code() as ibv_mtu::Type;
        attr.dest_qp_num = remote.qp_num;
        attr.rq_psn = remote.psn;
        attr.max_dest_rd_atomic = ctx.max_qp_rd_atom();
        attr.min_rnr_timer = MIN_RNR_TIMER;
        attr.ah_attr.dlid = av.dlid;
        attr.ah_attr.sl = av.sl;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = av.port;
        if let Some(grh) = av.grh {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ibv_gid {
                raw: grh.dgid.octets(),
            };
            attr.ah_attr.grh.sgid_index = grh.sgid_index;
            attr.ah_attr.grh.hop_limit = grh.hop_limit;
            attr.ah_attr.grh.flow_label = 0;
            attr.ah_attr.grh.traffic_class = 0;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, "ibv_modify_qp(RTR)")?;
        tracing::debug!(
            qp_num = self.inner.qp_num, dest_qp_num = remote.qp_num, mtu = av.mtu.bytes(),
            device = %ctx.name(), "queue pair ready to receive"
        );
        Ok(self.advance())
    }
}

impl QueuePair<Rtr> {
    #[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
    /// `RTR -> RTS` with the configured timeout and retry count, `rnr_retry = 0`, and as
    /// many outstanding READs as the device allows.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_modify_qp` fails; the QP is destroyed.
    pub(crate) fn into_rts(self) -> Result<QueuePair<Rts>> {
        // SAFETY: `ibv_qp_attr` is plain C data: all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = self.inner.timeout;
        attr.retry_cnt = self.inner.retry_cnt;
        attr.rnr_retry = RNR_RETRY;
        attr.sq_psn = self.inner.psn;
        // Fewer READs in flight than the peer accepts (it offers the device maximum as
        // responder resources): headroom for retransmitted READ requests.
        attr.max_rd_atomic = self
            .inner
            .pd
            .context()
            .max_qp_init_rd_atom()
            .min(MAX_INITIATOR_DEPTH);
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, "ibv_modify_qp(RTS)")?;
        Ok(self.advance())
    }
}

impl<S: QpStage> QueuePair<S> {
    #[cfg_attr(not(test), allow(dead_code))] // hand-connected queue pairs: the verbs tests
    /// What the peer needs to connect to this QP.
    pub(crate) fn endpoint(&self) -> QpEndpoint {
        let ctx = self.inner.pd.context();
        QpEndpoint {
            qp_num: self.inner.qp_num,
            psn: self.inner.psn,
            gid: ctx.choice().gid.gid.octets(),
            lid: ctx.choice().lid,
            mtu: ctx.choice().mtu,
        }
    }

    /// The QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        self.inner.qp_num
    }

    /// Inline bytes per SEND granted by the provider (at least what was asked).
    pub(crate) fn max_inline(&self) -> u32 {
        self.inner.max_inline
    }

    /// The protection domain of the QP; memory posted on it must be registered there.
    #[cfg(feature = "unstable-test-peer")]
    pub(crate) fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.inner.pd
    }

    #[cfg(test)]
    /// Queries the QP's actual state (it may have moved to `Error` on its own).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_query_qp` fails.
    pub(crate) fn state(&self) -> Result<QpState> {
        // SAFETY: both are plain C data: all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { mem::zeroed() };
        // SAFETY: `ptr` is a live QP; both out-parameters are valid for writes
        // (ibv_query_qp(3) requires `init_attr` non-NULL even when unused).
        let ret = unsafe {
            ibv_query_qp(
                self.inner.ptr.as_ptr(),
                &mut attr,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        };
        check_ret("ibv_query_qp", ret)?;
        Ok(match attr.qp_state {
            ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
            ibv_qp_state::IBV_QPS_INIT => QpState::Init,
            ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
            ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
            ibv_qp_state::IBV_QPS_SQD => QpState::Sqd,
            ibv_qp_state::IBV_QPS_SQE => QpState::Sqe,
            ibv_qp_state::IBV_QPS_ERR => QpState::Error,
            other => QpState::Unknown(other),
        })
    }

    /// Moves the QP to the error state: every outstanding work request completes with
    /// `WrFlush`, so the completion tracker can release its buffers before teardown.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] if `ibv_modify_qp` fails.
    pub(crate) fn modify_to_error(&self) -> Result<()> {
        // SAFETY: `ibv_qp_attr` is plain C data: all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        self.modify(
            &mut attr,
            ibv_qp_attr_mask::IBV_QP_STATE,
            "ibv_modify_qp(ERR)",
        )
    }

    fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        verb: &'static str,
    ) -> Result<()> {
        self.modify_raw(attr, mask.0 as i32, verb)
    }

    /// `ibv_modify_qp` with a raw mask (as rdma_cm computes it).
    pub(super) fn modify_raw(
        &self,
        attr: &mut ibv_qp_attr,
        mask: i32,
        verb: &'static str,
    ) -> Result<()> {
        // SAFETY: `ptr` is a live QP; `attr` is valid for the duration of the call and
        // `mask` names exactly the fields set (by the caller or rdma_init_qp_attr(3)),
        // per ibv_modify_qp(3).
        let ret = unsafe { ibv_modify_qp(self.inner.ptr.as_ptr(), attr, mask) };
        check_ret(verb, ret)
    }

    pub(super) fn advance<T: QpStage>(self) -> QueuePair<T> {
        QueuePair {
            inner: self.inner,
            _stage: PhantomData,
        }
    }
}
