//! [`TcpListener`].

use rpc_core::{Listener, TransportError};
use tokio::net::ToSocketAddrs;

use crate::{TcpConfig, TcpConnection};

/// Accepts TCP connections for `rpc_core::Server`.
#[derive(Debug)]
pub struct TcpListener {
    inner: tokio::net::TcpListener,
    config: TcpConfig,
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
        Ok(TcpListener { inner, config })
    }

    /// Wraps a bound tokio listener.
    pub fn from_listener(inner: tokio::net::TcpListener, config: TcpConfig) -> TcpListener {
        TcpListener { inner, config }
    }

    /// The bound socket address.
    ///
    /// # Errors
    /// If the socket has no local address.
    pub fn local_socket_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

impl Listener for TcpListener {
    type Conn = TcpConnection;

    async fn accept(&mut self) -> Result<TcpConnection, TransportError> {
        loop {
            match self.inner.accept().await {
                Ok((stream, _)) => match TcpConnection::accepted(stream, &self.config, &[]) {
                    Ok(conn) => return Ok(conn),
                    Err(e) => tracing::warn!("dropping accepted connection: {e}"),
                },
                // Per-connection accept errors (e.g. ECONNABORTED, EMFILE) must not end the
                // server: log, back off briefly, go on.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> String {
        match self.inner.local_addr() {
            Ok(addr) => format!("tcp://{addr}"),
            Err(_) => "tcp://?".to_owned(),
        }
    }
}
