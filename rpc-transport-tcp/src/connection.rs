//! [`TcpConnection`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rdmarpc_core::account::{Account, Charge, Resource};
use rdmarpc_core::wire::HEADER_LEN;
use rdmarpc_core::{Connection, MethodKinds, TransportError, MAX_METADATA_LEN};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::closing::Closing;
use crate::outgoing::{OutFrame, Queued, SendReservation};
use crate::reader::Reader;
use crate::socket::{ReadHalf, Socket};
use crate::writer::writer_task;
use crate::TcpConfig;

/// One TCP connection carrying frames.
///
/// `send` hands frames to the connection's writer task through a queue bounded in frames
/// and in bytes ([`TcpConfig::send_queue_bytes`]): back-pressure. `recv` reads from the
/// socket under an async mutex (one receiver at a time, cancel-safe because partial reads
/// stay in the connection's buffer); it grows its buffer with the bytes that arrive, not
/// with the lengths headers claim.
#[derive(Debug)]
pub struct TcpConnection {
    peer: String,
    peer_addr: Option<std::net::SocketAddr>,
    /// The peer's TLS certificate chain, if it presented one.
    peer_certificates: Option<Arc<[Bytes]>>,
    max_frame: usize,
    outbound: mpsc::Sender<Queued>,
    /// The server's account of this connection ([`Connection::serving`]): frames queued
    /// for the writer are charged to it until written. Unset on clients.
    account: OnceLock<Account>,
    /// Permits are bytes queued for the writer (at most `budget`).
    queued_bytes: Arc<Semaphore>,
    budget: usize,
    /// [`TcpConfig::write_buffer`].
    write_buffer: usize,
    reader: tokio::sync::Mutex<Reader>,
    closing: Arc<Closing>,
    /// The writer task, awaited by the lingering close.
    writer: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
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

    /// Connects to `address` (`host:port`) under TLS: the server's certificate must
    /// verify (see [`TlsConnector::connect`](crate::TlsConnector::connect)).
    ///
    /// # Errors
    /// The connect error, or the handshake's failure.
    pub async fn connect_tls(
        address: &str,
        tls: &crate::TlsConnector,
        config: &TcpConfig,
    ) -> Result<TcpConnection, TransportError> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let socket = tls.connect(address, stream).await?;
        TcpConnection::build(socket, config, &[], false)
    }

    /// Wraps an established stream (sets `TCP_NODELAY`).
    ///
    /// # Errors
    /// If the socket options cannot be set.
    pub fn from_stream(
        stream: impl Into<Socket>,
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
        stream: impl Into<Socket>,
        config: &TcpConfig,
        already_read: &[u8],
    ) -> Result<TcpConnection, TransportError> {
        TcpConnection::build(stream.into(), config, already_read, false)
    }

    /// Like [`TcpConnection::from_stream_with_prefix`], for a connection a server accepted:
    /// the first complete frame must arrive within [`TcpConfig::first_frame_timeout`].
    ///
    /// # Errors
    /// If the socket options cannot be set.
    pub fn accepted(
        stream: impl Into<Socket>,
        config: &TcpConfig,
        already_read: &[u8],
    ) -> Result<TcpConnection, TransportError> {
        TcpConnection::build(stream.into(), config, already_read, true)
    }

    fn build(
        stream: Socket,
        config: &TcpConfig,
        already_read: &[u8],
        accepted: bool,
    ) -> Result<TcpConnection, TransportError> {
        stream.tcp().set_nodelay(true)?;
        let peer_addr = stream.peer_addr().ok();
        let scheme = if stream.is_tls() { "tcp+tls" } else { "tcp" };
        let peer = match peer_addr {
            Some(addr) => format!("{scheme}://{addr}"),
            None => format!("{scheme}://?"),
        };
        let peer_certificates = stream.peer_certificates().map(Arc::from);
        let (read, write) = stream.into_split();
        let (outbound, queue) = mpsc::channel(config.send_queue_frames.max(1));
        // Semaphore permits are counted in u32 per acquire.
        let budget = config.send_queue_bytes.clamp(1, u32::MAX as usize);
        let queued_bytes = Arc::new(Semaphore::new(budget));
        let (closed, closed_rx) = watch::channel(false);
        let closing = Arc::new(Closing::new(closed, queued_bytes.clone()));
        let writer = tokio::spawn(writer_task(
            write,
            queue,
            closing.clone(),
            config.clone(),
            peer.clone(),
        ));
        let first_frame = accepted.then_some(config.first_frame_timeout);
        Ok(TcpConnection {
            peer,
            peer_addr,
            peer_certificates,
            max_frame: HEADER_LEN + MAX_METADATA_LEN + config.max_message_size,
            outbound,
            account: OnceLock::new(),
            queued_bytes,
            budget,
            write_buffer: config.write_buffer.max(1),
            reader: tokio::sync::Mutex::new(Reader::new(
                read,
                config,
                first_frame,
                closed_rx,
                closing.clone(),
                already_read,
            )),
            closing,
            writer: parking_lot::Mutex::new(Some(writer)),
        })
    }
}

impl TcpConnection {
    /// Waits for room for a frame of `len` bytes in the send queue and reserves it, so
    /// that the frame is only built once it can be queued: senders that wait hold no
    /// frame memory. ([`Connection::send`] reserves when it is called, after the caller
    /// built the frame.) On a server, the frame's bytes are charged to the connection's
    /// account first (a wait when it, the peer's or the server's has no room), but for a
    /// frame of a header alone (PING, PONG, GOAWAY, CANCEL, a window update).
    ///
    /// # Errors
    /// [`TransportError::TooLarge`] above the maximum frame; the connection's failure, or
    /// [`TransportError::Closed`], once it is closed.
    pub async fn reserve(&self, len: usize) -> Result<SendReservation, TransportError> {
        self.check(len)?;
        let charge = match self.account.get() {
            Some(account) if len > HEADER_LEN => match account.try_charge(Resource::Sending, len) {
                Ok(charge) => charge,
                Err(_) => {
                    let mut closed = self.closing.closed.subscribe();
                    tokio::select! {
                        charge = account.charge(Resource::Sending, len) => charge,
                        _ = closed.wait_for(|closed| *closed) => return Err(self.closed_error()),
                    }
                }
            },
            _ => Charge::none(),
        };
        let share = len.clamp(1, self.budget) as u32;
        match self.queued_bytes.clone().acquire_many_owned(share).await {
            Ok(permit) => Ok(SendReservation {
                _queue: permit,
                _account: charge,
            }),
            Err(_) => Err(self.closed_error()),
        }
    }

    /// Queues `frame` into room reserved by [`TcpConnection::reserve`].
    ///
    /// # Errors
    /// The connection's failure, or [`TransportError::Closed`].
    pub async fn send_reserved(
        &self,
        frame: BytesMut,
        reservation: SendReservation,
    ) -> Result<(), TransportError> {
        self.queue(frame, Vec::new(), reservation).await
    }

    /// Queues the frame `head` followed by `tail` (a gathered write: `tail` is written
    /// from where it lies) into room reserved by [`TcpConnection::reserve`] for the
    /// whole frame.
    ///
    /// # Errors
    /// The connection's failure, or [`TransportError::Closed`].
    pub async fn send_reserved_gathered(
        &self,
        head: BytesMut,
        tail: Vec<Bytes>,
        reservation: SendReservation,
    ) -> Result<(), TransportError> {
        self.queue(head, tail, reservation).await
    }

    async fn queue(
        &self,
        head: BytesMut,
        tail: Vec<Bytes>,
        reservation: SendReservation,
    ) -> Result<(), TransportError> {
        self.outbound
            .send((OutFrame { head, tail }, reservation))
            .await
            .map_err(|_| self.closed_error())
    }

    fn check(&self, len: usize) -> Result<(), TransportError> {
        if len > self.max_frame {
            return Err(TransportError::TooLarge {
                len,
                max: self.max_frame,
            });
        }
        if *self.closing.closed.borrow() {
            return Err(self.closed_error());
        }
        Ok(())
    }

    fn closed_error(&self) -> TransportError {
        self.closing.failure().unwrap_or(TransportError::Closed)
    }
}

impl Connection for TcpConnection {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        self.check(len)?;
        Ok(BytesMut::with_capacity(len))
    }

    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        let reservation = self.reserve(frame.len()).await?;
        self.send_reserved(frame, reservation).await
    }

    /// Frames of at least 32 KiB: each is in a buffer of its own (read into it, or moved
    /// there once complete), so keeping one pins only itself.
    fn keep(&self, frame: Bytes) -> Result<Bytes, Bytes> {
        if frame.len() >= crate::decoder::KEEP_MIN {
            Ok(frame)
        } else {
            Err(frame)
        }
    }

    /// A byte stream: frames in one buffer are written back to back, any number.
    fn max_frames_per_buffer(&self) -> usize {
        usize::MAX
    }

    /// The writer's coalescing size ([`TcpConfig::write_buffer`]): smaller fields would
    /// be copied into its buffer anyway.
    fn gather_min(&self) -> Option<usize> {
        Some(self.write_buffer)
    }

    async fn send_gathered(&self, head: BytesMut, tail: Vec<Bytes>) -> Result<(), TransportError> {
        let len = head.len() + tail.iter().map(Bytes::len).sum::<usize>();
        let reservation = self.reserve(len).await?;
        self.queue(head, tail, reservation).await
    }

    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        // One task receives at a time, so the lock is free but for a racing `shutdown`:
        // taken without the semaphore's acquire future (a frame costs a lock round).
        let mut reader = match self.reader.try_lock() {
            Ok(reader) => reader,
            Err(_) => self.reader.lock().await,
        };
        reader.next_frame().await
    }

    fn recv_ready(&self, out: &mut Vec<Bytes>, max: usize) {
        self.recv_ready_each(max.saturating_sub(out.len()), |frame| out.push(frame));
    }

    fn recv_ready_run(&self, out: &mut Vec<Bytes>, max: usize) -> Option<Bytes> {
        self.recv_ready_run_each(max.saturating_sub(out.len()), |frame| out.push(frame))
    }

    fn close(&self) {
        self.closing.close();
    }

    /// The lingering close of `Drop` (everything queued written, then the peer's input
    /// drained until its end of stream or 2 s), awaited.
    async fn shutdown(&self) {
        self.closing.close();
        let writer = self.writer.lock().take();
        let socket = self.reader.lock().await.take_socket();
        match (socket, writer) {
            (Some(socket), Some(writer)) => linger(socket, writer).await,
            (None, Some(writer)) => {
                let _ = writer.await;
            }
            _ => {}
        }
    }

    /// Keeps the account: frames queued from now on are charged to it until written.
    fn serving(&self, methods: Arc<dyn MethodKinds>, account: &Account) {
        let _ = methods;
        let _ = self.account.set(account.clone());
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.peer_addr
    }

    fn peer_certificates(&self) -> Option<Arc<[Bytes]>> {
        self.peer_certificates.clone()
    }
}

impl TcpConnection {
    /// [`Connection::recv_ready`] handing each frame to `each` (up to `max` of them), for
    /// wrappers with a receive buffer type of their own.
    pub fn recv_ready_each(&self, max: usize, each: impl FnMut(Bytes)) {
        if let Ok(mut reader) = self.reader.try_lock() {
            reader.ready(max, each);
        }
    }

    /// As [`TcpConnection::recv_ready_each`], but a run of stream messages that comes
    /// next is returned as one buffer ([`Connection::recv_ready_run`]).
    pub fn recv_ready_run_each(&self, max: usize, each: impl FnMut(Bytes)) -> Option<Bytes> {
        let mut reader = self.reader.try_lock().ok()?;
        reader.ready_run(max, each)
    }
}

impl Drop for TcpConnection {
    fn drop(&mut self) {
        self.closing.close();
        // Lingering close: the socket closes once the writer has sent everything (then
        // FIN) *and* the peer's input is drained. Closing a socket with unread input makes
        // the kernel reset the connection, which discards what is still unsent or unread,
        // e.g. the last responses and refusals of a server that drains for a restart.
        if let (Some(socket), Some(writer), Ok(runtime)) = (
            self.reader.get_mut().take_socket(),
            self.writer.get_mut().take(),
            tokio::runtime::Handle::try_current(),
        ) {
            runtime.spawn(linger(socket, writer));
        }
    }
}

/// How long a dropped connection keeps reading (and discarding) the peer's input while
/// waiting for its end of stream, at most, once everything was written.
const LINGER: Duration = Duration::from_secs(2);

/// Reads and discards the peer's input while the writer finishes (it ends within its
/// write timeout: every write makes progress or fails), then until the peer's end of
/// stream, an error, or [`LINGER`] more.
async fn linger(mut socket: ReadHalf, writer: tokio::task::JoinHandle<()>) {
    let mut sink = [0u8; 4096];
    let mut writer = std::pin::pin!(writer);
    let mut eof = false;
    loop {
        tokio::select! {
            _ = &mut writer => break,
            read = socket.read(&mut sink), if !eof => {
                if !matches!(read, Ok(n) if n > 0) {
                    eof = true;
                }
            }
        }
    }
    if eof {
        return;
    }
    let drain = async {
        while let Ok(n) = socket.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmarpc_core::wire::{FrameKind, Header};
    use tokio::io::AsyncWriteExt;

    fn frame(call_id: u64, payload: &[u8]) -> Vec<u8> {
        let mut header = Header::new(FrameKind::Message, call_id);
        header.payload_len = payload.len() as u32;
        let mut f = header.encode().to_vec();
        f.extend_from_slice(payload);
        f
    }

    /// Frames that arrived together are handed out by `recv_ready` after one `recv`, in
    /// order, up to `max`; a frame still arriving is not, and `recv` completes it.
    #[tokio::test]
    async fn recv_ready_drains_the_complete_frames_already_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peer = tokio::spawn(async move { listener.accept().await.unwrap().0 });
        let conn = TcpConnection::connect(addr, &TcpConfig::default())
            .await
            .unwrap();
        let mut socket = (&mut peer).await.unwrap();
        let mut bytes = Vec::new();
        for id in 1..=5u64 {
            bytes.extend_from_slice(&frame(id, &[id as u8; 10]));
        }
        let sixth = frame(6, &[6; 10]);
        bytes.extend_from_slice(&sixth[..20]);
        socket.write_all(&bytes).await.unwrap();

        let first = conn.recv().await.unwrap().unwrap();
        assert_eq!(Header::decode(&first).unwrap().unwrap().call_id, 1);
        // `recv` read everything that was there (one read of up to 64 KiB).
        let mut ready = Vec::new();
        conn.recv_ready(&mut ready, 3);
        let ids = |frames: &[Bytes]| -> Vec<u64> {
            frames
                .iter()
                .map(|f| Header::decode(f).unwrap().unwrap().call_id)
                .collect()
        };
        assert_eq!(ids(&ready), [2, 3, 4], "up to max");
        conn.recv_ready(&mut ready, 10);
        assert_eq!(ids(&ready), [2, 3, 4, 5], "not the partial sixth");
        assert_eq!(&ready[3][HEADER_LEN..], &[5; 10]);
        socket.write_all(&sixth[20..]).await.unwrap();
        let last = conn.recv().await.unwrap().unwrap();
        assert_eq!(&last[..], &sixth[..]);
        let mut none = Vec::new();
        conn.recv_ready(&mut none, 10);
        assert!(none.is_empty());
        drop(socket);
        assert!(
            conn.recv().await.unwrap().is_none(),
            "end of stream via recv"
        );
    }
}
