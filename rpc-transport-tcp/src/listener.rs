//! [`TcpListener`].

use std::collections::VecDeque;

use rdmarpc_core::{Listener, TransportError};
use tokio::net::ToSocketAddrs;

use crate::{TcpConfig, TcpConnection};

/// Accepts TCP connections for `rdmarpc_core::Server`.
#[derive(Debug)]
pub struct TcpListener {
    /// `None` once [`Listener::stop_accepting`] closed it.
    inner: Option<tokio::net::TcpListener>,
    local: String,
    config: TcpConfig,
    /// Connections taken from the backlog as the socket closed, still to be yielded.
    pending: VecDeque<TcpConnection>,
}

impl TcpListener {
    /// Binds `addr` (`host:port`; port 0 picks a free one).
    ///
    /// # Errors
    /// The bind error.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        config: TcpConfig,
    ) -> Result<TcpListener, TransportError> {
        let inner = tokio::net::TcpListener::bind(addr).await?;
        Ok(TcpListener::from_listener(inner, config))
    }

    /// Wraps a bound tokio listener.
    pub fn from_listener(inner: tokio::net::TcpListener, config: TcpConfig) -> TcpListener {
        let local = match inner.local_addr() {
            Ok(addr) => format!("tcp://{addr}"),
            Err(_) => "tcp://?".to_owned(),
        };
        TcpListener {
            inner: Some(inner),
            local,
            config,
            pending: VecDeque::new(),
        }
    }

    /// The bound socket address.
    ///
    /// # Errors
    /// If the socket has no local address.
    pub fn local_socket_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        match &self.inner {
            Some(inner) => inner.local_addr(),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the listener stopped accepting",
            )),
        }
    }
}

impl Listener for TcpListener {
    type Conn = TcpConnection;

    async fn accept(&mut self) -> Result<TcpConnection, TransportError> {
        loop {
            let Some(inner) = &self.inner else {
                return self.pending.pop_front().ok_or(TransportError::Closed);
            };
            let (stream, _) = accept_socket(inner).await;
            match TcpConnection::accepted(stream, &self.config, &[]) {
                Ok(conn) => return Ok(conn),
                Err(e) => tracing::warn!("dropping accepted connection: {e}"),
            }
        }
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }

    fn stop_accepting(&mut self) -> bool {
        if let Some(inner) = self.inner.take() {
            for stream in take_backlog(inner) {
                match TcpConnection::accepted(stream, &self.config, &[]) {
                    Ok(conn) => self.pending.push_back(conn),
                    Err(e) => tracing::warn!("dropping accepted connection: {e}"),
                }
            }
        }
        true
    }
}

/// The next socket of `listener` and its peer's address. A per-connection accept error
/// (e.g. `ECONNABORTED`, `EMFILE`) must not end a server: it is logged and the accept is
/// tried again after a short back-off (10 ms), so a full file table is not spun on.
pub async fn accept_socket(
    listener: &tokio::net::TcpListener,
) -> (tokio::net::TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// Closes `listener` after taking the connections waiting in its backlog (which the close
/// would reset).
pub fn take_backlog(listener: tokio::net::TcpListener) -> Vec<tokio::net::TcpStream> {
    let mut taken = Vec::new();
    let listener = match listener.into_std() {
        Ok(listener) => listener,
        Err(e) => {
            tracing::warn!("closing the listener: {e}");
            return taken;
        }
    };
    // Non-blocking already (it was tokio's): accept until the backlog is empty.
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let stream = stream
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::TcpStream::from_std(stream));
                match stream {
                    Ok(stream) => taken.push(stream),
                    Err(e) => tracing::warn!("dropping accepted connection: {e}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("accept failed while closing: {e}");
                break;
            }
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use rdmarpc_core::wire::{FrameKind, Header, HEADER_LEN};
    use rdmarpc_core::{Connection, Listener, TransportError};

    use crate::{TcpConfig, TcpConnection, TcpListener};

    /// Stopped, the listener refuses new sockets at once and still yields (and so lets
    /// the server answer) a connection that was waiting in the kernel's backlog.
    #[tokio::test]
    async fn a_stopped_listener_yields_its_backlog_and_refuses_new_sockets() {
        let mut listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())
            .await
            .unwrap();
        let addr = listener.local_socket_addr().unwrap();
        let early = TcpConnection::connect(addr, &TcpConfig::default())
            .await
            .unwrap();
        let mut header = Header::new(FrameKind::Request, 1);
        header.payload_len = 2;
        let mut out = early.alloc(header.frame_len()).await.unwrap();
        out.put_slice(&header.encode());
        out.put_slice(b"hi");
        early.send(out).await.unwrap();

        assert!(listener.stop_accepting());
        assert!(TcpConnection::connect(addr, &TcpConfig::default())
            .await
            .is_err());
        let conn = listener.accept().await.unwrap();
        let frame = conn.recv().await.unwrap().unwrap();
        assert_eq!(&frame[HEADER_LEN..], b"hi");
        assert!(matches!(
            listener.accept().await,
            Err(TransportError::Closed)
        ));
    }
}
