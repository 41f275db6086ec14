//! The error type of the verbs layer.

use std::io;

/// Result of a verbs set-up or posting operation.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure of the verbs layer, one variant per cause so callers can fall back (e.g. to
/// TCP on [`Error::NoDevice`]) or report precisely. Completion errors are not here: they
/// arrive as [`WcStatus`](super::WcStatus) in a [`Completion`](super::Completion).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum Error {
    /// The host has no RDMA device at all: `ibv_get_device_list` returned NULL (errno
    /// `ENOSYS` on a kernel without InfiniBand support) or an empty list.
    #[error("no RDMA device on this host: {source}")]
    NoDevice {
        /// The errno of `ibv_get_device_list`, or `ENODEV` for an empty list.
        #[source]
        source: io::Error,
    },
    /// No device, port or GID is usable for the connection; says which is missing.
    #[error(transparent)]
    NoPath(#[from] crate::fabric::NoPath),
    /// The peer cannot be reached from the chosen port (a LID or GID it cannot route
    /// to).
    #[error(transparent)]
    Path(#[from] crate::fabric::PathError),
    /// A verb failed; `source` holds the errno it reported.
    #[error("{verb} failed: {source}")]
    Verb {
        /// The name of the failing verb, e.g. `"ibv_modify_qp(RTR)"`.
        verb: &'static str,
        /// The errno: `from_raw_os_error(ret)` for return-code verbs, `last_os_error()`
        /// for verbs that return NULL or -1.
        #[source]
        source: io::Error,
    },
    /// A byte range does not lie inside its memory region.
    #[error("range {offset}+{len} is outside the memory region of {region_len} bytes")]
    OutOfBounds {
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Length of the memory region.
        region_len: usize,
    },
    /// A work request asked for more than the QP or the wire allows (e.g. an inline send
    /// larger than the inline size granted, or a length above `u32::MAX`).
    #[error("{what}: {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The requested size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Registering would take the process over its locked-memory limit (checked before
    /// `ibv_reg_mr`, which would fail with `ENOMEM`).
    #[error(transparent)]
    Memlock(Box<crate::memlock::Exhausted>),
    /// The memory for a region could not be allocated.
    #[error("allocating {len} bytes for a memory region failed")]
    Alloc {
        /// The requested size.
        len: usize,
    },
    /// A [`MemoryRegion`](super::MemoryRegion) of another protection domain (or device)
    /// was used with a queue pair.
    #[error("memory region belongs to another protection domain")]
    ForeignRegion,
    /// An operation the object does not allow (e.g. binding a window over a region
    /// registered without `MW_BIND`).
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was attempted.
        what: &'static str,
    },
}

impl Error {
    /// Wraps the errno *value* returned by a return-code verb (`ibv_modify_qp`,
    /// `ibv_post_send`, ...), which return it directly instead of setting `errno`.
    pub(crate) fn from_ret(verb: &'static str, ret: i32) -> Self {
        // A few providers return -1 and set errno instead; both cases are covered.
        let source = if ret > 0 {
            io::Error::from_raw_os_error(ret)
        } else {
            io::Error::last_os_error()
        };
        Error::Verb { verb, source }
    }

    /// Whether memory could not be pinned: the locked-memory account refused it, or the
    /// kernel did (`ENOMEM` from a registration: a limit the account did not know of).
    pub(crate) fn is_out_of_locked_memory(&self) -> bool {
        match self {
            Error::Memlock(_) => true,
            Error::Verb { source, .. } => source.raw_os_error() == Some(libc::ENOMEM),
            _ => false,
        }
    }

    /// Whether the verb failed with `EADDRINUSE`: on iWARP, an rdma_cm port is also a
    /// TCP port of the host, which a host socket may hold although rdma_cm gave it out
    /// (rdma_cm allocates ports in a space of its own).
    pub(crate) fn address_in_use(&self) -> bool {
        matches!(self, Error::Verb { source, .. } if source.kind() == io::ErrorKind::AddrInUse)
    }

    /// Whether a device node could not be opened for want of access (`EACCES`, `EPERM`)
    /// or is not there (`ENOENT`: a container without `/dev/infiniband`).
    pub(crate) fn no_access(&self) -> bool {
        matches!(self, Error::Verb { source, .. } if matches!(source.kind(), io::ErrorKind::PermissionDenied | io::ErrorKind::NotFound))
    }

    /// Wraps `errno` after a verb that returned NULL or -1.
    pub(crate) fn last_os(verb: &'static str) -> Self {
        Error::Verb {
            verb,
            source: io::Error::last_os_error(),
        }
    }
}

/// Turns a return-code verb's result into `Ok(())` or [`Error::Verb`].
pub(crate) fn check_ret(verb: &'static str, ret: i32) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(Error::from_ret(verb, ret))
    }
}
