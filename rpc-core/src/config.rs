//! Client and server configuration of the runtime (transports have their own).

use std::time::Duration;

/// The default maximum message size: 4 MiB, as in gRPC.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;

/// Client-side settings of a [`Channel`](crate::Channel).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Largest request message the channel sends; a larger one fails locally with
    /// `RESOURCE_EXHAUSTED` before touching the connection. Default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`]. Keep it at or below the server's limit.
    pub max_message_size: usize,
    /// Timeout applied to calls whose request sets none. Default: none (calls wait as
    /// long as the connection lives).
    pub timeout: Option<Duration>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            timeout: None,
        }
    }
}

impl ClientConfig {
    /// Sets [`ClientConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rpc_core::ClientConfig::default();
    /// config.max_message_size(64 << 20).timeout(std::time::Duration::from_secs(5));
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`ClientConfig::timeout`].
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Server-side settings of a [`Server`](crate::Server).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Largest request message accepted; a larger one is answered with
    /// `RESOURCE_EXHAUSTED` and the connection stays open. Default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`].
    pub max_message_size: usize,
    /// Most calls running at once across all connections; further requests wait (the
    /// connection's reader stops reading, which pushes back on the clients). Default 4096.
    pub max_concurrent_calls: usize,
    /// How long a graceful shutdown waits for in-flight calls before dropping them.
    /// Default 30 s.
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrent_calls: 4096,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl ServerConfig {
    /// Sets [`ServerConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rpc_core::ServerConfig::default();
    /// config.max_message_size(64 << 20).max_concurrent_calls(128);
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`ServerConfig::max_concurrent_calls`].
    pub fn max_concurrent_calls(&mut self, calls: usize) -> &mut Self {
        self.max_concurrent_calls = calls;
        self
    }

    /// Sets [`ServerConfig::shutdown_grace`].
    pub fn shutdown_grace(&mut self, grace: Duration) -> &mut Self {
        self.shutdown_grace = grace;
        self
    }
}
