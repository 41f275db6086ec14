//! [`ClientConfig`]: a channel's settings.

use super::balance::{BalanceConfig, LbStrategy};
use super::retry::RetryPolicy;
use super::{DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_STREAM_WINDOW};
use std::time::Duration;

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
    /// While calls are in flight and nothing was received from the server for this long,
    /// the channel sends a PING. `None` disables keepalive. Default 10 s.
    pub keepalive_interval: Option<Duration>,
    /// How long after a PING the server must have sent something (its PONG, or any
    /// frame) before the connection is declared dead and its calls fail with
    /// `UNAVAILABLE`: a hung server (stopped process, blocked runtime) is found within
    /// interval + timeout. Default 10 s.
    pub keepalive_timeout: Duration,
    /// How many times a call that the server refused without starting it (it was
    /// draining after a GOAWAY) is sent again on a fresh connection, for channels that
    /// reconnect. Default 3.
    pub max_transparent_retries: u32,
    /// For channels that reconnect: while no connection can be made, calls wait for the
    /// next dial (until their deadline) instead of failing at once with `UNAVAILABLE`
    /// (gRPC's wait-for-ready). Default false (fail fast).
    pub wait_for_ready: bool,
    /// How long one dial of a reconnecting channel may take (connect and transport
    /// handshake) before it counts as failed. Default 20 s.
    pub connect_timeout: Duration,
    /// How many bytes of messages (counted as whole frames) the server may send on one
    /// response stream before the application reads them: what a stream buffers is at
    /// most this plus one message. Default [`DEFAULT_STREAM_WINDOW`].
    pub stream_window: u32,
    /// How a channel over several endpoints (a list, a DNS name, a stream of them)
    /// spreads its calls and finds the endpoints it may use.
    pub balance: BalanceConfig,
    /// Which failed unary calls are sent again (on another endpoint, if the channel has
    /// several), and how often. Default `None`: a call that may have reached the server
    /// is never sent twice, only those the server refused unstarted are
    /// ([`ClientConfig::max_transparent_retries`]).
    pub retry: Option<RetryPolicy>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            timeout: None,
            keepalive_interval: Some(Duration::from_secs(10)),
            keepalive_timeout: Duration::from_secs(10),
            max_transparent_retries: 3,
            wait_for_ready: false,
            connect_timeout: Duration::from_secs(20),
            stream_window: DEFAULT_STREAM_WINDOW,
            balance: BalanceConfig::default(),
            retry: None,
        }
    }
}

impl ClientConfig {
    /// Sets [`BalanceConfig::strategy`].
    pub fn lb_strategy(&mut self, strategy: LbStrategy) -> &mut Self {
        self.balance.strategy = strategy;
        self
    }

    /// Sets [`BalanceConfig::health_check_service`]: endpoints are used only while their
    /// `grpc.health.v1` status for `service` is `SERVING`.
    pub fn health_check(&mut self, service: impl Into<String>) -> &mut Self {
        self.balance.health_check_service = Some(service.into());
        self
    }

    /// Sets [`ClientConfig::retry`].
    pub fn retry(&mut self, policy: RetryPolicy) -> &mut Self {
        self.retry = Some(policy);
        self
    }

    /// Sets [`ClientConfig::stream_window`].
    pub fn stream_window(&mut self, bytes: u32) -> &mut Self {
        self.stream_window = bytes;
        self
    }

    /// Sets [`ClientConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rdmarpc_core::ClientConfig::default();
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

    /// Sets [`ClientConfig::wait_for_ready`].
    pub fn wait_for_ready(&mut self, wait: bool) -> &mut Self {
        self.wait_for_ready = wait;
        self
    }

    /// Sets [`ClientConfig::keepalive_interval`] and
    /// [`ClientConfig::keepalive_timeout`]; `None` disables keepalive.
    pub fn keepalive(&mut self, interval: Option<Duration>, timeout: Duration) -> &mut Self {
        self.keepalive_interval = interval;
        self.keepalive_timeout = timeout;
        self
    }
}
