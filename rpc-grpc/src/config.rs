//! The gRPC server's settings: HTTP/2 windows, streams, keepalive, timeouts.

use std::time::Duration;

/// Settings of the gRPC side of a server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GrpcConfig {
    /// Largest request message accepted (a larger one fails its call with
    /// `RESOURCE_EXHAUSTED`, told from its prefix, before it is buffered). Default 4 MiB.
    pub max_message_size: usize,
    /// Calls open at once on one HTTP/2 connection (`SETTINGS_MAX_CONCURRENT_STREAMS`):
    /// further ones are refused by HTTP/2. Default 256.
    pub max_concurrent_streams: u32,
    /// HTTP/2 window of each call's request body: what a client may send before the
    /// server reads it. Default 1 MiB.
    pub stream_window: u32,
    /// HTTP/2 window of the whole connection. Default 16 MiB.
    pub connection_window: u32,
    /// Largest HTTP/2 frame the peer may send (`SETTINGS_MAX_FRAME_SIZE`, 16 KiB to
    /// 16 MiB - 1): HTTP/2 reads a whole frame before it takes it apart, so this is what
    /// one connection may make this side buffer beyond its windows. Larger frames cost
    /// fewer reads and wake-ups per large message (a 1 MiB request in 16 KiB frames took
    /// 138 socket reads, in 64 KiB frames 38). Default 64 KiB (HTTP/2's is 16 KiB).
    pub max_frame_size: u32,
    /// Most response bytes of one connection handed over by the server and not yet
    /// taken by HTTP/2 flow control (messages waiting for a client that reads slowly):
    /// past it the server's sends on this connection wait (backpressure on this client).
    /// Default 16 MiB.
    pub max_buffered_response_bytes: usize,
    /// How long a request body may stall while a message is in progress (or a unary
    /// request's body has not ended): the call then fails with `CANCELLED`. Default 30 s.
    pub body_timeout: Duration,
    /// Compression of the messages this side sends, if any: on a server, responses to
    /// clients whose `grpc-accept-encoding` lists it; on a client (`grpc://`), requests.
    /// Messages under 512 bytes go uncompressed. Received messages are read in gzip,
    /// zstd or uncompressed whatever this says. Default none.
    pub send_compression: Option<crate::Encoding>,
    /// How long a call's response data may wait for the client's HTTP/2 flow-control
    /// window (its stream's or the connection's) with none granted: the call is then
    /// reset (`CANCEL`), the server's call cancelled and its buffers freed. Shorter
    /// frees what non-reading clients hold sooner; longer lets slow readers pause longer.
    /// Default 30 s.
    pub stream_idle_timeout: Duration,
    /// How long the connection's socket writes may make no progress while bytes wait to
    /// be written (the client stopped reading the socket): the connection is then
    /// closed, like the TCP frames transport's `write_timeout`. Checked on a coarse timer
    /// (a quarter of the shortest of these timeouts, 10 ms to 1 s). Default 30 s.
    pub write_timeout: Duration,
    /// HTTP/2 keepalive: after this long without a byte from the client, the server
    /// sends a PING; `None` turns keepalives off (dead peers are then noticed only by
    /// TCP). Shorter notices dead peers sooner, at a PING per idle connection per
    /// interval (gRPC clients do not police the server's PINGs). Default 60 s (grpc-go's
    /// server: 2 h).
    pub keepalive_interval: Option<Duration>,
    /// How long the client may take to answer a keepalive PING (any byte counts) before
    /// the connection is closed. Default 20 s, as gRPC's.
    pub keepalive_timeout: Duration,
    /// On a client (`grpc://`, `grpcs://`): the requests' `:authority`, instead of the
    /// endpoint's `host:port` (a server behind a proxy that routes by it, or one that
    /// checks it). Under TLS the certificate is still verified against the host (or
    /// the TLS settings' server name). Default none.
    pub authority: Option<String>,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            max_message_size: rdmarpc_core::DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrent_streams: 256,
            stream_window: rdmarpc_core::DEFAULT_STREAM_WINDOW,
            connection_window: 16 << 20,
            max_frame_size: 64 << 10,
            max_buffered_response_bytes: 16 << 20,
            body_timeout: Duration::from_secs(30),
            send_compression: None,
            stream_idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            keepalive_interval: Some(Duration::from_secs(60)),
            keepalive_timeout: Duration::from_secs(20),
            authority: None,
        }
    }
}

impl GrpcConfig {
    /// [`GrpcConfig::max_frame_size`] within HTTP/2's bounds, as advertised.
    pub(crate) fn frame_size(&self) -> u32 {
        self.max_frame_size.clamp(1 << 14, (1 << 24) - 1)
    }

    /// Sets [`GrpcConfig::max_message_size`].
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }
}
