//! The states of a [`QueuePair`](super::QueuePair): compile-time markers for the
//! `Reset -> Init -> Rtr -> Rts` set-up sequence, and the run-time [`QpState`] a query reports.

/// The state a QP is in, as reported by `ibv_query_qp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(test)]
pub(crate) enum QpState {
    /// `IBV_QPS_RESET`: just created.
    Reset,
    /// `IBV_QPS_INIT`: RECVs may be posted.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error.
    Sqe,
    /// `IBV_QPS_ERR`: every outstanding and new work request is flushed.
    Error,
    /// Any other value.
    Unknown(u32),
}

/// Keeps [`QpStage`] closed: only the four marker types below are stages.
mod sealed {
    /// Implemented by the QP stage markers only.
    pub(crate) trait Sealed {}
}

/// A compile-time QP state: the type parameter of [`QueuePair`](super::QueuePair).
pub(crate) trait QpStage: sealed::Sealed {}
/// The stages in which receive work requests may be posted (ibv_post_recv(3): not in RESET).
pub(crate) trait RecvReady: QpStage {}

/// Typed state `RESET`: created, nothing may be posted.
#[derive(Debug)]
pub(crate) struct Reset;
/// Typed state `INIT`: RECVs may be posted (post them before the peer may send).
#[derive(Debug)]
pub(crate) struct Init;
/// Typed state `RTR`: connected to the peer, receiving.
#[derive(Debug)]
pub(crate) struct Rtr;
/// Typed state `RTS`: sending too.
#[derive(Debug)]
pub(crate) struct Rts;

impl sealed::Sealed for Reset {}
impl sealed::Sealed for Init {}
impl sealed::Sealed for Rtr {}
impl sealed::Sealed for Rts {}
impl QpStage for Reset {}
impl QpStage for Init {}
impl QpStage for Rtr {}
impl QpStage for Rts {}
impl RecvReady for Init {}
impl RecvReady for Rtr {}
impl RecvReady for Rts {}
