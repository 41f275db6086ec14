//! The writer task: coalesces queued frames into few system calls.

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, watch};

/// Writes frames from `queue` until it closes or `closed` flips (then it writes what is
/// still queued), then shuts the write side down.
///
/// Order of work: wait for one frame, then drain everything else already queued into the
/// coalescing buffer (up to `coalesce` bytes) and write it with one `write_all`; frames
/// at least `coalesce` bytes long are written from their own buffer, after whatever was
/// coalesced before them, so order is kept.
pub(crate) async fn writer_task(
    mut socket: OwnedWriteHalf,
    mut queue: mpsc::Receiver<BytesMut>,
    mut closed: watch::Receiver<bool>,
    coalesce: usize,
    peer: String,
) {
    let mut out = BytesMut::with_capacity(coalesce);
    let result: std::io::Result<()> = async {
        loop {
            let first = tokio::select! {
                frame = queue.recv() => match frame { Some(f) => f, None => return Ok(()) },
                _ = closed.changed() => {
                    // Closing: what was queued before the close still goes out (a server
                    // that drained its calls gracefully must not lose their responses).
                    while let Ok(frame) = queue.try_recv() {
                        socket.write_all(&frame).await?;
                    }
                    return Ok(());
                }
            };
            let mut next = Some(first);
            while let Some(frame) = next.take() {
                if frame.len() >= coalesce {
                    if !out.is_empty() {
                        socket.write_all(&out).await?;
                        out.clear();
                    }
                    socket.write_all(&frame).await?;
                } else {
                    if out.len() + frame.len() > coalesce {
                        socket.write_all(&out).await?;
                        out.clear();
                    }
                    out.extend_from_slice(&frame);
                }
                next = queue.try_recv().ok();
            }
            if !out.is_empty() {
                socket.write_all(&out).await?;
                out.clear();
            }
        }
    }
    .await;
    if let Err(e) = result {
        tracing::debug!(%peer, "write failed: {e}");
    }
    let _ = socket.shutdown().await;
}
