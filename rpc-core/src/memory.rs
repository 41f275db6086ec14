//! An in-memory transport: a connected pair of [`MemoryConnection`]s, for tests of the
//! runtime and of services. Not a substitute for TCP or RDMA in their own tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use crate::metadata::MAX_METADATA_LEN;
use crate::transport::{Connection, Listener, TransportError};
use crate::wire::{Flags, Header, HEADER_LEN};

/// Frames queued per direction before `send` waits (a stand-in for flow control).
const QUEUE_FRAMES: usize = 1024;

/// Frames at least this long are kept ([`Connection::keep`]): each is an allocation of
/// its own, so a kept frame pins nothing else. Smaller ones are copied out.
pub const KEEP_MIN: usize = 32 * 1024;

/// One end of an in-memory connection.
#[derive(Debug)]
pub struct MemoryConnection {
    name: String,
    max_message_size: usize,
    /// Taken on close, which ends the peer's `recv`.
    tx: Mutex<Option<mpsc::Sender<Bytes>>>,
    rx: tokio::sync::Mutex<mpsc::Receiver<Bytes>>,
    closed: AtomicBool,
    closed_notify: Notify,
}

/// A connected pair; frames whose payload exceeds `max_message_size` are delivered as
/// [`Flags::DISCARDED`] headers, as the real transports do.
pub fn pair(max_message_size: usize) -> (MemoryConnection, MemoryConnection) {
    let (a_tx, b_rx) = mpsc::channel(QUEUE_FRAMES);
    let (b_tx, a_rx) = mpsc::channel(QUEUE_FRAMES);
    let end = |name: &str, tx, rx| MemoryConnection {
        name: name.to_owned(),
        max_message_size,
        tx: Mutex::new(Some(tx)),
        rx: tokio::sync::Mutex::new(rx),
        closed: AtomicBool::new(false),
        closed_notify: Notify::new(),
    };
    (end("memory://a", a_tx, a_rx), end("memory://b", b_tx, b_rx))
}

impl Connection for MemoryConnection {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        let max = HEADER_LEN + MAX_METADATA_LEN + self.max_message_size;
        if len > max {
            return Err(TransportError::TooLarge { len, max });
        }
        Ok(BytesMut::with_capacity(len))
    }

    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        let tx = self.tx.lock().clone().ok_or(TransportError::Closed)?;
        tx.send(frame.freeze())
            .await
            .map_err(|_| TransportError::Closed)
    }

    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut rx = self.rx.lock().await;
        let frame = tokio::select! {
            frame = rx.recv() => frame,
            () = self.closed_notify.notified() => None,
        };
        let Some(frame) = frame else { return Ok(None) };
        self.deliver(frame).map(Some)
    }

    fn recv_ready(&self, out: &mut Vec<Bytes>, max: usize) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut rx) = self.rx.try_lock() else {
            return;
        };
        while out.len() < max {
            let Ok(frame) = rx.try_recv() else { return };
            match self.deliver(frame) {
                Ok(frame) => out.push(frame),
                // A short frame: nothing in this transport makes one.
                Err(_) => return,
            }
        }
    }

    fn keep(&self, frame: Bytes) -> Result<Bytes, Bytes> {
        if frame.len() >= KEEP_MIN {
            Ok(frame)
        } else {
            Err(frame)
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.tx.lock().take();
        self.closed_notify.notify_waiters();
    }

    fn peer(&self) -> String {
        self.name.clone()
    }
}

impl MemoryConnection {
    /// A frame as the real transports deliver it: over the size limit, its header alone
    /// flagged DISCARDED.
    fn deliver(&self, frame: Bytes) -> Result<Bytes, TransportError> {
        let header = Header::decode(&frame)?.ok_or(TransportError::Other("short frame".into()))?;
        if header.payload_len as usize > self.max_message_size {
            let mut discarded = header;
            discarded.flags = discarded.flags | Flags::DISCARDED;
            discarded.meta_len = 0;
            return Ok(Bytes::copy_from_slice(&discarded.encode()));
        }
        Ok(frame)
    }
}

/// The server end of in-memory connections made with a [`MemoryConnector`].
#[derive(Debug)]
pub struct MemoryListener {
    incoming: mpsc::Receiver<MemoryConnection>,
}

/// Makes in-memory connections to a [`MemoryListener`].
#[derive(Debug, Clone)]
pub struct MemoryConnector {
    outgoing: mpsc::Sender<MemoryConnection>,
    max_message_size: Arc<usize>,
}

/// A listener and a connector for it.
pub fn listener(max_message_size: usize) -> (MemoryListener, MemoryConnector) {
    let (outgoing, incoming) = mpsc::channel(16);
    (
        MemoryListener { incoming },
        MemoryConnector {
            outgoing,
            max_message_size: Arc::new(max_message_size),
        },
    )
}

impl MemoryConnector {
    /// A new connection to the listener.
    ///
    /// # Errors
    /// [`TransportError::Closed`] if the listener is gone.
    pub async fn connect(&self) -> Result<MemoryConnection, TransportError> {
        let (client, server) = pair(*self.max_message_size);
        self.outgoing
            .send(server)
            .await
            .map_err(|_| TransportError::Closed)?;
        Ok(client)
    }
}

impl Listener for MemoryListener {
    type Conn = MemoryConnection;

    async fn accept(&mut self) -> Result<MemoryConnection, TransportError> {
        self.incoming.recv().await.ok_or(TransportError::Closed)
    }

    fn local_addr(&self) -> String {
        "memory://listener".into()
    }

    fn stop_accepting(&mut self) -> bool {
        // Connectors fail from now on; the connections already queued are still yielded.
        self.incoming.close();
        true
    }
}
