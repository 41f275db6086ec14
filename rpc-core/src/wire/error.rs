//! [`FrameError`]: why a frame could not be read.

/// Why a frame could not be read. Any of these closes the connection it came on (the
/// peer's byte stream can no longer be trusted), never the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The first two bytes are not the protocol's magic.
    #[error("bad magic {0:#06x} (not a frame of this protocol)")]
    BadMagic(u16),
    /// A protocol version this build does not speak.
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u8),
    /// An unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Flag bits this version does not define.
    #[error("unknown flag bits {0:#04x}")]
    UnknownFlags(u8),
    /// The reserved header field is not zero.
    #[error("reserved header field is not zero")]
    ReservedNotZero,
    /// The metadata block is larger than [`MAX_METADATA_LEN`](crate::metadata::MAX_METADATA_LEN).
    #[error("metadata block of {0} bytes exceeds the limit")]
    MetadataTooLarge(usize),
    /// The metadata block is malformed.
    #[error("malformed metadata: {0}")]
    BadMetadata(&'static str),
    /// The buffer's length does not match the lengths the header declares.
    #[error("frame length {actual} does not match the header's {declared}")]
    LengthMismatch {
        /// Length the header declares.
        declared: usize,
        /// Length received.
        actual: usize,
    },
    /// A frame's declared payload is larger than the transport's configured maximum.
    #[error("frame payload of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Declared payload length.
        len: usize,
        /// Configured maximum.
        max: usize,
    },
}
