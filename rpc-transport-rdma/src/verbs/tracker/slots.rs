//! The tokens of slot ownership ([`SendSlot`], [`RecvSlot`]), the work request tags,
//! and the events a completion yields.

use crate::pool::LargeBuf;
use crate::verbs::WcStatus;

/// Work-request id tags (top byte of the 64-bit id); the rest is the slot index or the
/// READ's key in the tracker.
pub(super) const TAG_SEND: u64 = 1 << 56;

pub(super) const TAG_RECV: u64 = 2 << 56;

pub(super) const TAG_READ: u64 = 3 << 56;

pub(super) const TAG_MASK: u64 = 0xff << 56;

/// Exclusive ownership of one send slot: its bytes may be written.
#[derive(Debug)]
pub(crate) struct SendSlot {
    pub(super) rings: u64,
    pub(super) index: u32,
}

/// Exclusive ownership of one received slot: its first `len` bytes hold a message.
#[derive(Debug)]
pub(crate) struct RecvSlot {
    pub(super) rings: u64,
    pub(super) index: u32,
    pub(super) len: u32,
}

/// A completion, with the ownership it returns.
#[derive(Debug)]
pub(crate) enum Event {
    /// A SEND completed: its slot is free again.
    Sent {
        slot: SendSlot,
        status: std::result::Result<(), WcStatus>,
    },
    /// A message arrived in `slot` (on success).
    Received {
        slot: Option<RecvSlot>,
        status: std::result::Result<(), WcStatus>,
    },
    /// Every chunk of a READ completed: `buf` holds the data (on success).
    Read {
        buf: LargeBuf,
        tag: u64,
        status: std::result::Result<(), WcStatus>,
    },
    /// Every chunk of a bounced READ completed: `bytes` holds the frame (on success),
    /// and its bounce `slots` are free again.
    Bounced {
        bytes: Vec<u8>,
        slots: Vec<SendSlot>,
        tag: u64,
        status: std::result::Result<(), WcStatus>,
    },
}
