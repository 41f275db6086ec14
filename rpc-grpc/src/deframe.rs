//! gRPC's length-prefixed messages in an HTTP/2 body: one byte of flags (bit 0:
//! compressed), four bytes of length (big endian), the message.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rdmarpc_core::Status;

use crate::compress::{Encoding, MIN_COMPRESSED};

/// The prefix of each message.
pub(crate) const PREFIX_LEN: usize = 5;

/// Chunks at least this long (by default) are kept as they came: slices of HTTP/2's
/// read buffer, whose allocation a chunk of the largest frame size mostly fills (h2
/// reserves a frame's length as its header arrives); shorter ones are copied together,
/// so that small slices never keep large buffers alive. [`Deframer::keep_from`] raises it
/// to the frame size advertised.
const KEEP: usize = 16 * 1024;

/// Cuts messages out of the chunks of a body as they arrive. A message is copied once,
/// into a buffer of exactly its size, when it is complete (not grown as it arrives); a
/// long message that lies within one chunk is a slice of it.
#[derive(Debug, Default)]
pub(crate) struct Deframer {
    /// What arrived and was not cut yet, in order, ending with `tail`.
    parts: VecDeque<Bytes>,
    /// Short chunks copied together, after `parts`.
    tail: BytesMut,
    /// Bytes in `parts` and `tail`.
    held: usize,
    /// Chunks this long or longer are kept as they came (0: [`KEEP`]).
    keep: usize,
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
            responses: true,
            ..Deframer::default()
        }
    }

    /// The peer's `grpc-encoding`, for messages flagged compressed.
    pub(crate) fn set_encoding(&mut self, encoding: Option<Encoding>) {
        self.encoding = encoding;
    }

    /// Adds a chunk of the body (copied).
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.tail.extend_from_slice(chunk);
        self.held += chunk.len();
    }

    /// Keeps chunks as they came only if they are `frame_size` long or longer (the
    /// largest frame the peer may send), so a kept chunk fills most of its buffer.
    pub(crate) fn keep_from(&mut self, frame_size: usize) {
        self.keep = frame_size.max(KEEP);
    }

    /// Adds a chunk of the body, kept as it is when it is long (see [`KEEP`]).
    pub(crate) fn push_bytes(&mut self, chunk: Bytes) {
        if chunk.len() < self.keep.max(KEEP) {
            return self.push(&chunk);
        }
        if !self.tail.is_empty() {
            self.parts.push_back(self.tail.split().freeze());
        }
        self.held += chunk.len();
        self.parts.push_back(chunk);
    }

    /// Bytes held (a message in progress).
    pub(crate) fn held(&self) -> usize {
        self.held
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
        let Some((compressed, len)) = self.complete(max)? else {
            return Ok(None);
        };
        let message = self.take(len);
        match (compressed, self.encoding) {
            (true, Some(encoding)) => encoding.decompress(&message, max, charge).map(Some),
            _ => Ok(Some(message)),
        }
    }

    /// [`Deframer::next_charged`], the message in a buffer of its own after `headroom`
    /// zero bytes (room for what goes in front of it: one copy in all, as it completes).
    ///
    /// # Errors
    /// As [`Deframer::next_charged`].
    pub(crate) fn next_with_headroom(
        &mut self,
        max: usize,
        headroom: usize,
        charge: &mut dyn FnMut(usize) -> Result<(), Status>,
    ) -> Result<Option<BytesMut>, Status> {
        let Some((compressed, len)) = self.complete(max)? else {
            return Ok(None);
        };
        let mut out = BytesMut::with_capacity(headroom + len);
        out.put_bytes(0, headroom);
        match (compressed, self.encoding) {
            (true, Some(encoding)) => {
                let message = self.take(len);
                let inflated = encoding.decompress(&message, max, charge)?;
                out.extend_from_slice(&inflated);
            }
            _ => {
                self.held -= len;
                self.copy_out(len, &mut out);
            }
        }
        Ok(Some(out))
    }

    /// Whether a whole message is here: if so, its prefix is dropped and its flag and
    /// length returned (it is the next `len` bytes held).
    fn complete(&mut self, max: usize) -> Result<Option<(bool, usize)>, Status> {
        if self.held < PREFIX_LEN {
            return Ok(None);
        }
        let mut prefix = [0u8; PREFIX_LEN];
        self.peek(&mut prefix);
        let compressed = prefix[0] & 1 != 0;
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if compressed && self.encoding.is_none() {
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
        if self.held < PREFIX_LEN + len {
            return Ok(None);
        }
        self.skip(PREFIX_LEN);
        self.consumed += PREFIX_LEN + len;
        Ok(Some((compressed, len)))
    }

    /// Copies the first `out.len()` bytes held into `out` (there are that many).
    fn peek(&self, out: &mut [u8]) {
        let mut at = 0;
        for piece in self.parts.iter().map(|b| &b[..]).chain([&self.tail[..]]) {
            let n = (out.len() - at).min(piece.len());
            out[at..at + n].copy_from_slice(&piece[..n]);
            at += n;
            if at == out.len() {
                return;
            }
        }
    }

    /// Drops the first `n` bytes held (there are that many).
    fn skip(&mut self, mut n: usize) {
        self.held -= n;
        while n > 0 {
            match self.parts.front_mut() {
                Some(first) if first.len() <= n => {
                    n -= first.len();
                    self.parts.pop_front();
                }
                Some(first) => {
                    first.advance(n);
                    return;
                }
                None => return self.tail.advance(n),
            }
        }
    }

    /// The first `len` bytes held (there are that many): a slice of the chunk they lie
    /// in if they are long (a short message may wait long, and must not keep a long
    /// chunk alive), else one copy of them.
    fn take(&mut self, len: usize) -> Bytes {
        self.held -= len;
        match self.parts.front_mut() {
            Some(first) if first.len() >= len && len >= KEEP => {
                let message = first.split_to(len);
                if first.is_empty() {
                    self.parts.pop_front();
                }
                return message;
            }
            None => return self.tail.split_to(len).freeze(),
            Some(_) => {}
        }
        let mut message = BytesMut::with_capacity(len);
        self.copy_out(len, &mut message);
        message.freeze()
    }

    /// Moves the first `len` bytes held (there are that many, already taken off `held`)
    /// to the end of `out`.
    fn copy_out(&mut self, len: usize, out: &mut BytesMut) {
        let end = out.len() + len;
        while out.len() < end {
            let want = end - out.len();
            match self.parts.front_mut() {
                Some(first) if first.len() <= want => {
                    out.extend_from_slice(first);
                    self.parts.pop_front();
                }
                Some(first) => out.extend_from_slice(&first.split_to(want)),
                None => out.extend_from_slice(&self.tail.split_to(want)),
            }
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
            out.extend_from_slice(&prefix(compressed.len(), true));
            out.extend_from_slice(&compressed);
            out.freeze()
        }
        _ => frame(message),
    }
}

/// `message` with its prefix (not compressed).
pub(crate) fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + message.len());
    out.extend_from_slice(&prefix(message.len(), false));
    out.extend_from_slice(message);
    out.freeze()
}

/// The prefix of a message of `len` bytes, `compressed` or not.
pub(crate) fn prefix(len: usize, compressed: bool) -> [u8; PREFIX_LEN] {
    let len = (len as u32).to_be_bytes();
    [u8::from(compressed), len[0], len[1], len[2], len[3]]
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

    /// Long chunks are kept as they came, short ones copied together, in order: a long
    /// message within one chunk is a slice of it, one across chunks a single copy, a
    /// short one a copy (it must not keep the long chunk alive).
    #[test]
    fn kept_and_copied_chunks_cut_the_same_messages() {
        let big = vec![9u8; 40_000];
        let messages: Vec<Vec<u8>> = vec![b"a".to_vec(), big.clone(), vec![], b"tail".to_vec()];
        let body: Vec<u8> = messages.iter().flat_map(|m| frame(m).to_vec()).collect();
        for cut in [1, 3, 5, 4096, KEEP, KEEP + 1, 30_000, body.len()] {
            let mut d = Deframer::default();
            let mut got = Vec::new();
            for piece in body.chunks(cut) {
                d.push_bytes(Bytes::copy_from_slice(piece));
                while let Some(m) = d.next(1 << 20).unwrap() {
                    got.push(m.to_vec());
                }
            }
            assert_eq!(got, messages, "chunks of {cut}");
            assert_eq!(d.held(), 0);
            assert_eq!(d.take_consumed(), body.len());
        }
        // The big message alone in one long chunk: a slice of it, no copy.
        let framed = frame(&big);
        let mut d = Deframer::default();
        d.push(&framed[..PREFIX_LEN]);
        let chunk = framed.slice(PREFIX_LEN..);
        let at = chunk.as_ptr();
        d.push_bytes(chunk);
        let m = d.next(1 << 20).unwrap().unwrap();
        assert_eq!(m.as_ptr(), at, "a slice of the chunk");
        let mut d = Deframer::default();
        let chunk = Bytes::from([frame(b"short").to_vec(), vec![0; KEEP]].concat());
        let range = chunk.as_ptr_range();
        d.push_bytes(chunk);
        let m = d.next(1 << 20).unwrap().unwrap();
        assert!(
            !range.contains(&m.as_ptr()),
            "a short message is copied out"
        );
    }
}
