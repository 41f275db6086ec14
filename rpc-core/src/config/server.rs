//! [`ServerConfig`]: the server's settings, its bounds first.

use super::{DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_STREAM_WINDOW};
use std::time::Duration;

/// Server-side settings of a [`Server`](crate::Server).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Largest request message accepted; a larger one is answered with
    /// `RESOURCE_EXHAUSTED` and the connection stays open. Default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`].
    pub max_message_size: usize,
    /// Most unary calls running at once across all connections (streaming calls count
    /// against [`ServerConfig::max_open_streams`]). A request that finds no permit
    /// waits in its connection's queue (see
    /// [`ServerConfig::max_queued_calls_per_connection`]); permits are granted in arrival
    /// order across connections. Default 4096.
    pub max_concurrent_calls: usize,
    /// Most unary calls running at once on one connection, so that one client cannot take
    /// every server-wide permit. Default 256.
    pub max_concurrent_calls_per_connection: usize,
    /// Most unary calls running at once from one peer (an IPv4 address or an IPv6 /64),
    /// over all its connections: a peer that opens many connections and holds a call on
    /// each (a slow handler, a call whose response it does not read) still leaves the
    /// rest of [`ServerConfig::max_concurrent_calls`] to others. (Streaming calls hold
    /// stream slots instead: [`ServerConfig::max_open_streams_per_peer`].) Default 1024, a quarter of
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
    /// Most streaming calls open at once server-wide. An open stream holds a stream
    /// slot, not a call permit, however long it stays open (a `Watch` that waits for
    /// changes, a chat that waits for messages), so long-lived streams cannot starve
    /// unary work; a stream opened beyond a slot limit waits in its connection's queue
    /// as a call waits for a permit. Default 8192.
    pub max_open_streams: usize,
    /// Most streaming calls open at once from one peer (an IPv4 address or an IPv6 /64)
    /// over all its connections. Default 1024.
    pub max_open_streams_per_peer: usize,
    /// Most streaming calls open at once on one connection. Default 256.
    pub max_open_streams_per_connection: usize,
    /// Most bytes of requests the server holds at once (at their in-memory size:
    /// decompressed, decoded), from their arrival until their call's response is handed
    /// to the transport, and what the HTTP/2 bridge holds of requests not yet handed
    /// over; and what a unary response holds beyond its request (past 4 KiB) until the
    /// transport takes it. A request beyond it is answered `RESOURCE_EXHAUSTED` (over
    /// HTTP/2, a body beyond it is not read: flow control holds the client), and so is a
    /// response beyond it. Half of it is first come, first served; the other half is
    /// shared fairly among the peers that need it. Default 128 MiB.
    pub max_held_bytes: usize,
    /// The same per peer, over all its connections: what one address can make the
    /// server hold. Default 32 MiB.
    pub max_held_bytes_per_peer: usize,
    /// The same per connection (one request larger than it is accepted into a
    /// connection that holds nothing else). Default 32 MiB.
    pub max_held_bytes_per_connection: usize,
    /// Most bytes the server has handed to its transports for its peers and that are
    /// not written out yet (responses, stream messages, statuses: the TCP send queue,
    /// the HTTP/2 bridge's response buffer). A sender beyond it waits: a peer that does
    /// not read holds back its own calls. Half of it is first come, first served; the
    /// other half is shared fairly among the peers that need it. Default 64 MiB.
    pub max_sending_bytes: usize,
    /// The same per peer, over all its connections. Default 16 MiB.
    pub max_sending_bytes_per_peer: usize,
    /// The same per connection (one frame larger than it is taken by a connection that
    /// has nothing else queued). Default 8 MiB.
    pub max_sending_bytes_per_connection: usize,
    /// A connection with no call waiting, running or open for this long is closed
    /// gracefully (GOAWAY, then close; a client reconnects when it next calls). Checked
    /// at least each second while calls run, so the close comes within this plus a
    /// second of the last call's end. Pings do not count as calls. Default `None`
    /// (idle connections stay open, held by the listener's connection limits).
    pub max_connection_idle: Option<Duration>,
    /// A connection open this long (±10 % per connection, so that connections opened
    /// together do not all reconnect at once) is closed gracefully: GOAWAY, the calls in
    /// flight may finish, new calls go to a new connection. Spreads clients over
    /// servers added behind a balancer, and bounds how long one TLS session lives.
    /// Default `None`.
    pub max_connection_age: Option<Duration>,
    /// How long calls may still run on a connection that is draining (after its
    /// [`ServerConfig::max_connection_age`], its [`ServerConfig::max_connection_idle`],
    /// or a graceful shutdown) before it is closed and they end `UNAVAILABLE`. Default
    /// `None`: they may finish (a server shutdown still ends them after
    /// [`ServerConfig::shutdown_grace`]).
    pub max_connection_age_grace: Option<Duration>,
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
            max_open_streams: 8192,
            max_open_streams_per_peer: 1024,
            max_open_streams_per_connection: 256,
            max_held_bytes: 128 << 20,
            max_held_bytes_per_peer: 32 << 20,
            max_held_bytes_per_connection: 32 << 20,
            max_sending_bytes: 64 << 20,
            max_sending_bytes_per_peer: 16 << 20,
            max_sending_bytes_per_connection: 8 << 20,
            max_connection_idle: None,
            max_connection_age: None,
            max_connection_age_grace: None,
        }
    }
}

impl ServerConfig {
    /// The limits of the server's accounts ([`crate::account`]), from these settings.
    pub fn limits(&self) -> crate::account::Limits {
        use crate::account::Limit;
        crate::account::Limits {
            calls: Limit {
                connection: self.max_concurrent_calls_per_connection,
                peer: self.max_concurrent_calls_per_peer,
                server: self.max_concurrent_calls,
            },
            streams: Limit {
                connection: self.max_open_streams_per_connection,
                peer: self.max_open_streams_per_peer,
                server: self.max_open_streams,
            },
            bytes: Limit {
                connection: self.max_held_bytes_per_connection,
                peer: self.max_held_bytes_per_peer,
                server: self.max_held_bytes,
            },
            sending: Limit {
                connection: self.max_sending_bytes_per_connection,
                peer: self.max_sending_bytes_per_peer,
                server: self.max_sending_bytes,
            },
        }
    }

    /// Sets [`ServerConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rdmarpc_core::ServerConfig::default();
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

    /// Sets [`ServerConfig::max_open_streams`].
    pub fn max_open_streams(&mut self, streams: usize) -> &mut Self {
        self.max_open_streams = streams;
        self
    }

    /// Sets [`ServerConfig::max_open_streams_per_peer`].
    pub fn max_open_streams_per_peer(&mut self, streams: usize) -> &mut Self {
        self.max_open_streams_per_peer = streams;
        self
    }

    /// Sets [`ServerConfig::max_open_streams_per_connection`].
    pub fn max_open_streams_per_connection(&mut self, streams: usize) -> &mut Self {
        self.max_open_streams_per_connection = streams;
        self
    }

    /// Sets [`ServerConfig::max_held_bytes`].
    pub fn max_held_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_held_bytes = bytes;
        self
    }

    /// Sets [`ServerConfig::max_held_bytes_per_peer`].
    pub fn max_held_bytes_per_peer(&mut self, bytes: usize) -> &mut Self {
        self.max_held_bytes_per_peer = bytes;
        self
    }

    /// Sets [`ServerConfig::max_held_bytes_per_connection`].
    pub fn max_held_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_held_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::max_sending_bytes`].
    pub fn max_sending_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_sending_bytes = bytes;
        self
    }

    /// Sets [`ServerConfig::max_sending_bytes_per_peer`].
    pub fn max_sending_bytes_per_peer(&mut self, bytes: usize) -> &mut Self {
        self.max_sending_bytes_per_peer = bytes;
        self
    }

    /// Sets [`ServerConfig::max_sending_bytes_per_connection`].
    pub fn max_sending_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_sending_bytes_per_connection = bytes;
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

    /// Sets [`ServerConfig::max_connection_idle`]; `None` keeps idle connections open.
    pub fn max_connection_idle(&mut self, idle: Option<Duration>) -> &mut Self {
        self.max_connection_idle = idle;
        self
    }

    /// Sets [`ServerConfig::max_connection_age`] and
    /// [`ServerConfig::max_connection_age_grace`]; `None` for no limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut config = rdmarpc_core::ServerConfig::default();
    /// config.max_connection_age(Some(Duration::from_secs(1800)), Some(Duration::from_secs(30)));
    /// ```
    pub fn max_connection_age(
        &mut self,
        age: Option<Duration>,
        grace: Option<Duration>,
    ) -> &mut Self {
        self.max_connection_age = age;
        self.max_connection_age_grace = grace;
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
