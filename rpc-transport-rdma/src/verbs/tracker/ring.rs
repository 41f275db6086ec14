//! One registered ring of slots, grown by whole segments.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::verbs::{Access, MemoryRegion, ProtectionDomain, Result};

/// Geometry of a connection's rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingGeometry {
    /// Send slots to start with.
    pub(crate) send_slots: u32,
    /// Receive slots to start with (the credits first granted to the peer).
    pub(crate) recv_slots: u32,
    /// Slots either ring may grow to (the QP is created for this many).
    pub(crate) max_slots: u32,
    /// Bytes per slot.
    pub(crate) slot_size: u32,
}

/// Segments a ring may have: the first, then each growth.
pub(super) const MAX_SEGMENTS: usize = 8;

/// A ring of slots registered in segments as it grows: segment `k` holds slots
/// `start..start + len`. Segments are only ever added, and live as long as the ring.
#[derive(Debug)]
pub(super) struct Ring {
    pub(super) segments: [OnceLock<Segment>; MAX_SEGMENTS],
    /// Slots in all segments.
    pub(super) slots: AtomicU32,
    pub(super) slot_size: usize,
}

#[derive(Debug)]
pub(super) struct Segment {
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) region: MemoryRegion,
}

impl Ring {
    pub(super) fn new(pd: &Arc<ProtectionDomain>, slots: u32, slot_size: u32) -> Result<Ring> {
        let ring = Ring {
            segments: Default::default(),
            slots: AtomicU32::new(0),
            slot_size: slot_size as usize,
        };
        ring.grow(pd, slots)?;
        Ok(ring)
    }

    pub(super) fn slots(&self) -> u32 {
        self.slots.load(Ordering::Acquire)
    }

    /// The region holding slot `index`, and the slot's offset in it.
    ///
    /// # Panics
    /// If the slot is outside the ring (a bug: tokens are made only for its slots).
    pub(super) fn locate(&self, index: u32) -> (&MemoryRegion, usize) {
        for segment in self.segments.iter().map_while(OnceLock::get) {
            if (segment.start..segment.start + segment.len).contains(&index) {
                let offset = (index - segment.start) as usize * self.slot_size;
                return (&segment.region, offset);
            }
        }
        panic!("slot {index} outside its ring");
    }

    /// Registers a segment of `n` more slots (callers serialize growth): the new slots'
    /// indices, or `None` if every segment is in use.
    pub(super) fn grow(
        &self,
        pd: &Arc<ProtectionDomain>,
        n: u32,
    ) -> Result<Option<std::ops::Range<u32>>> {
        let Some(free) = self.segments.iter().find(|s| s.get().is_none()) else {
            return Ok(None);
        };
        let start = self.slots();
        let region = MemoryRegion::new(pd, self.slot_size * n as usize, Access::Local)?;
        if free
            .set(Segment {
                start,
                len: n,
                region,
            })
            .is_err()
        {
            panic!("ring growth is serialized by its callers");
        }
        self.slots.store(start + n, Ordering::Release);
        Ok(Some(start..start + n))
    }
}
