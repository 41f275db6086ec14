//! [`PreparedRings`]: a queue pair and its rings before the peer's endpoint is known.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use slab::Slab;

use super::ring::{Ring, RingGeometry};
use super::slots::SendSlot;
use super::NEXT_RINGS_ID;
use super::{post_segment, Rings};
use crate::verbs::{
    CompletionQueue, Init, ProtectionDomain, QpConfig, QpEndpoint, QueuePair, Result,
};

/// A connection's QP in INIT with its rings registered and every receive slot posted:
/// what exists before the peer's endpoint is known.
#[derive(Debug)]
pub(crate) struct PreparedRings {
    pub(super) qp: QueuePair<Init>,
    pub(super) send: Ring,
    pub(super) recv: Ring,
    pub(super) pd: Arc<ProtectionDomain>,
    pub(super) geometry: RingGeometry,
    pub(super) id: u64,
}

impl PreparedRings {
    /// Creates the QP on `cq`, registers both rings in `pd` (no remote access) and posts
    /// every receive slot.
    ///
    /// # Errors
    /// Any verbs failure (QP creation, registration, e.g. over the memlock limit, posting).
    pub(crate) fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        qp_config: &QpConfig,
        geometry: RingGeometry,
    ) -> Result<PreparedRings> {
        let send = Ring::new(pd, geometry.send_slots, geometry.slot_size)?;
        let recv = Ring::new(pd, geometry.recv_slots, geometry.slot_size)?;
        let qp = QueuePair::new(pd, cq, cq, qp_config)?.into_init()?;
        post_segment(&qp, &recv, 0..geometry.recv_slots)?;
        Ok(PreparedRings {
            qp,
            send,
            recv,
            pd: pd.clone(),
            geometry,
            id: NEXT_RINGS_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The local QP number.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// What the peer needs to connect to this QP.
    pub(crate) fn endpoint(&self) -> QpEndpoint {
        self.qp.endpoint()
    }

    /// Connects to the peer (INIT -> RTR -> RTS) and hands out every send slot.
    ///
    /// # Errors
    /// A failed state transition.
    pub(crate) fn connect(self, remote: &QpEndpoint) -> Result<(Rings, Vec<SendSlot>)> {
        let qp = self.qp.into_rtr(remote)?.into_rts()?;
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
        Ok((rings, slots))
    }
}
