//! [`RdmaConfig`]: the RDMA transport's tunables.

use std::time::Duration;

use crate::protocol::{PREFIX_LEN, RENDEZVOUS_LEN};

/// Smallest slot that can carry a rendezvous descriptor or a control message.
pub const MIN_SLOT_SIZE: u32 = 256;

const _: () = assert!(MIN_SLOT_SIZE as usize >= PREFIX_LEN + RENDEZVOUS_LEN);

/// Settings of the RDMA transport. Both ends choose their own; ring geometry is exchanged
/// in the handshake.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RdmaConfig {
    /// RDMA device to use, e.g. `"mlx5_0"` or `"rxe0"`. Default: the device that owns the
    /// local IP address of the side-channel socket (what rdma_cm would pick); see
    /// docs/fabrics.md.
    pub device: Option<String>,
    /// Port of the device to use, from 1. Default: the port that owns the local address
    /// (on RoCE), or the first active one with a LID (on InfiniBand).
    pub port: Option<u8>,
    /// GID table index to send from (`sgid_index`), e.g. to pick a RoCE v1 entry or a
    /// VLAN's. Default: the RoCE v2 entry that holds the local address (else its RoCE v1
    /// entry); on InfiniBand the port GID, index 0.
    pub gid_index: Option<u8>,
    /// Slots the send ring and the receive ring may grow to. Default 64. More slots allow
    /// more small messages in flight before a sender waits for credits; each costs
    /// `slot_size` of registered memory twice per connection.
    pub ring_slots: u32,
    /// Slots each ring starts with (at least 4; at most `ring_slots`). Default 4: an idle
    /// connection registers 2 x 4 x `slot_size` (64 KiB by default). A ring doubles when
    /// the peer runs out of credit, up to `ring_slots`.
    pub initial_ring_slots: u32,
    /// Bytes per slot, at least [`MIN_SLOT_SIZE`]. Default 8 KiB. Messages whose frame
    /// (plus the 16-byte slot prefix) fits travel eagerly by SEND.
    pub slot_size: u32,
    /// Frames larger than this many bytes go by rendezvous (RDMA READ by the receiver)
    /// even if they would fit a slot. Default: no lower threshold than the slot.
    pub eager_threshold: Option<usize>,
    /// Largest message payload accepted or sent. Default 4 MiB (as gRPC).
    pub max_message_size: usize,
    /// How long the driver of a shared completion queue busy-polls it, once idle,
    /// before it sleeps on the completion channel. Default 50 µs: low latency under load
    /// at the price of some CPU while idle-but-busy. While completions come at a steady
    /// pace, the driver spins twice their averaged gap instead, when that is longer and
    /// within `await_spin` (a server answering one call at a time reaps the next request
    /// without sleeping; the price is a CPU's worth of polling while completions come
    /// every `await_spin / 2` or sooner). The spin's bound is read from the CPU's cycle
    /// counter rather than the clock. A shared CQ takes the setting of the connection
    /// that created it.
    pub poll_spin: Duration,
    /// How long the driver keeps busy-polling, instead of `poll_spin`, while the
    /// connections on its CQ have sent more frames than they received (a client awaiting
    /// replies): the reply is then reaped without the completion channel's wake-up.
    /// Also how long a task alone on its CQ polls it itself for what it waits for (a
    /// caller for its response, an idle server connection for its next request;
    /// `Connection::spin_until`), holding its worker meanwhile: only on a multi-threaded
    /// runtime, and fewer such tasks at once than it has workers; 0 turns that off.
    /// Default 1 ms.
    pub await_spin: Duration,
    /// A ping is sent after this much silence from the peer. Default 1 s.
    pub ping_interval: Duration,
    /// The peer is declared dead after this much silence (pings unanswered); its calls
    /// fail with `UNAVAILABLE`. Default 5 s.
    pub ping_timeout: Duration,
    /// Largest single RDMA READ work request; larger transfers are split into several
    /// READs in flight. Default 1 MiB.
    pub read_chunk: usize,
    /// Idle rendezvous buffers kept registered per connection and direction. Default
    /// 64 MiB.
    pub pool_keep_bytes: usize,
    /// Registered memory of received rendezvous frames the application may keep per
    /// connection (their `bytes` fields are slices of the READ target; the read-done
    /// goes out when the frame is taken, so the peer's loan never waits for the
    /// application). Beyond it, payloads are copied out. Default 16 MiB.
    pub keep_bytes: usize,
    /// Bytes a SEND may carry inline (copied into the work request at post time, so the
    /// NIC does not DMA-read the slot: one PCIe round trip less on hardware). Default 256,
    /// enough for a small call's frame (16-byte slot prefix, 40-byte header, metadata and
    /// payload); at most 1024. The provider may grant more; where it refuses the size
    /// (Soft-iWARP takes at most 80), the queue pair is created with less, down to none,
    /// and only what was granted goes inline.
    pub max_inline: u32,
    /// RC ACK timeout exponent (4.096 µs × 2^n). Default 14 (~67 ms): with 7 retries a
    /// dead link is reported within about half a second.
    pub ack_timeout: u8,
    /// How long the side-channel handshake may take. Default 10 s.
    pub handshake_timeout: Duration,
    /// Bytes of rendezvous frames lent to the peer at once (lent and not yet read, or
    /// being built); a large send waits while it is spent, so a peer that does not read
    /// cannot make this side register more. A frame larger than the budget goes alone.
    /// `None` (default): twice the largest frame, at least 16 MiB.
    pub lend_budget: Option<usize>,
    /// A buffer lent to the peer and not read (no read-done) for this long closes the
    /// connection. Default 60 s.
    pub loan_timeout: Duration,
    /// Rendezvous frames lent at once at most (each holds a memory window and a pool
    /// buffer until the peer's read-done). Default 128. Announced in the handshake as the
    /// most this side accepts to be lent, together with `lend_budget`: each
    /// side lends within the smaller of its own and the peer's figures, and a peer that
    /// lends beyond them is closed.
    pub max_loans: u16,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            device: None,
            port: None,
            gid_index: None,
            ring_slots: 64,
            initial_ring_slots: 4,
            slot_size: 8 * 1024,
            eager_threshold: None,
            max_message_size: rdmarpc_core::DEFAULT_MAX_MESSAGE_SIZE,
            poll_spin: Duration::from_micros(50),
            await_spin: Duration::from_millis(1),
            ping_interval: Duration::from_secs(1),
            ping_timeout: Duration::from_secs(5),
            read_chunk: 1 << 20,
            pool_keep_bytes: 64 << 20,
            keep_bytes: 16 << 20,
            max_inline: 256,
            ack_timeout: 14,
            handshake_timeout: Duration::from_secs(10),
            lend_budget: None,
            loan_timeout: Duration::from_secs(60),
            max_loans: 128,
        }
    }
}

impl RdmaConfig {
    /// Slots each ring starts with: `initial_ring_slots`, at most `ring_slots`.
    pub(crate) fn initial_slots(&self) -> u32 {
        self.initial_ring_slots.clamp(4, self.ring_slots.max(4))
    }

    /// Sets [`RdmaConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rdmarpc_transport_rdma::RdmaConfig::default();
    /// config.max_message_size(64 << 20).ring_slots(128).slot_size(4096);
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`RdmaConfig::ring_slots`].
    pub fn ring_slots(&mut self, slots: u32) -> &mut Self {
        self.ring_slots = slots;
        self
    }

    /// Sets [`RdmaConfig::slot_size`].
    pub fn slot_size(&mut self, bytes: u32) -> &mut Self {
        self.slot_size = bytes;
        self
    }

    /// Checks the invariants between the settings.
    ///
    /// # Errors
    /// A message naming the bad setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.slot_size < MIN_SLOT_SIZE {
            return Err(format!(
                "slot_size {} is below the minimum {MIN_SLOT_SIZE}",
                self.slot_size
            ));
        }
        if !(4..=4096).contains(&self.ring_slots) {
            return Err(format!(
                "ring_slots {} is outside 4..=4096",
                self.ring_slots
            ));
        }
        if self.initial_ring_slots < 4 {
            return Err(format!(
                "initial_ring_slots {} is below 4",
                self.initial_ring_slots
            ));
        }
        if self.ping_timeout <= self.ping_interval {
            return Err("ping_timeout must be longer than ping_interval".into());
        }
        if self.max_inline > 1024 {
            return Err(format!("max_inline {} is above 1024", self.max_inline));
        }
        if self.max_loans == 0 {
            return Err("max_loans must be at least 1".into());
        }
        if self.port == Some(0) {
            return Err("port numbers start at 1".into());
        }
        if self.read_chunk < 4096 {
            return Err("read_chunk must be at least 4096".into());
        }
        Ok(())
    }

    /// The lending budget in bytes (see [`RdmaConfig::lend_budget`]), a whole number of
    /// KiB (as the handshake carries it), at least 64 KiB.
    pub(crate) fn lend_budget(&self) -> usize {
        let bytes = self.lend_budget.unwrap_or_else(|| {
            (2 * crate::connection::max_frame(self.max_message_size)).max(16 << 20)
        });
        (bytes.min(u32::MAX as usize * 1024) / 1024 * 1024).max(64 * 1024)
    }

    /// Locked memory a connection reserves at set-up: both rings at their full size
    /// (`2 x ring_slots x slot_size`, each growth step a registration of whole pages),
    /// so that they grow without failing, and what a hardware provider pins for the
    /// queue pair's own queues (send and receive work requests, a doorbell page): about
    /// 1.06 MiB by default. A set-up that cannot reserve it within the process's
    /// locked-memory limit is refused (`auto://` uses TCP instead). Rendezvous buffers
    /// are charged beyond it, to what the process has left.
    pub fn pinned_reserve(&self) -> u64 {
        let page = crate::verbs::page_size() as u64;
        let pages = |bytes: u64| bytes.div_ceil(page) * page;
        let slot = u64::from(self.slot_size);
        let max = u64::from(self.ring_slots.max(4));
        // A ring starts with its initial slots and doubles up to its maximum, one
        // registration per step (`verbs/tracker/ring.rs`).
        let mut have = u64::from(self.initial_slots());
        let mut ring = pages(have * slot);
        while have < max {
            let step = have.min(max - have);
            ring += pages(step * slot);
            have += step;
        }
        // Work requests as large as a provider makes them with inline data (512 bytes a
        // send, 64 a receive), and a doorbell page: pinned on hardware (mlx5 registers
        // its queues), not on Soft-RoCE or Soft-iWARP.
        let send_wrs = max + crate::driver::READ_WR_BUDGET as u64;
        let queues = pages(send_wrs * 512) + pages(max * 64) + page;
        2 * ring + queues
    }

    /// Largest frame that travels eagerly (SEND); larger ones go by RDMA READ.
    pub fn eager_limit(&self) -> usize {
        let slot = self.slot_size as usize - PREFIX_LEN;
        self.eager_threshold.map_or(slot, |t| t.min(slot))
    }
}
