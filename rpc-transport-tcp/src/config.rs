//! [`TcpConfig`].

/// Settings of the TCP transport.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TcpConfig {
    /// Largest payload accepted from the peer; larger frames are skipped and reported as
    /// discarded (the runtime answers `RESOURCE_EXHAUSTED`). Also the largest payload
    /// this side sends. Default `rpc_core::DEFAULT_MAX_MESSAGE_SIZE` (4 MiB).
    pub max_message_size: usize,
    /// Frames queued for the writer before `send` waits: the back-pressure bound.
    /// Default 1024.
    pub send_queue_frames: usize,
    /// Size of the writer's coalescing buffer; frames at least this large are written
    /// straight from their own buffer. Default 64 KiB.
    pub write_buffer: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_message_size: rpc_core::DEFAULT_MAX_MESSAGE_SIZE,
            send_queue_frames: 1024,
            write_buffer: 64 * 1024,
        }
    }
}

impl TcpConfig {
    /// Sets [`TcpConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rpc_transport_tcp::TcpConfig::default();
    /// config.max_message_size(64 << 20);
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }
}
