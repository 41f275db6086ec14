//! Safe RAII wrappers over libibverbs (through `rdma-sys`): the only module of the
//! project that contains `unsafe` code.
//!
//! # Layout
//!
//! | file          | concept                                                        |
//! |---------------|----------------------------------------------------------------|
//! | `context.rs`  | [`Context`]: device discovery, GID selection, port attributes  |
//! | `cm.rs`       | [`CmId`], [`EventChannel`]: rdma_cm's ids and events           |
//! | `cm_qp.rs`    | QP states through rdma_cm, with this side's own limits         |
//! | `pd.rs`       | [`ProtectionDomain`]                                           |
//! | `fork.rs`     | registered memory across `fork`: `ibv_fork_init` where needed  |
//! | `cq.rs`       | [`CompChannel`], [`CompletionQueue`] set-up and events         |
//! | `mr.rs`       | [`MemoryRegion`]: an owned, page-aligned, registered buffer    |
//! | `mw.rs`       | [`MemoryWindow`]: a type-2 window, lent per transfer           |
//! | `qp.rs`       | [`QueuePair`] set-up: RC, typed `Reset -> Init -> Rtr -> Rts`  |
//! | `qp_state.rs` | the typed QP states and the queried [`QpState`]                |
//! | `datapath.rs` | the hot path: posting work requests and polling completions    |
//! | `tracker/`    | [`Rings`]: rings, slot tokens, loans, the completion tracker   |
//! | `sendbuf.rs`  | [`SendBuf`]: `bytes::BufMut` over a send slot or pool buffer   |
//! | `wc.rs`       | [`Completion`], [`WcStatus`], [`WcOpcode`]: plain-Rust results |
//! | `error.rs`    | [`Error`]: every set-up failure, typed                         |
//!
//! # Teardown order
//!
//! Every child holds an `Arc` of its parents, so the types encode the order in which
//! libibverbs requires objects to be destroyed:
//!
//! ```text
//!   Context <- ProtectionDomain <- MemoryRegion
//!      ^   ^            ^
//!      |    \           |
//!      |  CompChannel <- CompletionQueue <- QueuePair (also holds the PD)
//! ```
//!
//! `Drop` of each wrapper calls the matching `ibv_destroy_*`/`ibv_dereg_*`/`ibv_close_*`,
//! logs a failure with `tracing` and never panics.
//!
//! # Memory the NIC can touch
//!
//! Posting a work request hands a byte range of a [`MemoryRegion`] to the NIC until its
//! completion is reaped. The compiler cannot see that hand-over, so the posting methods
//! that take registered memory are `unsafe fn`: they check bounds, keys and lengths, and
//! leave the caller one obligation, spelled out in their `# Safety` sections (the range
//! stays registered and untouched by the CPU until the completion is reaped; see CONTRIBUTING.md
//! rule 6). Inline sends copy the payload during the call and are safe.
//!
//! # Thread safety
//!
//! libibverbs is thread-safe: every verb may be called concurrently on the same object
//! from several threads (rdma-core `libibverbs/man/ibv_*`, and the providers serialise
//! queue access with their own locks, e.g. the rxe provider's `sq.lock`/`rq.lock`/`cq.lock`
//! spinlocks). That is what every `unsafe impl Send/Sync` below relies on.

// Items used only by the verbs tests (memory windows, queried QP states, inline sends) are
// compiled only for them (`cfg(test)`), the hostile test peer only with its feature.

mod async_event;
// rdma_cm: tested on real verbs here; the connection set-up moves onto it next
// (docs/fabrics.md, "Next").
#[cfg_attr(not(test), allow(dead_code))]
mod cm;
mod cm_event;
#[cfg_attr(not(test), allow(dead_code))]
mod cm_qp;
mod context;
mod cq;
mod cycles;
mod datapath;
mod error;
mod fork;
mod mr;
#[cfg(test)]
mod mw;
mod pd;
mod qp;
mod qp_state;
mod sendbuf;
#[cfg(feature = "unstable-test-peer")]
#[cfg(feature = "unstable-test-peer")]
pub(crate) mod test_peer;
mod time;
mod tracker;
mod wc;

#[cfg(test)]
mod tests;

pub(crate) use async_event::AsyncEvent;
#[cfg_attr(not(test), allow(unused_imports))]
pub(crate) use cm::{Binding, CmEvent, CmId, ConnParam};
pub(crate) use cm_event::{CmEventKind, EventChannel};
pub use context::rdma_available;
pub(crate) use context::{device_names, Context};
pub(crate) use cq::{register_channel, CompChannel, CompletionQueue};
pub(crate) use cycles::{Pace, SpinClock};

/// Makes the cycle counter the process's clock for the per-call paths
/// ([`rdmarpc_core::clock`]), if no other clock was installed: a device is in use, so
/// this process's calls are RDMA's, whose hot path reads the counter anyway.
pub(crate) fn install_clock() {
    rdmarpc_core::clock::install(time::now);
}
pub(crate) use datapath::{wc_buffer, RemoteBuf, SendOptions, MAX_RECV_BATCH};
pub(crate) use error::{Error, Result};
pub(crate) use fork::ensure_fork_safety;
pub(crate) use mr::{page_size, Access, MemoryRegion};
#[cfg(test)]
pub(crate) use mw::MemoryWindow;
pub(crate) use pd::ProtectionDomain;
pub(crate) use qp::{QpConfig, QueuePair, MAX_INITIATOR_DEPTH};
#[cfg(test)]
pub(crate) use qp_state::QpState;
pub(crate) use qp_state::{Init, RecvReady, Rts};
pub use sendbuf::SendBuf;
pub(crate) use sendbuf::{RegisteredTarget, Target};
pub(crate) use tracker::{Event, Lent, PreparedRings, RecvSlot, RingGeometry, Rings, SendSlot};
#[cfg(test)]
pub(crate) use wc::WcOpcode;
pub(crate) use wc::{Completion, WcStatus, WrId};

/// Default number of entries of a completion queue.
///
/// Sized so that one CQ shared by the send and the receive queue of one QP with default
/// depths can never overflow (a CQ overflow moves every QP on it to the error state).
pub(crate) const DEFAULT_CQ_DEPTH: u32 = 1024;

/// Default maximum of outstanding send work requests (SEND and RDMA READ) per QP.
pub(crate) const DEFAULT_MAX_SEND_WR: u32 = 256;

/// Default maximum of posted receive work requests per QP.
pub(crate) const DEFAULT_MAX_RECV_WR: u32 = 256;

/// Inline data requested per send WQE: payloads up to this size are copied into the WQE
/// (no DMA read of the buffer, no lkey check), which saves a PCIe round trip on hardware.
/// The provider may grant more; [`QueuePair::max_inline`] reports what was granted.
pub(crate) const MAX_INLINE: u32 = 64;

const _: () = assert!(DEFAULT_CQ_DEPTH >= DEFAULT_MAX_SEND_WR + DEFAULT_MAX_RECV_WR);
const _: () = assert!(MAX_RECV_BATCH as u32 <= DEFAULT_MAX_RECV_WR);
const _: () = assert!(MAX_INLINE > 0 && MAX_INLINE <= 1024);
