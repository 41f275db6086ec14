//! Received stream messages' payloads, taken from their frames without copying large
//! ones.

use std::ops::Deref;

use bytes::Bytes;

/// Who decides whether a received frame is kept (its payload is then a slice of it) or
/// copied out: the transport ([`Connection::keep`](crate::Connection::keep)), or, in the
/// sans-IO tests and fuzz targets, a stand-in.
pub(crate) trait Keep<B> {
    /// The frame as [`Bytes`], or the frame back to be copied.
    fn keep(&self, frame: B) -> Result<Bytes, B>;
}

impl<C: crate::Connection> Keep<C::RecvBuf> for C {
    fn keep(&self, frame: C::RecvBuf) -> Result<Bytes, C::RecvBuf> {
        crate::Connection::keep(self, frame)
    }
}

/// The payload of a received `Message` frame as owned bytes: a slice of the frame if the
/// transport lets go of it (large frames), else a copy (a small frame's receive slot must
/// not stay pinned while the message waits to be read).
pub(crate) fn take_payload<B: Deref<Target = [u8]>>(
    conn: &impl Keep<B>,
    buf: B,
    header: &crate::wire::Header,
) -> Bytes {
    if header.payload_len == 0 {
        return Bytes::new();
    }
    let start = crate::wire::HEADER_LEN + header.meta_len as usize;
    let end = start + header.payload_len as usize;
    match Keep::keep(conn, buf) {
        Ok(frame) => frame.slice(start..end),
        Err(buf) => Bytes::copy_from_slice(&buf[start..end]),
    }
}

/// The payloads of a run of `Message` frames of one stream, with the frame bytes each
/// is charged: slices of the frames the transport lets go of (large ones), the others
/// copied together into one allocation (so that a small frame's receive slot or shared
/// read buffer is not pinned while its message waits, as [`take_payload`] does, but with
/// one allocation per run). The consumer reads a stream in order, so a run's allocation
/// is freed by the time later messages are read: what stays pinned is what the stream's
/// window counts, plus at most one run.
pub(crate) fn take_payloads<B: Deref<Target = [u8]>>(
    conn: &impl Keep<B>,
    frames: impl ExactSizeIterator<Item = (B, crate::wire::Header)>,
) -> Vec<(usize, Bytes)> {
    pub(super) enum Taken<B> {
        Kept(Bytes),
        Copy(B, std::ops::Range<usize>),
    }
    let mut taken = Vec::with_capacity(frames.len());
    let mut copied = 0;
    for (buf, header) in frames {
        let start = crate::wire::HEADER_LEN + header.meta_len as usize;
        let range = start..start + header.payload_len as usize;
        let item = if range.is_empty() {
            Taken::Kept(Bytes::new())
        } else {
            match Keep::keep(conn, buf) {
                Ok(frame) => Taken::Kept(frame.slice(range)),
                Err(buf) => {
                    copied += range.len();
                    Taken::Copy(buf, range)
                }
            }
        };
        taken.push((header.frame_len(), item));
    }
    let mut arena = bytes::BytesMut::with_capacity(copied);
    for (_, item) in &taken {
        if let Taken::Copy(buf, range) = item {
            arena.extend_from_slice(&buf[range.clone()]);
        }
    }
    let mut arena = arena.freeze();
    taken
        .into_iter()
        .map(|(charged, item)| match item {
            Taken::Kept(bytes) => (charged, bytes),
            // Dropping the frame here hands its receive resources back.
            Taken::Copy(_, range) => (charged, arena.split_to(range.len())),
        })
        .collect()
}

/// The first message of a run of whole message frames (see
/// [`crate::wire::message_run`]), split off `frames`: its payload, a slice of them, and
/// its frame's length; `None` when `frames` is empty (or, which the run's checks rule
/// out, does not begin with a whole frame: the rest is then dropped).
pub(crate) fn next_message(frames: &mut Bytes) -> Option<(Bytes, usize)> {
    use crate::wire::{Header, HEADER_LEN};
    use bytes::Buf;
    // The run's headers were checked when it was queued.
    let lengths = Header::lengths_of_checked(frames)
        .map(|(meta, payload)| (HEADER_LEN + meta, HEADER_LEN + meta + payload))
        .filter(|&(_, len)| len <= frames.len());
    let Some((start, len)) = lengths else {
        debug_assert!(frames.is_empty(), "a run of whole frames");
        *frames = Bytes::new();
        return None;
    };
    let payload = frames.slice(start..len);
    frames.advance(len);
    Some((payload, len))
}

/// The messages of a run of whole message frames, each with its frame's length.
pub(crate) fn split_frames(mut frames: Bytes) -> impl Iterator<Item = (usize, Bytes)> {
    std::iter::from_fn(move || next_message(&mut frames).map(|(payload, len)| (len, payload)))
}
