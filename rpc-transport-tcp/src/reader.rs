//! Reading frames from the socket: header first, bounds checked before any allocation.

use bytes::{Buf, Bytes, BytesMut};
use rpc_core::wire::{Flags, Header, HEADER_LEN};
use rpc_core::TransportError;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::watch;

/// Bytes asked of the socket at least per read.
const READ_CHUNK: usize = 64 * 1024;

/// The read half and its buffer. Everything that survives a cancelled `next_frame` lives
/// here, which is what makes `recv` cancel-safe.
#[derive(Debug)]
pub(crate) struct Reader {
    socket: OwnedReadHalf,
    buf: BytesMut,
    max_message_size: usize,
    /// Body bytes of an oversized frame still to skip.
    discard: usize,
    closed: watch::Receiver<bool>,
}

impl Reader {
    pub(crate) fn new(
        socket: OwnedReadHalf,
        max_message_size: usize,
        closed: watch::Receiver<bool>,
        already_read: &[u8],
    ) -> Reader {
        let mut buf = BytesMut::with_capacity(READ_CHUNK.max(already_read.len()));
        buf.extend_from_slice(already_read);
        Reader {
            socket,
            buf,
            max_message_size,
            discard: 0,
            closed,
        }
    }

    /// The next frame; `None` on a clean end of stream or after `close`.
    pub(crate) async fn next_frame(&mut self) -> Result<Option<Bytes>, TransportError> {
        loop {
            if self.discard > 0 {
                let n = self.discard.min(self.buf.len());
                self.buf.advance(n);
                self.discard -= n;
            }
            if self.discard == 0 {
                if let Some(header) = Header::decode(&self.buf)? {
                    if header.payload_len as usize > self.max_message_size {
                        // Skip the body without buffering it; report the header alone.
                        self.buf.advance(HEADER_LEN);
                        self.discard = header.body_len();
                        let mut discarded = header;
                        discarded.flags = discarded.flags | Flags::DISCARDED;
                        discarded.meta_len = 0;
                        tracing::debug!(len = header.payload_len, "discarding oversized frame");
                        return Ok(Some(Bytes::copy_from_slice(&discarded.encode())));
                    }
                    let len = header.frame_len();
                    if self.buf.len() >= len {
                        return Ok(Some(self.buf.split_to(len).freeze()));
                    }
                    self.buf.reserve(len - self.buf.len());
                }
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
                self.buf.reserve(READ_CHUNK);
            }
            if *self.closed.borrow() {
                return Ok(None);
            }
            let read = tokio::select! {
                read = self.socket.read_buf(&mut self.buf) => read?,
                _ = self.closed.changed() => return Ok(None),
            };
            if read == 0 {
                return if self.buf.is_empty() && self.discard == 0 {
                    Ok(None)
                } else {
                    Err(TransportError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed in the middle of a frame",
                    )))
                };
            }
        }
    }
}
