//! The frame decoder, with no socket: bytes in ([`FrameDecoder::room`], or
//! [`FrameDecoder::push`]), whole frames out ([`FrameDecoder::decode`]). Every header is
//! checked before anything is allocated for its frame, a frame over the maximum is
//! skipped byte by byte (never buffered) and reported by its header alone, and memory
//! grows with the bytes that arrive, not with the lengths headers claim.
//!
//! The reader (`reader.rs`) is its I/O shell: it reads from the socket into
//! [`FrameDecoder::room`] and times the reads.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::buf::Limit;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use rdmarpc_core::wire::{Flags, FrameError, Header, HEADER_LEN};

/// Bytes the shared buffer has room for at least before a read.
pub const READ_CHUNK: usize = 64 * 1024;

/// Frames at least this long are read into a buffer of their own, allocated at the
/// frame's declared length while the [`Allowance`] lasts (so that they land without a
/// copy), or moved into one once complete (when they arrived in the shared buffer), and
/// are kept ([`rdmarpc_core::Connection::keep`]): a kept frame pins only itself. Smaller
/// frames share the read buffer and are copied out.
pub const KEEP_MIN: usize = 32 * 1024;

/// Bytes of frame buffers allocated at a header's declared length before the bytes
/// arrived, across all connections of the process. A header's length is a promise: the
/// memory is only touched as bytes arrive, but lying peers could reserve address space
/// without end. Beyond this allowance a large frame's buffer grows with what arrives.
pub(crate) static PROCESS_ALLOWANCE: Allowance = Allowance::new(64 << 20);

/// How many bytes of frame buffers may be allocated at headers' declared lengths before
/// their bytes arrive, shared by the decoders that use it.
#[derive(Debug)]
pub struct Allowance {
    claimed: AtomicUsize,
    limit: usize,
}

impl Allowance {
    /// An allowance of `limit` bytes.
    pub const fn new(limit: usize) -> Allowance {
        Allowance {
            claimed: AtomicUsize::new(0),
            limit,
        }
    }

    /// Bytes claimed now.
    #[cfg_attr(not(any(test, feature = "unstable-fuzzing")), allow(dead_code))]
    pub fn claimed(&self) -> usize {
        self.claimed.load(Ordering::Acquire)
    }

    /// `bytes` of the allowance, if that much is left.
    fn take(&'static self, bytes: usize) -> Option<Claim> {
        self.claimed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |claimed| {
                claimed
                    .checked_add(bytes)
                    .filter(|&total| total <= self.limit)
            })
            .ok()
            .map(|_| Claim(self, bytes))
    }
}

/// A share of an [`Allowance`], given back when dropped (the frame completed, or the
/// decoder was dropped).
#[derive(Debug)]
struct Claim(&'static Allowance, usize);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.claimed.fetch_sub(self.1, Ordering::AcqRel);
    }
}

/// A large frame being read into a buffer of its own (a recycled one, see
/// [`crate::recycle`]), up to its end and not into the next frame.
#[derive(Debug)]
struct OwnFrame {
    buf: Vec<u8>,
    /// The frame's length.
    len: usize,
    /// Its share of the allowance, until it is complete.
    _claim: Claim,
}

/// Where the next bytes read go: [`Room::buf`] is what to read into.
#[derive(Debug)]
pub enum Room<'a> {
    /// The shared buffer (grown by [`READ_CHUNK`] when nearly full).
    Shared(&'a mut BytesMut),
    /// A large frame's own buffer, up to the frame's end.
    Own(Limit<&'a mut Vec<u8>>),
}

impl Room<'_> {
    /// The buffer to read into.
    pub fn buf(&mut self) -> &mut (dyn BufMut + Send) {
        match self {
            Room::Shared(buf) => *buf,
            Room::Own(limit) => limit,
        }
    }
}

/// The decoder's state: the bytes read and not yet decoded, the part of an oversized
/// frame still to skip, and a large frame being read into a buffer of its own.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_message_size: usize,
    /// Body bytes of an oversized frame still to skip.
    discard: usize,
    /// A large frame being read into a buffer of its own.
    own_frame: Option<OwnFrame>,
    allowance: &'static Allowance,
}

impl FrameDecoder {
    /// A decoder of frames whose payload is at most `max_message_size` bytes, starting
    /// with `already_read` (bytes read from the stream before it, e.g. while sniffing the
    /// protocol), and claiming large frames' buffers from `allowance`.
    pub fn new(
        max_message_size: usize,
        already_read: &[u8],
        allowance: &'static Allowance,
    ) -> FrameDecoder {
        let mut buf = BytesMut::with_capacity(READ_CHUNK.max(already_read.len()));
        buf.extend_from_slice(already_read);
        FrameDecoder {
            buf,
            max_message_size,
            discard: 0,
            own_frame: None,
            allowance,
        }
    }

    /// Whether a frame has begun and is not complete (bytes buffered, a body being
    /// skipped, or a large frame being read): an end of stream now cuts a frame.
    pub fn in_frame(&self) -> bool {
        !self.buf.is_empty() || self.discard > 0 || self.own_frame.is_some()
    }

    /// Where the next bytes read go. The shared buffer grows by what arrives, never by
    /// a header's claim (but a large frame gets a buffer of its own at its length while
    /// the allowance lasts).
    pub fn room(&mut self) -> Room<'_> {
        match self.own_frame.as_mut() {
            Some(own) => {
                let room = own.len - own.buf.len();
                Room::Own((&mut own.buf).limit(room))
            }
            None => {
                if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
                    self.buf.reserve(READ_CHUNK);
                }
                Room::Shared(&mut self.buf)
            }
        }
    }

    /// Takes what of `data` fits in [`FrameDecoder::room`] (all of it, unless a large
    /// frame's own buffer ends first); how many bytes it took.
    #[cfg_attr(not(any(test, feature = "unstable-fuzzing")), allow(dead_code))]
    pub fn push(&mut self, data: &[u8]) -> usize {
        let mut room = self.room();
        let buf = room.buf();
        let n = data.len().min(buf.remaining_mut());
        buf.put_slice(&data[..n]);
        n
    }

    /// A complete frame, if one has arrived. An oversized frame comes out as its header
    /// alone, flagged [`Flags::DISCARDED`] with no metadata, and its body is skipped as
    /// it arrives.
    ///
    /// # Errors
    /// A malformed header: the stream cannot be trusted after it (the error stays, so
    /// every later call returns it too).
    pub fn decode(&mut self) -> Result<Option<Bytes>, FrameError> {
        if let Some(own) = &self.own_frame {
            if own.buf.len() < own.len {
                return Ok(None);
            }
            let own = self.own_frame.take().expect("checked");
            return Ok(Some(crate::recycle::into_bytes(own.buf)));
        }
        if self.discard > 0 {
            let n = self.discard.min(self.buf.len());
            self.buf.advance(n);
            self.discard -= n;
            if self.discard > 0 {
                return Ok(None);
            }
        }
        let Some(header) = Header::decode(&self.buf)? else {
            return Ok(None);
        };
        if header.payload_len as usize > self.max_message_size {
            return Ok(Some(self.discard_body(header)));
        }
        let len = header.frame_len();
        if self.buf.len() >= len {
            return Ok(Some(self.split_frame(len)));
        }
        if len >= KEEP_MIN && self.buf.capacity() < len {
            self.start_own_frame(len);
        }
        Ok(None)
    }

    /// A run of at least two complete small stream messages at the front of the shared
    /// buffer (see [`rdmarpc_core::wire::message_run`]; each shorter than [`KEEP_MIN`],
    /// at most `max_bytes` in all), split off as one buffer; `None` when the next frame
    /// does not begin one (then [`FrameDecoder::decode`] as usual).
    pub fn decode_message_run(&mut self, max_bytes: usize) -> Option<Bytes> {
        if self.own_frame.is_some() || self.discard > 0 {
            return None;
        }
        let (len, frames) =
            rdmarpc_core::wire::message_run(&self.buf, self.max_message_size, KEEP_MIN, max_bytes);
        (frames >= 2).then(|| self.buf.split_to(len).freeze())
    }

    /// Skips an oversized frame's body without buffering it: its header alone.
    fn discard_body(&mut self, header: Header) -> Bytes {
        self.buf.advance(HEADER_LEN);
        self.discard = header.body_len();
        let mut discarded = header;
        discarded.flags = discarded.flags | Flags::DISCARDED;
        discarded.meta_len = 0;
        tracing::debug!(len = header.payload_len, "discarding oversized frame");
        Bytes::copy_from_slice(&discarded.encode())
    }

    /// The first `len` bytes of the shared buffer, a whole frame.
    fn split_frame(&mut self, len: usize) -> Bytes {
        if len >= KEEP_MIN {
            // A large frame that arrived in the shared buffer (it fit, or the allowance
            // was spent) moves to a buffer of its own: every frame that is kept pins only
            // itself, never the read buffer and the frames after it.
            let mut own = crate::recycle::take(len);
            own.extend_from_slice(&self.buf[..len]);
            self.buf.advance(len);
            return crate::recycle::into_bytes(own);
        }
        self.buf.split_to(len).freeze()
    }

    /// A large frame has begun: what arrived of it moves to a buffer of the frame's
    /// length, if the allowance has room for it.
    fn start_own_frame(&mut self, len: usize) {
        if let Some(claim) = self.allowance.take(crate::recycle::class_of(len)) {
            let mut buf = crate::recycle::take(len);
            buf.extend_from_slice(&self.buf);
            self.buf.clear();
            self.own_frame = Some(OwnFrame {
                buf,
                len,
                _claim: claim,
            });
        }
    }
}

#[cfg(test)]
mod tests;
