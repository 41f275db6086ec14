//! A whole frame: header, metadata and payload, parsed in place.

use bytes::BufMut;

use super::error::FrameError;
use super::header::{Flags, Header, HEADER_LEN};
use crate::Metadata;

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
