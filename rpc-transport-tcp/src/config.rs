//! [`TcpConfig`].

use std::time::Duration;

/// Settings of the TCP transport.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TcpConfig {
    /// Largest payload accepted from the peer; larger frames are skipped and reported as
    /// discarded (the runtime answers `RESOURCE_EXHAUSTED`). Also the largest payload
    /// this side sends. Default `rdmarpc_core::DEFAULT_MAX_MESSAGE_SIZE` (4 MiB).
    pub max_message_size: usize,
    /// Frames queued for the writer before `send` waits. Default 1024.
    pub send_queue_frames: usize,
    /// Bytes queued for the writer before `send` waits: what a peer that stops reading
    /// can make this side hold, per connection. A frame larger than this is admitted
    /// alone into an empty queue. Default 8 MiB.
    pub send_queue_bytes: usize,
    /// Size of the writer's coalescing buffer; frames at least this large are written
    /// straight from their own buffer. Default 64 KiB.
    pub write_buffer: usize,
    /// A write that makes no progress for this long (the peer stopped reading) closes
    /// the connection. Default 30 s.
    pub write_timeout: Duration,
    /// Time allowed from a frame's first byte to its last; a frame that stalls half way
    /// closes the connection. Default 30 s.
    pub frame_timeout: Duration,
    /// On accepted connections: time allowed from the accept to the first complete
    /// frame, so that a socket that never sends is closed. Default 10 s.
    pub first_frame_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_message_size: rdmarpc_core::DEFAULT_MAX_MESSAGE_SIZE,
            send_queue_frames: 1024,
            send_queue_bytes: 8 << 20,
            write_buffer: 64 * 1024,
            write_timeout: Duration::from_secs(30),
            frame_timeout: Duration::from_secs(30),
            first_frame_timeout: Duration::from_secs(10),
        }
    }
}

impl TcpConfig {
    /// Sets [`TcpConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rdmarpc_transport_tcp::TcpConfig::default();
    /// config.max_message_size(64 << 20);
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`TcpConfig::send_queue_bytes`].
    pub fn send_queue_bytes(&mut self, bytes: usize) -> &mut Self {
        self.send_queue_bytes = bytes;
        self
    }

    /// Sets [`TcpConfig::write_timeout`].
    pub fn write_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.write_timeout = timeout;
        self
    }

    /// Sets [`TcpConfig::frame_timeout`].
    pub fn frame_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.frame_timeout = timeout;
        self
    }

    /// Sets [`TcpConfig::first_frame_timeout`].
    pub fn first_frame_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.first_frame_timeout = timeout;
        self
    }
}
