//! A lingering close: after the server's last frames (a GOAWAY), the socket's write side
//! is shut and what the client still sends is read and dropped, for a bounded time,
//! before the socket is closed.
//!
//! Closing a socket that holds unread bytes makes the kernel answer with a TCP reset, and
//! a reset can reach the client before it has read the server's last frames, which its
//! kernel then drops: a client told GOAWAY `ENHANCE_YOUR_CALM` (or the last response
//! of a graceful shutdown) would see only "connection reset". h2 owns the socket while it
//! runs and never gives it back, so the socket is wrapped in a [`Returned`] that hands it
//! back when h2 drops it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// The longest a closing connection is read from after its last frames (as long as the
/// TCP frames transport lingers): a client reads them and closes well within it; one
/// that goes on sending is cut off then.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// An I/O object that is handed back through a channel when dropped.
#[derive(Debug)]
pub(crate) struct Returned<T> {
    /// `None` only in `drop`.
    io: Option<T>,
    back: Option<oneshot::Sender<T>>,
}

impl<T> Returned<T> {
    /// `io`, and where it arrives once the returned wrapper is dropped.
    pub(crate) fn new(io: T) -> (Returned<T>, oneshot::Receiver<T>) {
        let (back, returned) = oneshot::channel();
        let io = Returned {
            io: Some(io),
            back: Some(back),
        };
        (io, returned)
    }

    fn io(self: Pin<&mut Self>) -> Pin<&mut T>
    where
        T: Unpin,
    {
        Pin::new(
            self.get_mut()
                .io
                .as_mut()
                .expect("the I/O object is taken only when dropped"),
        )
    }
}

impl<T> Drop for Returned<T> {
    fn drop(&mut self) {
        if let (Some(io), Some(back)) = (self.io.take(), self.back.take()) {
            // Nobody waiting for it: it is closed here.
            let _ = back.send(io);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Returned<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.io().poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Returned<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}

/// Closes `io` lingering: shuts its write side (h2 has normally done so), then reads and
/// drops what comes until the client closes, an error, or `within`.
pub(crate) async fn close<T: AsyncRead + AsyncWrite + Unpin>(mut io: T, within: Duration) {
    let drain = async {
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut io).await;
        let mut scratch = [0u8; 4096];
        while let Ok(n) = io.read(&mut scratch).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(within, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    /// Two connected sockets on loopback.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn a_dropped_wrapper_hands_its_io_back() {
        let (mut client, server) = pair().await;
        let (mut wrapped, returned) = Returned::new(server);
        wrapped.write_all(b"last frame").await.unwrap();
        drop(wrapped);
        let server = returned.await.expect("handed back, open");
        let mut got = [0u8; 10];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"last frame");
        drop(server);
    }

    /// The failure this module prevents: the client has sent bytes the server never read,
    /// the server writes its last frame and closes. Closed lingering, the client reads
    /// the frame and then the end; the server's side ends when the client closes.
    #[tokio::test]
    async fn the_client_reads_the_last_frame_although_it_sent_unread_bytes() {
        let (mut client, mut server) = pair().await;
        client.write_all(&[1u8; 64 * 1024]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        server.write_all(b"GOAWAY").await.unwrap();
        let lingering = tokio::spawn(close(server, LINGER));
        // The client goes on sending a little while after the close began.
        client.write_all(&[2u8; 4096]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut got = Vec::new();
        let read = client.read_to_end(&mut got).await;
        assert!(read.is_ok(), "no reset: {read:?}");
        assert_eq!(got, b"GOAWAY");
        drop(client);
        let started = tokio::time::Instant::now();
        lingering.await.unwrap();
        assert!(started.elapsed() < LINGER, "ended with the client's close");
    }

    /// A client that never stops sending is cut off at the bound.
    #[tokio::test]
    async fn a_client_that_keeps_sending_is_cut_off_after_the_bound() {
        let (mut client, server) = pair().await;
        let flood = tokio::spawn(async move {
            let chunk = [3u8; 16 * 1024];
            while client.write_all(&chunk).await.is_ok() {}
        });
        let within = Duration::from_millis(200);
        tokio::time::timeout(within * 10, close(server, within))
            .await
            .expect("closed at the bound");
        tokio::time::timeout(Duration::from_secs(5), flood)
            .await
            .expect("the client's writes fail once the server closed")
            .unwrap();
    }
}
