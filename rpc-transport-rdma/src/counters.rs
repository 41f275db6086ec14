//! [`RdmaCounters`]: what a connection did, for tests, logs and load reports.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of one connection's transport counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaCounters {
    /// Frames sent eagerly: encoded into a send slot, one SEND (or several frames in one
    /// SEND: `batches`).
    pub eager_sends: u64,
    /// Frames sent by rendezvous: a descriptor by SEND, the frame pulled by the peer.
    pub rendezvous_sends: u64,
    /// Frames this side pulled with RDMA READ.
    pub rendezvous_reads: u64,
    /// Bytes pulled with RDMA READ.
    pub bytes_read: u64,
    /// Frames received eagerly.
    pub eager_receives: u64,
    /// Messages that carried several eager frames (frames that waited behind sends in
    /// flight, then went as one message).
    pub batches: u64,
    /// Control messages sent (credit returns, read-done, ping, pong).
    pub control_sends: u64,
    /// Times a sender had to wait for a credit or a free send slot.
    pub credit_stalls: u64,
    /// Rendezvous buffers registered (registration happens once per buffer, then reuse).
    pub registrations: u64,
    /// Send slots now (the send ring grows with the peer's grants).
    pub send_slots: u64,
    /// Receive slots posted for the peer now (the ring grows when the peer runs short).
    pub recv_slots: u64,
    /// Fatal errors (the connection failed).
    pub errors: u64,
    /// Received rendezvous frames handed to the application as kept memory (their
    /// `bytes` fields are slices of the READ target, not copies).
    pub kept_frames: u64,
    /// Frames sent with their large field lent from a kept received frame (a gathered
    /// send of a message that forwards or echoes what it received): no copy.
    pub lent_in_place: u64,
    /// Registered bytes of kept frames the application holds now (at most
    /// [`RdmaConfig::keep_bytes`](crate::RdmaConfig::keep_bytes)).
    pub kept_bytes: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) eager_sends: AtomicU64,
    pub(crate) rendezvous_sends: AtomicU64,
    pub(crate) rendezvous_reads: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) eager_receives: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) control_sends: AtomicU64,
    pub(crate) credit_stalls: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) kept_frames: AtomicU64,
    pub(crate) lent_in_place: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(
        &self,
        registrations: u64,
        slots: (u32, u32),
        kept_bytes: u64,
    ) -> RdmaCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RdmaCounters {
            eager_sends: get(&self.eager_sends),
            rendezvous_sends: get(&self.rendezvous_sends),
            rendezvous_reads: get(&self.rendezvous_reads),
            bytes_read: get(&self.bytes_read),
            eager_receives: get(&self.eager_receives),
            batches: get(&self.batches),
            control_sends: get(&self.control_sends),
            credit_stalls: get(&self.credit_stalls),
            registrations,
            send_slots: u64::from(slots.0),
            recv_slots: u64::from(slots.1),
            errors: get(&self.errors),
            kept_frames: get(&self.kept_frames),
            lent_in_place: get(&self.lent_in_place),
            kept_bytes,
        }
    }
}
