//! Reading frames from the socket: the I/O shell of the frame decoder (`decoder.rs`),
//! which checks every header before any allocation and grows memory with the bytes that
//! arrive. The shell reads into the decoder's room and keeps the clocks: the first-frame
//! and the stalled-frame timeouts.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rdmarpc_core::TransportError;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::closing::Closing;
use crate::decoder::{FrameDecoder, PROCESS_ALLOWANCE, READ_CHUNK};
use crate::socket::ReadHalf;
use crate::TcpConfig;

/// The read half and its decoder. Everything that survives a cancelled `next_frame` lives
/// here, which is what makes `recv` cancel-safe.
#[derive(Debug)]
pub(crate) struct Reader {
    /// `None` once taken for the lingering close (the connection is being dropped).
    socket: Option<ReadHalf>,
    decoder: FrameDecoder,
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
        let now = Instant::now();
        Reader {
            socket: Some(socket),
            decoder: FrameDecoder::new(config.max_message_size, already_read, &PROCESS_ALLOWANCE),
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
            let in_frame = self.decoder.in_frame();
            // The clock is read only inside a frame (between frames nothing times the
            // wait but the first-frame deadline, set once).
            let waiting_since = in_frame.then(Instant::now);
            let frame_deadline = waiting_since
                .map(|since| since + self.frame_timeout.saturating_sub(self.frame_waited));
            let deadline = match (self.first_frame_deadline, frame_deadline) {
                (Some(first), Some(frame)) => Some(first.min(frame)),
                (first, frame) => first.or(frame),
            };
            let Some(socket) = self.socket.as_mut() else {
                return Ok(None);
            };
            let mut room = self.decoder.room();
            let read = tokio::select! {
                read = socket.read_buf(room.buf()) => Some(read),
                _ = self.closed.changed() => None, // checked at the top
                () = sleep_until(deadline) => return Err(self.timed_out()),
            };
            if let Some(since) = waiting_since {
                self.frame_waited += since.elapsed();
            }
            let Some(read) = read else { continue };
            let read = read?;
            if read == 0 {
                return if !in_frame {
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

    /// As [`Reader::ready`], but stops at a run of stream messages and returns it as
    /// one buffer (see [`FrameDecoder::decode_message_run`]).
    pub(crate) fn ready_run(&mut self, max: usize, mut each: impl FnMut(Bytes)) -> Option<Bytes> {
        if self.socket.is_none() || *self.closed.borrow() {
            return None;
        }
        for _ in 0..max {
            if let Some(run) = self.decoder.decode_message_run(READ_CHUNK) {
                self.first_frame_deadline = None;
                self.frame_waited = Duration::ZERO;
                return Some(run);
            }
            match self.parse() {
                Ok(Some(frame)) => {
                    self.first_frame_deadline = None;
                    self.frame_waited = Duration::ZERO;
                    each(frame);
                }
                Ok(None) | Err(_) => return None,
            }
        }
        None
    }

    /// A complete frame from the decoder, if there is one.
    fn parse(&mut self) -> Result<Option<Bytes>, TransportError> {
        Ok(self.decoder.decode()?)
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
