//! Runs of stream messages: consecutive complete `Message` frames without flags. A
//! byte-stream transport hands such a run to the runtime as one buffer rather than a
//! buffer per frame ([`Connection::recv_ready_run`](crate::Connection::recv_ready_run)),
//! and the runtime splits the messages out of it as their stream is read, as HTTP/2
//! implementations split gRPC messages out of DATA frames.

use super::{Flags, FrameKind, Header};

/// Whether `header` is a plain stream message: a `Message` frame with no flags (not the
/// end of its stream, not discarded, not a remote descriptor) and no metadata (which a
/// stream message does not use, and which a queued run would otherwise keep alive).
pub fn is_plain_message(header: &Header) -> bool {
    header.kind == FrameKind::Message && header.flags == Flags::default() && header.meta_len == 0
}

/// The front of `buf` that is a run of complete plain stream messages (see
/// [`is_plain_message`]), each with a payload of at most `max_payload` bytes and shorter
/// than `max_frame`, and at most `max_bytes` in all: its length in bytes and in frames,
/// `(0, 0)` when `buf` does not begin with such a frame. A malformed header ends the run
/// (whoever decodes it next reports it).
pub fn message_run(
    buf: &[u8],
    max_payload: usize,
    max_frame: usize,
    max_bytes: usize,
) -> (usize, usize) {
    let mut len = 0;
    let mut frames = 0;
    while let Ok(Some(header)) = Header::decode(&buf[len..]) {
        let frame_len = header.frame_len();
        let fits = is_plain_message(&header)
            && header.payload_len as usize <= max_payload
            && frame_len < max_frame
            && len + frame_len <= buf.len().min(max_bytes);
        if !fits {
            break;
        }
        len += frame_len;
        frames += 1;
    }
    (len, frames)
}
