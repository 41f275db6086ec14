//! Turning an address URL into a listener or a channel.
//!
//! The examples take `--addr URL`: `tcp://HOST:PORT` today.

use rpc_core::{Channel, ClientConfig, Endpoint, TransportKind};
use rpc_transport_tcp::{TcpConfig, TcpConnection, TcpListener};

/// The connection type the examples' clients use.
pub type ClientConnection = TcpConnection;

/// Transport settings shared by the examples' servers and clients.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Largest message either side accepts or sends.
    pub max_message_size: usize,
    /// Default timeout of calls, if any.
    pub timeout: Option<std::time::Duration>,
}

/// Parses `url`, rejecting transports this build cannot serve.
///
/// # Errors
/// A message naming the problem.
pub fn parse(url: &str) -> anyhow::Result<Endpoint> {
    let endpoint: Endpoint = url.parse().map_err(anyhow::Error::msg)?;
    match endpoint.kind {
        TransportKind::Tcp => Ok(endpoint),
        other => anyhow::bail!(
            "transport {} is not available in this build",
            other.scheme()
        ),
    }
}

fn tcp_config(settings: &Settings) -> TcpConfig {
    let mut config = TcpConfig::default();
    config.max_message_size(settings.max_message_size);
    config
}

/// Binds a listener for `url`.
///
/// # Errors
/// Bad URL or bind failure.
pub async fn listen(url: &str, settings: &Settings) -> anyhow::Result<TcpListener> {
    let endpoint = parse(url)?;
    Ok(TcpListener::bind(endpoint.address.as_str(), tcp_config(settings)).await?)
}

/// Connects a channel to `url`.
///
/// # Errors
/// Bad URL or connect failure.
pub async fn connect(url: &str, settings: &Settings) -> anyhow::Result<Channel<ClientConnection>> {
    let endpoint = parse(url)?;
    let conn = TcpConnection::connect(endpoint.address.as_str(), &tcp_config(settings)).await?;
    let mut config = ClientConfig::default();
    config.max_message_size(settings.max_message_size);
    if let Some(t) = settings.timeout {
        config.timeout(t);
    }
    Ok(Channel::with_config(conn, config))
}
