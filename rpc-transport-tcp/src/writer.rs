//! The writer task: coalesces queued frames into few system calls.

use std::future::Future;
use std::io::IoSlice;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::closing::Closing;
use crate::outgoing::{OutFrame, Queued};
use crate::socket::WriteHalf;
use crate::TcpConfig;

/// Writes frames from `queue` until it closes or the connection closes (then it writes
/// what is still queued), then shuts the write side down. A write that makes no progress
/// for [`TcpConfig::write_timeout`], or fails, fails the whole connection.
///
/// Order of work: wait for one frame, then drain everything else already queued into the
/// coalescing buffer (up to `write_buffer` bytes) and write it at once; frames at least
/// `write_buffer` bytes long are written from their own buffer, after whatever was
/// coalesced before them, so order is kept. A frame's share of the byte budget is given
/// back once it is written.
pub(crate) async fn writer_task(
    socket: WriteHalf,
    mut queue: mpsc::Receiver<Queued>,
    closing: Arc<Closing>,
    config: TcpConfig,
    peer: String,
) {
    let coalesce = config.write_buffer;
    let mut writer = Writer {
        socket,
        timeout: config.write_timeout,
    };
    let mut closed = closing.closed.subscribe();
    let mut out = BytesMut::with_capacity(coalesce);
    let mut held = Vec::new();
    let result: std::io::Result<()> = async {
        loop {
            let first = tokio::select! {
                frame = queue.recv() => match frame { Some(f) => f, None => return Ok(()) },
                _ = closed.changed() => {
                    // Closing: what was queued before the close still goes out (a server
                    // that drained its calls gracefully must not lose their responses).
                    while let Ok((frame, _permit)) = queue.try_recv() {
                        writer.write_frame(&frame).await?;
                    }
                    return Ok(());
                }
            };
            let mut next = Some(first);
            while let Some((frame, permit)) = next.take() {
                let len = frame.len();
                if len >= coalesce {
                    if !out.is_empty() {
                        writer.write_all(&out).await?;
                        out.clear();
                        held.clear();
                    }
                    writer.write_frame(&frame).await?;
                    drop(permit);
                } else {
                    if out.len() + len > coalesce {
                        writer.write_all(&out).await?;
                        out.clear();
                        held.clear();
                    }
                    out.extend_from_slice(&frame.head);
                    for part in &frame.tail {
                        out.extend_from_slice(part);
                    }
                    held.push(permit);
                }
                next = queue.try_recv().ok();
            }
            if !out.is_empty() {
                writer.write_all(&out).await?;
                out.clear();
                held.clear();
            }
        }
    }
    .await;
    if let Err(e) = result {
        tracing::debug!(%peer, "write failed: {e}");
        closing.fail(format!("write failed: {e}"));
    }
    let _ = writer.socket.shutdown().await;
}

/// The write half with a progress timeout.
struct Writer {
    socket: WriteHalf,
    timeout: Duration,
}

impl Writer {
    /// Writes all of `buf`; fails when one `write` makes no progress within the timeout.
    async fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.write_parts(&[buf]).await
    }

    /// Writes a frame's head and tail parts with gathered writes.
    async fn write_frame(&mut self, frame: &OutFrame) -> std::io::Result<()> {
        if frame.tail.is_empty() {
            return self.write_all(&frame.head).await;
        }
        let mut parts = Vec::with_capacity(1 + frame.tail.len());
        parts.push(&frame.head[..]);
        parts.extend(frame.tail.iter().map(|part| &part[..]));
        self.write_parts(&parts).await
    }

    /// Writes all of `parts`, in order, gathered into as few `writev`s as the socket
    /// takes; fails when one makes no progress within the timeout.
    async fn write_parts(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        // The first part not completely written, and how much of it was.
        let (mut first, mut offset) = (0, 0);
        while first < parts.len() {
            let slices: Vec<IoSlice<'_>> = std::iter::once(&parts[first][offset..])
                .chain(parts[first + 1..].iter().copied())
                .take(MAX_SLICES)
                .map(IoSlice::new)
                .collect();
            let timeout = self.timeout;
            let written = match timed(timeout, self.socket.write_vectored(&slices)).await {
                Ok(0) if slices.iter().any(|s| !s.is_empty()) => {
                    return Err(std::io::ErrorKind::WriteZero.into())
                }
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            // Steps over what was written.
            let mut left = written + offset;
            offset = 0;
            while first < parts.len() && left >= parts[first].len() {
                left -= parts[first].len();
                first += 1;
            }
            if first < parts.len() {
                offset = left;
            }
        }
        // TLS may hold records back (a no-op on plain TCP).
        timed(self.timeout, self.socket.flush()).await
    }
}

/// `io` within `timeout` of its first wait: most writes complete when first polled, and
/// those take no timer and read no clock (a system call where the clock source is not
/// the TSC).
async fn timed<T>(
    timeout: Duration,
    io: impl Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    let mut io = pin!(io);
    let first = std::future::poll_fn(|cx| Poll::Ready(io.as_mut().poll(cx))).await;
    if let Poll::Ready(done) = first {
        return done;
    }
    tokio::time::timeout(timeout, io).await.map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the peer read nothing for {timeout:?} (write timeout)"),
        )
    })?
}

/// Slices handed to one `writev` at most (well under any system's `IOV_MAX`).
const MAX_SLICES: usize = 64;
