//! [`TcpConnection`].

use bytes::{Bytes, BytesMut};
use rpc_core::wire::HEADER_LEN;
use rpc_core::{Connection, TransportError, MAX_METADATA_LEN};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, watch};

use crate::reader::Reader;
use crate::writer::writer_task;
use crate::TcpConfig;

/// One TCP connection carrying frames.
///
/// `send` hands frames to the connection's writer task (bounded queue: back-pressure);
/// `recv` reads from the socket under an async mutex (one receiver at a time, cancel-safe
/// because partial reads stay in the connection's buffer).
#[derive(Debug)]
pub struct TcpConnection {
    peer: String,
    max_frame: usize,
    outbound: mpsc::Sender<BytesMut>,
    reader: tokio::sync::Mutex<Reader>,
    /// Set to true by `close`; wakes a pending `recv` and stops the writer.
    closed: watch::Sender<bool>,
}

impl TcpConnection {
    /// Connects to `addr` (`host:port`).
    ///
    /// # Errors
    /// The connect error.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        config: &TcpConfig,
    ) -> Result<TcpConnection, TransportError> {
        let stream = TcpStream::connect(addr).await?;
        TcpConnection::from_stream(stream, config)
    }

    /// Wraps an established stream (sets `TCP_NODELAY`).
    ///
    /// # Errors
    /// If the socket options cannot be set.
    pub fn from_stream(
        stream: TcpStream,
        config: &TcpConfig,
    ) -> Result<TcpConnection, TransportError> {
        TcpConnection::from_stream_with_prefix(stream, config, &[])
    }

    /// Wraps an established stream of which `already_read` was already consumed (e.g. by
    /// a transport negotiation that read the first bytes); they are parsed as the start of
    /// the frame stream.
    ///
    /// # Errors
    /// If the socket options cannot be set.
    pub fn from_stream_with_prefix(
        stream: TcpStream,
        config: &TcpConfig,
        already_read: &[u8],
    ) -> Result<TcpConnection, TransportError> {
        stream.set_nodelay(true)?;
        let peer = match stream.peer_addr() {
            Ok(addr) => format!("tcp://{addr}"),
            Err(_) => "tcp://?".to_owned(),
        };
        let (read, write) = stream.into_split();
        let (outbound, queue) = mpsc::channel(config.send_queue_frames.max(1));
        let (closed, closed_rx) = watch::channel(false);
        tokio::spawn(writer_task(
            write,
            queue,
            closed_rx.clone(),
            config.write_buffer,
            peer.clone(),
        ));
        Ok(TcpConnection {
            peer,
            max_frame: HEADER_LEN + MAX_METADATA_LEN + config.max_message_size,
            outbound,
            reader: tokio::sync::Mutex::new(Reader::new(
                read,
                config.max_message_size,
                closed_rx,
                already_read,
            )),
            closed,
        })
    }
}

impl Connection for TcpConnection {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        if len > self.max_frame {
            return Err(TransportError::TooLarge {
                len,
                max: self.max_frame,
            });
        }
        if *self.closed.borrow() {
            return Err(TransportError::Closed);
        }
        Ok(BytesMut::with_capacity(len))
    }

    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        self.outbound
            .send(frame)
            .await
            .map_err(|_| TransportError::Closed)
    }

    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        self.reader.lock().await.next_frame().await
    }

    fn close(&self) {
        self.closed.send_replace(true);
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

impl Drop for TcpConnection {
    fn drop(&mut self) {
        self.closed.send_replace(true);
    }
}
