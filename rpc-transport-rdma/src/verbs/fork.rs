//! Registered memory across `fork`: the parent's registered pages must stay the pages the
//! NIC reads and writes after the process forks (to run a helper, a health probe).
//!
//! Before Linux 5.13, `fork` made every private page copy-on-write in the parent too: the
//! parent's next write to a registered buffer moved it to a fresh page the NIC did not
//! know, and sends carried stale bytes (rdma-core's `ibv_fork_init(3)` works around it by
//! excluding registered ranges from the child with `madvise(MADV_DONTFORK)`, at a system
//! call per registration). Since 5.13 the kernel copies pages pinned for DMA into the
//! child at fork time instead, and the parent keeps its pages: rdma-core then reports
//! `IBV_FORK_UNNEEDED`. `posix_spawn` (what `std::process::Command` uses where it can)
//! shares the address space until `exec` and copies nothing either way.

use std::sync::OnceLock;

use rdma_sys::{ibv_fork_init, ibv_is_fork_initialized, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED};

/// How registered memory survives a fork of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForkSafety {
    /// The kernel copies pinned pages into the child (Linux 5.13 and later).
    KernelCopies,
    /// rdma-core excludes registered ranges from the child (`ibv_fork_init`).
    DontFork,
    /// Neither: a fork while memory is registered may corrupt what is sent.
    Unprotected,
}

/// Makes registered memory fork-safe where the kernel does not: `ibv_fork_init` on old
/// kernels, before librdmacm opens the devices (the rdma_cm service starts) and before the
/// first registration. Once per process.
pub(crate) fn ensure_fork_safety() -> ForkSafety {
    static SAFETY: OnceLock<ForkSafety> = OnceLock::new();
    *SAFETY.get_or_init(|| {
        // SAFETY: ibv_is_fork_initialized(3) takes no arguments and only reads
        // libibverbs' state and the kernel's capability.
        let status = unsafe { ibv_is_fork_initialized() };
        let safety = match status {
            IBV_FORK_UNNEEDED => ForkSafety::KernelCopies,
            IBV_FORK_ENABLED => ForkSafety::DontFork,
            // SAFETY: ibv_fork_init(3) takes no arguments; it must come before memory is
            // registered, which this runs ahead of (the first device opened).
            _ => match unsafe { ibv_fork_init() } {
                0 => ForkSafety::DontFork,
                ret => {
                    let error = super::Error::from_ret("ibv_fork_init", ret);
                    tracing::warn!(%error, "registered memory is not fork-safe: a fork of this process while RDMA connections are up may corrupt what they send");
                    ForkSafety::Unprotected
                }
            },
        };
        tracing::debug!(?safety, "registered memory across fork");
        safety
    })
}
