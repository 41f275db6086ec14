//! Client and server configuration of the runtime (transports have their own).

use std::time::Duration;

/// The default maximum message size: 4 MiB, as in gRPC.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;

/// The default window of each received stream: 1 MiB of frames.
pub const DEFAULT_STREAM_WINDOW: u32 = 1024 * 1024;

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
        }
    }
}

impl ClientConfig {
    /// Sets [`ClientConfig::stream_window`].
    pub fn stream_window(&mut self, bytes: u32) -> &mut Self {
        self.stream_window = bytes;
        self
    }

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

/// Server-side settings of a [`Server`](crate::Server).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Largest request message accepted; a larger one is answered with
    /// `RESOURCE_EXHAUSTED` and the connection stays open. Default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`].
    pub max_message_size: usize,
    /// Most calls running at once across all connections. A request that finds no permit
    /// waits in its connection's queue (see
    /// [`ServerConfig::max_queued_calls_per_connection`]); permits are granted in arrival
    /// order across connections. Default 4096.
    pub max_concurrent_calls: usize,
    /// Most calls running at once on one connection, so that one client cannot take
    /// every server-wide permit. Default 256.
    pub max_concurrent_calls_per_connection: usize,
    /// Most calls running at once from one peer (an IPv4 address or an IPv6 /64), over all its
    /// connections: a peer that opens many connections and holds a call open on each
    /// (an idle stream, a call whose response it does not read) still leaves the rest
    /// of [`ServerConfig::max_concurrent_calls`] to others. Default 1024, a quarter of
    /// the server's. Behind a proxy or a sidecar every call comes from one address:
    /// raise it to `max_concurrent_calls` there.
    pub max_concurrent_calls_per_peer: usize,
    /// Most requests of one connection waiting (decoded) for a permit. The connection
    /// keeps reading while calls wait, so it still sees CANCEL, PING and EOF; a request
    /// beyond this is answered at once with `RESOURCE_EXHAUSTED` (flagged as not started,
    /// see [`Flags::REFUSED`](crate::wire::Flags::REFUSED)). Default 1024.
    pub max_queued_calls_per_connection: usize,
    /// Most request payload bytes of one connection waiting for a permit (one request
    /// is always admitted to an empty queue). Default 32 MiB.
    pub max_queued_bytes_per_connection: usize,
    /// Replies (PONG, GOAWAY, error statuses) that the reader may queue for sending
    /// before it stops reading that connection: a peer that sends pings or bad requests
    /// and never reads holds at most this many small frames. Default 64.
    pub max_queued_replies: usize,
    /// How long a graceful shutdown waits for in-flight calls before dropping them.
    /// Default 30 s.
    pub shutdown_grace: Duration,
    /// After a GOAWAY, how long a connection whose calls are done waits for the client
    /// to acknowledge (its own GOAWAY, or closing): requests that crossed the GOAWAY are
    /// answered as refused meanwhile, so the client can send them elsewhere. Default 2 s.
    pub drain_timeout: Duration,
    /// How many bytes of messages (counted as whole frames) a client may send on one
    /// request stream before the handler reads them: what a stream buffers is at most
    /// this plus one message. Granted when the call starts (a call waiting for a permit
    /// is granted nothing). Default [`DEFAULT_STREAM_WINDOW`].
    pub stream_window: u32,
    /// Most bytes of window the server grants one connection's request streams together:
    /// each stream's window comes out of it when its call starts and goes back as its
    /// handler reads (or when the call ends); a stream that finds no room waits, its
    /// window spent, until another gives some back. The server keeps reading the
    /// connection meanwhile. What the request streams buffer is then at most this plus
    /// one message per stream granted a window. Default 32 MiB.
    pub max_stream_bytes_per_connection: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrent_calls: 4096,
            max_concurrent_calls_per_connection: 256,
            max_concurrent_calls_per_peer: 1024,
            max_queued_calls_per_connection: 1024,
            max_queued_bytes_per_connection: 32 << 20,
            max_queued_replies: 64,
            shutdown_grace: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(2),
            stream_window: DEFAULT_STREAM_WINDOW,
            max_stream_bytes_per_connection: 32 << 20,
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

    /// Sets [`ServerConfig::max_concurrent_calls_per_connection`].
    pub fn max_concurrent_calls_per_connection(&mut self, calls: usize) -> &mut Self {
        self.max_concurrent_calls_per_connection = calls;
        self
    }

    /// Sets [`ServerConfig::max_concurrent_calls_per_peer`].
    pub fn max_concurrent_calls_per_peer(&mut self, calls: usize) -> &mut Self {
        self.max_concurrent_calls_per_peer = calls;
        self
    }

    /// Sets [`ServerConfig::max_queued_calls_per_connection`].
    pub fn max_queued_calls_per_connection(&mut self, calls: usize) -> &mut Self {
        self.max_queued_calls_per_connection = calls;
        self
    }

    /// Sets [`ServerConfig::max_queued_bytes_per_connection`].
    pub fn max_queued_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_queued_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::max_queued_replies`].
    pub fn max_queued_replies(&mut self, replies: usize) -> &mut Self {
        self.max_queued_replies = replies;
        self
    }

    /// Sets [`ServerConfig::drain_timeout`].
    pub fn drain_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.drain_timeout = timeout;
        self
    }

    /// Sets [`ServerConfig::stream_window`].
    pub fn stream_window(&mut self, bytes: u32) -> &mut Self {
        self.stream_window = bytes;
        self
    }

    /// Sets [`ServerConfig::max_stream_bytes_per_connection`].
    pub fn max_stream_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_stream_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::shutdown_grace`].
    pub fn shutdown_grace(&mut self, grace: Duration) -> &mut Self {
        self.shutdown_grace = grace;
        self
    }
}
