//! [`PreparedRings`]: a queue pair and its rings before it is connected.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use slab::Slab;

use super::ring::{Ring, RingGeometry};
use super::slots::SendSlot;
use super::NEXT_RINGS_ID;
use super::{post_segment, Rings};
use crate::verbs::{
    CmId, CompletionQueue, Init, ProtectionDomain, QpConfig, QueuePair, Result, Rts,
};

/// A connection's QP in INIT with its rings registered and every receive slot posted:
/// what exists before the peer's endpoint is known.
#[derive(Debug)]
pub(crate) struct PreparedRings {
    qp: QueuePair<Init>,
    rest: RingsRest,
}

/// Everything but the queue pair.
#[derive(Debug)]
struct RingsRest {
    send: Ring,
    recv: Ring,
    pd: Arc<ProtectionDomain>,
    geometry: RingGeometry,
    id: u64,
}

impl PreparedRings {
    /// Creates the QP on `cq` and moves it to INIT with the attributes rdma_cm computes
    /// for `id` (on the id's device), registers both rings in `pd` (no remote access) and
    /// posts every receive slot.
    ///
    /// # Errors
    /// Any verbs failure (QP creation, registration, e.g. over the memlock limit, posting).
    pub(crate) fn for_cm(
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        qp_config: &QpConfig,
        geometry: RingGeometry,
        id: &CmId,
    ) -> Result<PreparedRings> {
        let send = Ring::new(pd, geometry.send_slots, geometry.slot_size)?;
        let recv = Ring::new(pd, geometry.recv_slots, geometry.slot_size)?;
        let qp = QueuePair::new(pd, cq, cq, qp_config)?.cm_init(id)?;
        post_segment(&qp, &recv, 0..geometry.recv_slots)?;
        Ok(PreparedRings {
            qp,
            rest: RingsRest {
                send,
                recv,
                pd: pd.clone(),
                geometry,
                id: NEXT_RINGS_ID.fetch_add(1, Ordering::Relaxed),
            },
        })
    }

    /// The local QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// Connects through rdma_cm's `id` (INIT -> RTR -> RTS with its attributes and
    /// `sgid_index` if named, its path checked to lead to `peer`; on iWARP the kernel moves the queue pair itself, see
    /// `cm_qp.rs`) and hands out every send slot.
    ///
    /// # Errors
    /// A failed state transition.
    pub(crate) fn cm_connect(
        self,
        id: &CmId,
        sgid_index: Option<u8>,
        peer: std::net::IpAddr,
    ) -> Result<(Rings, Vec<SendSlot>)> {
        let qp = self.qp.cm_rtr(id, sgid_index, peer)?.cm_rts(id)?;
        Ok(self.rest.into_rings(qp))
    }

    /// Takes the queue pair the kernel's iWARP connection manager moved to RTS.
    pub(crate) fn moved_by_cm(self) -> (Rings, Vec<SendSlot>) {
        let qp = self.qp.moved_by_cm();
        self.rest.into_rings(qp)
    }
}

impl RingsRest {
    fn into_rings(self, qp: QueuePair<Rts>) -> (Rings, Vec<SendSlot>) {
        let slots = (0..self.geometry.send_slots)
            .map(|index| SendSlot {
                rings: self.id,
                index,
            })
            .collect();
        let rings = Rings {
            qp,
            reads: Mutex::new(Slab::new()),
            loans: Mutex::new(Slab::new()),
            send: self.send,
            recv: self.recv,
            growing: Mutex::new(()),
            pd: self.pd,
            geometry: self.geometry,
            id: self.id,
        };
        (rings, slots)
    }
}
