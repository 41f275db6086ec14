//! The writer task: coalesces queued frames into few system calls.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::connection::{Closing, Queued};
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
    socket: OwnedWriteHalf,
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
                        writer.write_all(&frame).await?;
                    }
                    return Ok(());
                }
            };
            let mut next = Some(first);
            while let Some((frame, permit)) = next.take() {
                if frame.len() >= coalesce {
                    if !out.is_empty() {
                        writer.write_all(&out).await?;
                        out.clear();
                        held.clear();
                    }
                    writer.write_all(&frame).await?;
                    drop(permit);
                } else {
                    if out.len() + frame.len() > coalesce {
                        writer.write_all(&out).await?;
                        out.clear();
                        held.clear();
                    }
                    out.extend_from_slice(&frame);
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
    socket: OwnedWriteHalf,
    timeout: Duration,
}

impl Writer {
    /// Writes all of `buf`; fails when one `write` makes no progress within the timeout.
    async fn write_all(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match tokio::time::timeout(self.timeout, self.socket.write(buf)).await {
                Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => buf = &buf[n..],
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the peer read nothing for {:?} (write timeout)",
                            self.timeout
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}
