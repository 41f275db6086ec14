//! Queue pair states through rdma_cm: the attributes `rdma_init_qp_attr` computes for an
//! id, with this side's own access rights, retry counts and READ depths over what a
//! peer's request would set.

use std::net::{IpAddr, Ipv6Addr};

use rdma_sys::{ibv_access_flags, ibv_qp_attr_mask, ibv_qp_state};

use super::cm::CmId;
use super::error::Result;
use super::qp::{QueuePair, MAX_INITIATOR_DEPTH, RNR_RETRY};
use super::qp_state::{Init, QpStage, Reset, Rtr, Rts};
use crate::fabric::{LinkLayer, PathError};

impl QueuePair<Reset> {
    /// `RESET -> INIT` with rdma_cm's attributes for `id` (its port and P_Key), allowing
    /// the peer RDMA READ and nothing else (rdma_cm would also allow remote write).
    ///
    /// # Errors
    /// [`Error::Verb`] if rdma_cm or `ibv_modify_qp` fails; the QP is destroyed.
    pub(crate) fn cm_init(self, id: &CmId) -> Result<QueuePair<Init>> {
        let (mut attr, mask) = id.qp_attr(ibv_qp_state::IBV_QPS_INIT)?;
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        self.modify_raw(&mut attr, mask, "ibv_modify_qp(INIT, rdma_cm)")?;
        Ok(self.advance())
    }
}

impl QueuePair<Init> {
    /// `INIT -> RTR` with rdma_cm's attributes (the path, the peer's QP number and PSN,
    /// the READs it may have in flight); `sgid_index`, when named, replaces the source
    /// GID entry rdma_cm chose (on RoCE: another entry of the same address, e.g. RoCE v1
    /// where rdma_cm prefers v2). On RoCE the path's destination GID must be `peer`, the
    /// side channel's peer (IPv4 as an IPv4-mapped GID): on a server the path comes from
    /// the client's connect request, which a client could forge to aim this QP at a
    /// third host. (InfiniBand GIDs hold no IP address: there the subnet manager's path
    /// stands.)
    ///
    /// # Errors
    /// [`Error::Path`] for a path to another address than `peer`; [`Error::Verb`] if
    /// rdma_cm or `ibv_modify_qp` fails; the QP is destroyed.
    pub(crate) fn cm_rtr(
        self,
        id: &CmId,
        sgid_index: Option<u8>,
        peer: IpAddr,
    ) -> Result<QueuePair<Rtr>> {
        let (mut attr, mut mask) = id.qp_attr(ibv_qp_state::IBV_QPS_RTR)?;
        let ethernet = self.inner.pd.context().choice().link_layer == LinkLayer::Ethernet;
        // RoCE's GIDs hold IP addresses; an InfiniBand GID (prefix and port GUID) does not.
        if mask != 0 && ethernet && attr.ah_attr.is_global == 1 {
            // SAFETY: `ibv_gid` is a union of 16 bytes and two u64s: every bit pattern
            // is valid for the byte array, and rdma_init_qp_attr wrote the whole GID.
            let gid = Ipv6Addr::from(unsafe { attr.ah_attr.grh.dgid.raw });
            let expected = match peer.to_canonical() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            if gid != expected {
                return Err(PathError::NotThePeer { gid, peer }.into());
            }
        }
        if mask != 0 {
            // On a server, rdma_cm takes the incoming READs from the client's request:
            // at most what the device accepts, whatever the peer asked.
            attr.max_dest_rd_atomic = attr
                .max_dest_rd_atomic
                .clamp(1, self.inner.pd.context().max_qp_rd_atom());
            mask |= ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0 as i32;
            if let (Some(index), 1) = (sgid_index, attr.ah_attr.is_global) {
                attr.ah_attr.grh.sgid_index = index;
            }
        }
        // iWARP: a zero mask, the kernel's connection manager moves the QP itself.
        self.modify_raw(&mut attr, mask, "ibv_modify_qp(RTR, rdma_cm)")?;
        Ok(self.advance())
    }
}

impl QueuePair<Rtr> {
    /// `RTR -> RTS` with rdma_cm's path attributes and this side's own reliability
    /// settings: its ACK timeout and retry count, `rnr_retry = 0`, and at most as many
    /// READs in flight as the device issues (on a server, rdma_cm would take the retry
    /// counts and the READ depth from the client's request: a peer must not choose them).
    /// On iWARP rdma_cm gives no attributes and the QP is left to the kernel's connection
    /// manager, which moves it to RTS when the connection is established.
    ///
    /// # Errors
    /// [`Error::Verb`] if rdma_cm or `ibv_modify_qp` fails; the QP is destroyed.
    pub(crate) fn cm_rts(self, id: &CmId) -> Result<QueuePair<Rts>> {
        let (mut attr, mut mask) = id.qp_attr(ibv_qp_state::IBV_QPS_RTS)?;
        if mask != 0 {
            let ctx = self.inner.pd.context();
            attr.timeout = self.inner.timeout;
            attr.retry_cnt = self.inner.retry_cnt;
            attr.rnr_retry = RNR_RETRY;
            attr.max_rd_atomic = attr
                .max_rd_atomic
                .clamp(1, ctx.max_qp_init_rd_atom().min(MAX_INITIATOR_DEPTH));
            mask |= (ibv_qp_attr_mask::IBV_QP_TIMEOUT
                | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
                | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
                | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC)
                .0 as i32;
        }
        self.modify_raw(&mut attr, mask, "ibv_modify_qp(RTS, rdma_cm)")?;
        Ok(self.advance())
    }
}

impl<S: QpStage> QueuePair<S> {
    /// Takes a queue pair the kernel's iWARP connection manager moved to RTS itself.
    pub(crate) fn moved_by_cm(self) -> QueuePair<Rts> {
        self.advance()
    }
}
