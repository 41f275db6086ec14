//! gRPC's length-prefixed messages in an HTTP/2 body: one byte of flags (bit 0:
//! compressed), four bytes of length (big endian), the message.

use bytes::{Buf, Bytes, BytesMut};
use rdmarpc_core::Status;

use crate::compress::{Encoding, MIN_COMPRESSED};

/// The prefix of each message.
pub(crate) const PREFIX_LEN: usize = 5;

/// Cuts messages out of the chunks of a body as they arrive.
#[derive(Debug, Default)]
pub(crate) struct Deframer {
    buf: BytesMut,
    /// Cuts responses (a client's), not requests: for the errors' words.
    responses: bool,
    /// How the peer compresses the messages whose flag says so (`grpc-encoding`).
    encoding: Option<Encoding>,
    /// Bytes of the body (prefixes included) cut into messages since
    /// [`Deframer::take_consumed`] last asked.
    consumed: usize,
}

impl Deframer {
    /// A deframer of a response body, on a client.
    pub(crate) fn for_responses() -> Deframer {
        Deframer {
            buf: BytesMut::new(),
            responses: true,
            encoding: None,
            consumed: 0,
        }
    }

    /// The peer's `grpc-encoding`, for messages flagged compressed.
    pub(crate) fn set_encoding(&mut self, encoding: Option<Encoding>) {
        self.encoding = encoding;
    }

    /// Adds a chunk of the body.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes held (a message in progress).
    pub(crate) fn held(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of the body cut into messages since the last call: what the messages
    /// yielded since then took of what was pushed.
    pub(crate) fn take_consumed(&mut self) -> usize {
        std::mem::take(&mut self.consumed)
    }

    /// The next complete message, if one is here.
    ///
    /// # Errors
    /// A compressed message (no encoding was negotiated), or one longer than `max` (told
    /// as soon as its prefix is here, before its body is buffered).
    pub(crate) fn next(&mut self, max: usize) -> Result<Option<Bytes>, Status> {
        self.next_charged(max, &mut |_| Ok(()))
    }

    /// [`Deframer::next`], with `charge` asked for the room of a compressed message's
    /// output before it inflates, a step at a time (its error fails the message).
    ///
    /// # Errors
    /// As [`Deframer::next`], and `charge`'s.
    pub(crate) fn next_charged(
        &mut self,
        max: usize,
        charge: &mut dyn FnMut(usize) -> Result<(), Status>,
    ) -> Result<Option<Bytes>, Status> {
        if self.buf.len() < PREFIX_LEN {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if flags & 1 != 0 && self.encoding.is_none() {
            return Err(Status::internal(
                "a compressed message, but no grpc-encoding was sent",
            ));
        }
        if len > max {
            let what = if self.responses {
                "response"
            } else {
                "request"
            };
            return Err(Status::resource_exhausted(format!(
                "{what} message of {len} bytes exceeds the maximum of {max}"
            )));
        }
        if self.buf.len() < PREFIX_LEN + len {
            return Ok(None);
        }
        self.buf.advance(PREFIX_LEN);
        let message = self.buf.split_to(len).freeze();
        self.consumed += PREFIX_LEN + len;
        match (flags & 1, self.encoding) {
            (1, Some(encoding)) => encoding.decompress(&message, max, charge).map(Some),
            _ => Ok(Some(message)),
        }
    }
}

/// `message` with its prefix, compressed with `encoding` when there is one and the
/// message is long enough to gain from it.
pub(crate) fn frame_with(message: &[u8], encoding: Option<Encoding>) -> Bytes {
    match encoding {
        Some(encoding) if message.len() >= MIN_COMPRESSED => {
            let compressed = encoding.compress(message);
            let mut out = BytesMut::with_capacity(PREFIX_LEN + compressed.len());
            out.extend_from_slice(&[1]);
            out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
            out.extend_from_slice(&compressed);
            out.freeze()
        }
        _ => frame(message),
    }
}

/// `message` with its prefix (not compressed).
pub(crate) fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmarpc_core::Code;

    #[test]
    fn messages_are_cut_across_chunks_and_lies_are_refused_early() {
        let mut d = Deframer::default();
        let two = [frame(b"hello").to_vec(), frame(b"").to_vec()].concat();
        for byte in &two[..7] {
            d.push(&[*byte]);
            assert_eq!(d.next(100).unwrap(), None);
        }
        d.push(&two[7..]);
        assert_eq!(d.next(100).unwrap().unwrap(), &b"hello"[..]);
        assert_eq!(d.next(100).unwrap().unwrap(), &b""[..]);
        assert_eq!(d.next(100).unwrap(), None);
        assert_eq!(d.held(), 0);
        // A prefix claiming 4 GiB is refused before any of it arrives.
        d.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(d.next(1 << 20).unwrap_err().code(), Code::ResourceExhausted);
        let mut c = Deframer::default();
        c.push(&[1, 0, 0, 0, 1, 7]);
        assert_eq!(c.next(100).unwrap_err().code(), Code::Internal);
    }
}
