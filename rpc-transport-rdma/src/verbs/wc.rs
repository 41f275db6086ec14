//! Plain-Rust work completions: [`Completion`], [`WcStatus`], [`WcOpcode`], [`WrId`].

use rdma_sys::{ibv_wc, ibv_wc_flags, ibv_wc_opcode, ibv_wc_status};

/// The caller-chosen 64-bit id of a work request, returned in its [`Completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WrId(pub(crate) u64);

/// Why a work request failed: `ibv_wc_status` mapped one to one (`IBV_WC_SUCCESS` is
/// `Ok(())` in [`Completion::status`]). Messages follow `ibv_wc_status_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum WcStatus {
    /// `IBV_WC_LOC_LEN_ERR`: the received message is longer than the posted buffer.
    #[error("local length error")]
    LocLen,
    /// `IBV_WC_LOC_QP_OP_ERR`: an internal QP consistency error.
    #[error("local QP operation error")]
    LocQpOp,
    /// `IBV_WC_LOC_EEC_OP_ERR`: an internal EE context consistency error.
    #[error("local EE context operation error")]
    LocEecOp,
    /// `IBV_WC_LOC_PROT_ERR`: the buffer is not in a valid MR (bad lkey or range).
    #[error("local protection error")]
    LocProt,
    /// `IBV_WC_WR_FLUSH_ERR`: the QP entered the error state; outstanding WRs are flushed.
    #[error("Work Request Flushed Error")]
    WrFlush,
    /// `IBV_WC_MW_BIND_ERR`: a memory-window bind failed.
    #[error("memory management operation error")]
    MwBind,
    /// `IBV_WC_BAD_RESP_ERR`: an unexpected transport-layer opcode from the responder.
    #[error("bad response error")]
    BadResp,
    /// `IBV_WC_LOC_ACCESS_ERR`: a protection error on a local buffer during an RDMA READ.
    #[error("local access error")]
    LocAccess,
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder found the request invalid.
    #[error("remote invalid request error")]
    RemInvReq,
    /// `IBV_WC_REM_ACCESS_ERR`: the remote rkey, range or access rights were refused.
    #[error("remote access error")]
    RemAccess,
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation.
    #[error("remote operation error")]
    RemOp,
    /// `IBV_WC_RETRY_EXC_ERR`: no ACK within `timeout` after `retry_cnt` retries
    /// (peer dead or link down).
    #[error("transport retry counter exceeded")]
    RetryExc,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the receiver had no RECV posted (with `rnr_retry = 0`
    /// this is reported at once: a credit accounting bug).
    #[error("RNR retry counter exceeded")]
    RnrRetryExc,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`: a reliable-datagram domain violation.
    #[error("local RDD violation error")]
    LocRddViol,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`: an invalid reliable-datagram request at the responder.
    #[error("remote invalid RD request")]
    RemInvRdReq,
    /// `IBV_WC_REM_ABORT_ERR`: the responder aborted the operation.
    #[error("operation aborted")]
    RemAbort,
    /// `IBV_WC_INV_EECN_ERR`: an invalid EE context number.
    #[error("invalid EE context number")]
    InvEecn,
    /// `IBV_WC_INV_EEC_STATE_ERR`: an invalid EE context state.
    #[error("invalid EE context state")]
    InvEecState,
    /// `IBV_WC_FATAL_ERR`: a fatal device error.
    #[error("fatal error")]
    Fatal,
    /// `IBV_WC_RESP_TIMEOUT_ERR`: the response timed out.
    #[error("response timeout error")]
    RespTimeout,
    /// `IBV_WC_GENERAL_ERR`: any other error.
    #[error("general error")]
    General,
    /// `IBV_WC_TM_ERR`: a tag-matching error.
    #[error("TM error")]
    Tm,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: a tag-matching rendezvous did not complete.
    #[error("TM software rendezvous")]
    TmRndvIncomplete,
    /// A status this build does not know (a newer libibverbs).
    #[error("unknown work completion status {0}")]
    Unknown(u32),
}

impl WcStatus {
    /// Maps a raw `ibv_wc_status`; `IBV_WC_SUCCESS` maps to `Ok(())`.
    pub(crate) fn from_raw(status: ibv_wc_status::Type) -> Result<(), WcStatus> {
        use ibv_wc_status::*;
        Err(match status {
            IBV_WC_SUCCESS => return Ok(()),
            IBV_WC_LOC_LEN_ERR => WcStatus::LocLen,
            IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOp,
            IBV_WC_LOC_EEC_OP_ERR => WcStatus::LocEecOp,
            IBV_WC_LOC_PROT_ERR => WcStatus::LocProt,
            IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlush,
            IBV_WC_MW_BIND_ERR => WcStatus::MwBind,
            IBV_WC_BAD_RESP_ERR => WcStatus::BadResp,
            IBV_WC_LOC_ACCESS_ERR => WcStatus::LocAccess,
            IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReq,
            IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccess,
            IBV_WC_REM_OP_ERR => WcStatus::RemOp,
            IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExc,
            IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExc,
            IBV_WC_LOC_RDD_VIOL_ERR => WcStatus::LocRddViol,
            IBV_WC_REM_INV_RD_REQ_ERR => WcStatus::RemInvRdReq,
            IBV_WC_REM_ABORT_ERR => WcStatus::RemAbort,
            IBV_WC_INV_EECN_ERR => WcStatus::InvEecn,
            IBV_WC_INV_EEC_STATE_ERR => WcStatus::InvEecState,
            IBV_WC_FATAL_ERR => WcStatus::Fatal,
            IBV_WC_RESP_TIMEOUT_ERR => WcStatus::RespTimeout,
            IBV_WC_GENERAL_ERR => WcStatus::General,
            IBV_WC_TM_ERR => WcStatus::Tm,
            IBV_WC_TM_RNDV_INCOMPLETE => WcStatus::TmRndvIncomplete,
            other => WcStatus::Unknown(other),
        })
    }
}

/// What kind of work request completed (`ibv_wc_opcode`, the kinds this crate posts).
///
/// Only meaningful for successful completions: for a failed one the NIC may leave it unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum WcOpcode {
    /// A SEND (with or without immediate) left the send queue.
    Send,
    /// An RDMA WRITE completed.
    RdmaWrite,
    /// An RDMA READ completed: the local buffer holds the remote data.
    RdmaRead,
    /// A RECV consumed an incoming SEND.
    Recv,
    /// A RECV consumed an incoming RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// Any other opcode (atomics, memory windows, tag matching, ...).
    Other(u32),
}

impl WcOpcode {
    fn from_raw(op: ibv_wc_opcode::Type) -> Self {
        use ibv_wc_opcode::*;
        match op {
            IBV_WC_SEND => WcOpcode::Send,
            IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            IBV_WC_RECV => WcOpcode::Recv,
            IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }
}

/// One reaped work completion, copied out of `ibv_wc` into plain Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completion {
    /// The id given when the work request was posted.
    pub(crate) wr_id: WrId,
    /// `Ok(())` on success, else why the work request failed.
    pub(crate) status: Result<(), WcStatus>,
    /// What completed (valid only when `status` is `Ok`).
    pub(crate) opcode: WcOpcode,
    /// Bytes received, for RECV completions (undefined for send-side completions).
    pub(crate) byte_len: u32,
    /// Immediate data of a SEND/WRITE with immediate, converted to host byte order.
    pub(crate) imm: Option<u32>,
    /// The local QP the work request belonged to (a CQ can serve several QPs).
    pub(crate) qp_num: u32,
    /// Vendor-specific error syndrome, for logs when `status` is an error.
    pub(crate) vendor_err: u32,
}

impl From<&ibv_wc> for Completion {
    fn from(wc: &ibv_wc) -> Self {
        let imm = if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: reading a `u32` field of a `#[repr(C)]` union of two `u32`s is always
            // initialised memory; ibv_poll_cq(3) documents `imm_data` (network byte order)
            // as the valid member when IBV_WC_WITH_IMM is set in wc_flags, checked above.
            Some(u32::from_be(unsafe {
                wc.imm_data_invalidated_rkey_union.imm_data
            }))
        } else {
            None
        };
        Completion {
            wr_id: WrId(wc.wr_id),
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            imm,
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
        }
    }
}
