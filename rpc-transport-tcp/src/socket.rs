//! [`Socket`]: a TCP stream, plain or under TLS, and its two halves.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A TLS session over TCP, either side.
pub type TlsStream = tokio_rustls::TlsStream<TcpStream>;

/// An established TCP stream, plain or under TLS: what the TCP transport, the RDMA side
/// channel and the gRPC server run over.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // One per connection; boxing would cost a hop per read.
pub enum Socket {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(TlsStream),
}

impl Socket {
    /// The TCP stream underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Plain(s) => s,
            Socket::Tls(s) => s.get_ref().0,
        }
    }

    /// The peer's address.
    ///
    /// # Errors
    /// If the socket has none (it is no longer connected).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    /// The local address.
    ///
    /// # Errors
    /// If the socket has none.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// Whether the stream is under TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Socket::Tls(_))
    }

    /// The certificate chain the peer presented in the TLS handshake (DER, its own
    /// first), if it presented one: the server's on a client, a client's under mutual
    /// TLS on a server.
    pub fn peer_certificates(&self) -> Option<Vec<Bytes>> {
        let Socket::Tls(s) = self else { return None };
        let chain = s.get_ref().1.peer_certificates()?;
        Some(
            chain
                .iter()
                .map(|c| Bytes::copy_from_slice(c.as_ref()))
                .collect(),
        )
    }

    /// The application protocol the TLS handshake agreed on (ALPN), if any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        match self {
            Socket::Plain(_) => None,
            Socket::Tls(s) => s.get_ref().1.alpn_protocol(),
        }
    }

    /// Splits the stream into halves that a reader and a writer own apart.
    pub(crate) fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Socket::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Socket::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

impl From<TcpStream> for Socket {
    fn from(stream: TcpStream) -> Socket {
        Socket::Plain(stream)
    }
}

/// Implements `AsyncRead` for an enum of a plain and a TLS stream (or halves of them),
/// each method passed to whichever is inside.
macro_rules! delegate_read {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

/// Implements `AsyncWrite` likewise.
macro_rules! delegate_write {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    Self::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(s) => s.is_write_vectored(),
                    Self::Tls(s) => s.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

delegate_read!(Socket);
delegate_write!(Socket);

/// The read half of a [`Socket`].
#[derive(Debug)]
pub(crate) enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream>),
}

delegate_read!(ReadHalf);

/// The write half of a [`Socket`].
#[derive(Debug)]
pub(crate) enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream>),
}

delegate_write!(WriteHalf);
