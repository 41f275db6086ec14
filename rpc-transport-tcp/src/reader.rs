//! Reading frames from the socket: header first, bounds checked before any allocation,
//! and memory grown with the bytes that arrive, not with the lengths headers claim.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rpc_core::wire::{Flags, Header, HEADER_LEN};
use rpc_core::TransportError;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::closing::Closing;
use crate::socket::ReadHalf;
use crate::TcpConfig;

/// Bytes asked of the socket at least per read.
const READ_CHUNK: usize = 64 * 1024;

/// Frames at least this long are read into a buffer of their own, allocated at the
/// frame's declared length while the process-wide [`CLAIM_ALLOWANCE`] lasts (so that they
/// land without a copy), or moved into one once complete (when they arrived in the shared
/// buffer), and are kept ([`rpc_core::Connection::keep`]): a kept frame pins only itself.
/// Smaller frames share the read buffer and are copied out.
pub(crate) const KEEP_MIN: usize = 32 * 1024;

/// Bytes of frame buffers allocated at a header's declared length before the bytes
/// arrived, across all connections of the process. A header's length is a promise: the
/// memory is only touched as bytes arrive, but lying peers could reserve address space
/// without end. Beyond this allowance a large frame's buffer grows with what arrives.
const CLAIM_ALLOWANCE: usize = 64 << 20;

/// Bytes currently claimed against [`CLAIM_ALLOWANCE`].
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

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

/// A share of [`CLAIM_ALLOWANCE`], given back when dropped (the frame completed, or the
/// connection ended).
#[derive(Debug)]
struct Claim(usize);

impl Claim {
    /// `bytes` of the allowance, if that much is left.
    fn take(bytes: usize) -> Option<Claim> {
        CLAIMED
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |claimed| {
                claimed
                    .checked_add(bytes)
                    .filter(|&total| total <= CLAIM_ALLOWANCE)
            })
            .ok()
            .map(|_| Claim(bytes))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        CLAIMED.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// The read half and its buffer. Everything that survives a cancelled `next_frame` lives
/// here, which is what makes `recv` cancel-safe.
#[derive(Debug)]
pub(crate) struct Reader {
    /// `None` once taken for the lingering close (the connection is being dropped).
    socket: Option<ReadHalf>,
    buf: BytesMut,
    max_message_size: usize,
    /// Body bytes of an oversized frame still to skip.
    discard: usize,
    /// A large frame being read into a buffer of its own.
    own_frame: Option<OwnFrame>,
    closed: watch::Receiver<bool>,
    closing: Arc<Closing>,
    frame_timeout: Duration,
    /// Until the first frame: when it must have arrived (accepted connections only).
    first_frame_deadline: Option<Instant>,
    /// Time spent waiting in `next_frame` for the rest of a frame that has begun to
    /// arrive. Only time spent waiting counts: while the runtime does not call `recv`
    /// (backpressure on a peer that sends faster than it is served), the clock stops.
    frame_waited: Duration,
}

impl Reader {
    pub(crate) fn new(
        socket: ReadHalf,
        config: &TcpConfig,
        first_frame_timeout: Option<Duration>,
        closed: watch::Receiver<bool>,
        closing: Arc<Closing>,
        already_read: &[u8],
    ) -> Reader {
        let mut buf = BytesMut::with_capacity(READ_CHUNK.max(already_read.len()));
        buf.extend_from_slice(already_read);
        let now = Instant::now();
        Reader {
            socket: Some(socket),
            buf,
            max_message_size: config.max_message_size,
            discard: 0,
            own_frame: None,
            closed,
            closing,
            frame_timeout: config.frame_timeout,
            first_frame_deadline: first_frame_timeout.map(|t| now + t),
            frame_waited: Duration::ZERO,
        }
    }

    /// The read half, for the lingering close; the reader reads nothing more.
    pub(crate) fn take_socket(&mut self) -> Option<ReadHalf> {
        self.socket.take()
    }

    /// The next frame; `None` on a clean end of stream or after `close`.
    ///
    /// # Errors
    /// A malformed header, a read error, a frame cut by the end of the stream, a frame
    /// not completed within the frame timeout, no first frame within its timeout, or the
    /// reason the connection failed (e.g. a write timeout).
    pub(crate) async fn next_frame(&mut self) -> Result<Option<Bytes>, TransportError> {
        loop {
            if let Some(frame) = self.parse()? {
                self.first_frame_deadline = None;
                self.frame_waited = Duration::ZERO;
                return Ok(Some(frame));
            }
            if *self.closed.borrow() {
                return self.closing.failure().map_or(Ok(None), Err);
            }
            if self.own_frame.is_none() && self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
                // Grows by what arrives; never by a header's claim (but see `own_frame`).
                self.buf.reserve(READ_CHUNK);
            }
            let in_frame = !self.buf.is_empty() || self.discard > 0 || self.own_frame.is_some();
            let waiting_since = Instant::now();
            let frame_deadline = in_frame
                .then(|| waiting_since + self.frame_timeout.saturating_sub(self.frame_waited));
            let deadline = match (self.first_frame_deadline, frame_deadline) {
                (Some(first), Some(frame)) => Some(first.min(frame)),
                (first, frame) => first.or(frame),
            };
            let Some(socket) = self.socket.as_mut() else {
                return Ok(None);
            };
            let read = tokio::select! {
                read = async {
                    match self.own_frame.as_mut() {
                        // Up to the frame's end, not into the next frame.
                        Some(own) => {
                            let room = own.len - own.buf.len();
                            socket.read_buf(&mut (&mut own.buf).limit(room)).await
                        }
                        None => socket.read_buf(&mut self.buf).await,
                    }
                } => Some(read),
                _ = self.closed.changed() => None, // checked at the top
                () = sleep_until(deadline) => return Err(self.timed_out()),
            };
            if in_frame {
                self.frame_waited += waiting_since.elapsed();
            }
            let Some(read) = read else { continue };
            let read = read?;
            if read == 0 {
                return if self.buf.is_empty() && self.discard == 0 && self.own_frame.is_none() {
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

    /// Hands the complete frames already in the buffer to `each`, up to `max`; an error
    /// stays in the buffer for [`Reader::next_frame`] to report.
    pub(crate) fn ready(&mut self, max: usize, mut each: impl FnMut(Bytes)) {
        if self.socket.is_none() || *self.closed.borrow() {
            return;
        }
        for _ in 0..max {
            match self.parse() {
                Ok(Some(frame)) => {
                    self.first_frame_deadline = None;
                    self.frame_waited = Duration::ZERO;
                    each(frame);
                }
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// A complete frame from the buffer, if there is one; skips oversized bodies.
    fn parse(&mut self) -> Result<Option<Bytes>, TransportError> {
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
            if len >= KEEP_MIN {
                // A large frame that arrived in the shared buffer (it fit, or the
                // allowance was spent) moves to a buffer of its own: every frame that is
                // kept pins only itself, never the read buffer and the frames after it.
                let mut own = crate::recycle::take(len);
                own.extend_from_slice(&self.buf[..len]);
                self.buf.advance(len);
                return Ok(Some(crate::recycle::into_bytes(own)));
            }
            return Ok(Some(self.buf.split_to(len).freeze()));
        }
        if len >= KEEP_MIN && self.buf.capacity() < len {
            if let Some(claim) = Claim::take(crate::recycle::class_of(len)) {
                // What arrived of the frame moves to a buffer of the frame's length.
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
        Ok(None)
    }

    fn timed_out(&self) -> TransportError {
        let what = if self.first_frame_deadline.is_some() {
            "no complete frame arrived within the first-frame timeout".to_owned()
        } else {
            format!(
                "a frame stalled: not completed within {:?}",
                self.frame_timeout
            )
        };
        TransportError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
    }
}

/// Sleeps until `at`, or forever for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
