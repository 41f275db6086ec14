//! A whole frame: header, metadata and payload, parsed in place.

use bytes::BufMut;

use crate::wire::{Flags, Header, HEADER_LEN};
use crate::Metadata;

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

/// A received frame, borrowing the transport's receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The header.
    pub header: Header,
    /// The raw metadata block (decode with [`Metadata::decode`]).
    pub metadata: &'a [u8],
    /// The payload (empty when [`Flags::DISCARDED`] is set).
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Parses a complete frame as a transport delivered it.
    ///
    /// # Errors
    /// A [`FrameError`] when the header is invalid or the buffer's length does not match it.
    pub fn parse(buf: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        let header = Header::decode(buf)?.ok_or(FrameError::LengthMismatch {
            declared: HEADER_LEN,
            actual: buf.len(),
        })?;
        if header.flags.contains(Flags::DISCARDED) {
            return Ok(Frame {
                header,
                metadata: &[],
                payload: &[],
            });
        }
        if buf.len() != header.frame_len() {
            return Err(FrameError::LengthMismatch {
                declared: header.frame_len(),
                actual: buf.len(),
            });
        }
        let meta_end = HEADER_LEN + header.meta_len as usize;
        Ok(Frame {
            header,
            metadata: &buf[HEADER_LEN..meta_end],
            payload: &buf[meta_end..],
        })
    }

    /// Whether the transport discarded this frame's body as oversized.
    pub fn is_discarded(&self) -> bool {
        self.header.flags.contains(Flags::DISCARDED)
    }
}

/// Writes the header (with `meta_len` taken from `metadata`) and the metadata block into
/// `buf`; the caller then writes exactly `header.payload_len` payload bytes.
pub fn encode_head(header: &mut Header, metadata: &Metadata, buf: &mut impl BufMut) {
    header.meta_len = metadata.encoded_len() as u32;
    buf.put_slice(&header.encode());
    metadata.encode(buf);
}
