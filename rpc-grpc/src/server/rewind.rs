//! An I/O object whose first bytes were already read (the connection preface that chose
//! HTTP/2), given back before the rest.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

/// An I/O object whose first bytes were already read: they are read again first.
#[derive(Debug)]
pub(super) struct Rewind<T> {
    pub(super) prefix: Bytes,
    pub(super) io: T,
}

impl<T> Rewind<T> {
    pub(super) fn new(io: T, prefix: Bytes) -> Rewind<T> {
        Rewind { prefix, io }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let part = self.prefix.split_to(n);
            buf.put_slice(&part);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    /// As the socket's: h2 writes a DATA frame's head and payload in one call then.
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;
    use tokio::io::AsyncWriteExt;

    /// h2 writes a DATA frame's head and payload in one call only through an I/O object
    /// that says it writes vectors: the socket's answer comes through.
    #[tokio::test]
    async fn vectored_writes_reach_the_socket() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let mut rewind = Rewind::new(a, Bytes::new());
        assert!(rewind.is_write_vectored());
        let bufs = [IoSlice::new(b"head"), IoSlice::new(b"payload")];
        let n = rewind.write_vectored(&bufs).await.unwrap();
        assert_eq!(n, 11, "both slices in one write");
        let mut got = [0u8; 11];
        tokio::io::AsyncReadExt::read_exact(&mut b, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"headpayload");
    }
}
