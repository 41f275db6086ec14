//! The server side: an HTTP/2 connection from a gRPC client, as a [`Connection`] whose
//! frames are its calls.
//!
//! A driver task runs the HTTP/2 connection and starts a task per gRPC call. The call's
//! task turns the request into the framework's frames for the server (`recv`), and the
//! server's frames for the call (`send`, routed to it by call id) into the HTTP/2
//! response: headers, length-prefixed messages, trailers with `grpc-status`. Bounds:
//! the HTTP/2 windows (stream and connection) bound what a client may send before the
//! server reads it; a call's task holds at most one window's worth of request messages
//! the server has not been granted yet, and sends response messages only as HTTP/2 flow
//! control lets it, granting the server a message's window back once it went out, so a
//! client that does not read holds at most the server's stream window per call.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use parking_lot::Mutex;
use rpc_core::account::{Account, Charge, Resource};
use rpc_core::codegen::MethodKind;
use rpc_core::wire::{encode_head, Flags, Frame, FrameKind, Header, HEADER_LEN};
use rpc_core::{Code, Connection, Metadata, MethodKinds, Status, TransportError, MAX_METADATA_LEN};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::calm::ResetBudget;
use crate::compress::{Encoding, ACCEPT};
use crate::deframe::{self, Deframer};
use crate::linger::{self, Returned};
use crate::progress::{Activity, Timers, Watched};
use crate::text;

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
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            max_message_size: rpc_core::DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrent_streams: 256,
            stream_window: rpc_core::DEFAULT_STREAM_WINDOW,
            connection_window: 16 << 20,
            max_buffered_response_bytes: 16 << 20,
            body_timeout: Duration::from_secs(30),
            send_compression: None,
            stream_idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            keepalive_interval: Some(Duration::from_secs(60)),
            keepalive_timeout: Duration::from_secs(20),
        }
    }
}

impl GrpcConfig {
    /// Sets [`GrpcConfig::max_message_size`].
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }
}

/// One HTTP/2 connection of a gRPC client, as the server sees it: see the module docs.
#[derive(Debug)]
pub(crate) struct ServerConnection {
    shared: Arc<Shared>,
    incoming: tokio::sync::Mutex<mpsc::Receiver<ToServer>>,
    pub(crate) peer: String,
    pub(crate) peer_addr: Option<SocketAddr>,
}

struct Shared {
    config: GrpcConfig,
    /// The server's frames for each open call, by call id.
    calls: Mutex<HashMap<u64, mpsc::UnboundedSender<ToCall>>>,
    methods: OnceLock<Arc<dyn MethodKinds>>,
    /// The connection's account on the server: what the calls hold of requests not yet
    /// taken by the server (bodies in progress, decompressed messages, stream messages
    /// waiting for the server's window) is charged to it before it is read or inflated.
    account: OnceLock<Account>,
    /// Set once the server told its methods (the driver waits for it).
    ready: watch::Sender<bool>,
    /// Set when the server sent GOAWAY: HTTP/2's graceful shutdown.
    goaway: watch::Sender<bool>,
    /// Set by `close`: the connection is dropped at once.
    closed: watch::Sender<bool>,
    /// Set by the driver when the HTTP/2 connection is done.
    ended: watch::Sender<bool>,
    next_call: AtomicU64,
    /// [`GrpcConfig::max_buffered_response_bytes`], as permits.
    response_bytes: Arc<Semaphore>,
    /// The client's resets of accepted streams (rapid reset).
    resets: Mutex<ResetBudget>,
    /// Set once those are over the budget: the driver sends GOAWAY `ENHANCE_YOUR_CALM`.
    calm: watch::Sender<bool>,
}

impl Shared {
    /// The client reset an accepted stream before its call finished: past the budget,
    /// the driver is told to send GOAWAY `ENHANCE_YOUR_CALM`.
    fn reset_by_client(&self) {
        if self.resets.lock().reset() {
            self.calm.send_replace(true);
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("calls", &self.calls.lock().len())
            .finish_non_exhaustive()
    }
}

/// A frame from the server for one call, with the connection's response buffer permits
/// its payload holds until HTTP/2 takes it.
type ToCall = (Bytes, Held);

/// What a frame for the client holds until HTTP/2 takes it: its share of the
/// connection's response buffer, and its bytes on the server's account
/// ([`Resource::Sending`]).
#[derive(Debug, Default)]
struct Held {
    _buffer: Option<OwnedSemaphorePermit>,
    _account: Charge,
}

/// A frame for the server, with the bytes it holds on the connection's account, given
/// back when the server takes it (the server charges the request from there on).
type ToServer = (Bytes, Charge);

/// Frames queued for the server (`recv`) across all calls: a server that stops reading
/// stops the calls' tasks, which stop reading their bodies (HTTP/2 flow control).
const INCOMING_FRAMES: usize = 256;

impl ServerConnection {
    /// Runs the server side of HTTP/2 on `io`, whose first bytes (the connection
    /// preface) are still to be read from it or were read into `already_read`.
    ///
    /// # Errors
    /// The HTTP/2 handshake failed.
    pub(crate) async fn accept<T>(
        io: T,
        already_read: &[u8],
        config: &GrpcConfig,
        peer_addr: Option<SocketAddr>,
    ) -> Result<ServerConnection, TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::default());
        let (io, returned) = Returned::new(Rewind::new(io, Bytes::copy_from_slice(already_read)));
        let io = Watched::new(io, activity.clone());
        let mut builder = h2::server::Builder::new();
        builder
            .max_concurrent_streams(config.max_concurrent_streams)
            .initial_window_size(config.stream_window)
            .initial_connection_window_size(config.connection_window)
            .max_header_list_size((MAX_METADATA_LEN + 16 * 1024) as u32)
            .max_send_buffer_size(64 * 1024)
            // Resets of streams not yet accepted (h2 counts them) and streams h2 itself
            // reset for the client's errors: past these, GOAWAY.
            .max_pending_accept_reset_streams(20)
            .max_local_error_reset_streams(Some(config.max_concurrent_streams.max(1) as usize));
        let connection = builder
            .handshake(io)
            .await
            .map_err(|e| TransportError::Other(format!("HTTP/2 handshake: {e}")))?;
        let (tx, rx) = mpsc::channel(INCOMING_FRAMES);
        let shared = Arc::new(Shared {
            config: config.clone(),
            calls: Mutex::default(),
            methods: OnceLock::new(),
            account: OnceLock::new(),
            ready: watch::channel(false).0,
            goaway: watch::channel(false).0,
            closed: watch::channel(false).0,
            ended: watch::channel(false).0,
            next_call: AtomicU64::new(1),
            response_bytes: Arc::new(Semaphore::new(config.max_buffered_response_bytes.max(1))),
            resets: Mutex::new(ResetBudget::new(config.max_concurrent_streams)),
            calm: watch::channel(false).0,
        });
        tokio::spawn(drive(connection, returned, shared.clone(), tx, activity));
        let peer = match peer_addr {
            Some(addr) => format!("grpc://{addr}"),
            None => "grpc://?".into(),
        };
        Ok(ServerConnection {
            shared,
            incoming: tokio::sync::Mutex::new(rx),
            peer,
            peer_addr,
        })
    }
}

impl ServerConnection {
    /// Waits for `len` bytes of room on the server's account (what it has queued for
    /// its peers) and in the connection's response buffer.
    async fn hold(&self, len: usize) -> Result<Held, TransportError> {
        let charge = match self.shared.account.get() {
            Some(account) => match account.try_charge(Resource::Sending, len) {
                Ok(charge) => charge,
                Err(_) => {
                    let mut closed = self.shared.closed.subscribe();
                    tokio::select! {
                        charge = account.charge(Resource::Sending, len) => charge,
                        _ = set(&mut closed) => return Err(TransportError::Closed),
                    }
                }
            },
            None => Charge::none(),
        };
        let max = self.shared.config.max_buffered_response_bytes.max(1);
        let n = len.min(max) as u32;
        let acquire = self.shared.response_bytes.clone().acquire_many_owned(n);
        Ok(Held {
            _buffer: Some(acquire.await.map_err(|_| TransportError::Closed)?),
            _account: charge,
        })
    }
}

impl Connection for ServerConnection {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        let max = HEADER_LEN + MAX_METADATA_LEN + self.shared.config.max_message_size;
        if len > max {
            return Err(TransportError::TooLarge { len, max });
        }
        Ok(BytesMut::with_capacity(len))
    }

    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        if *self.shared.closed.borrow() {
            return Err(TransportError::Closed);
        }
        let frame = frame.freeze();
        // A buffer may hold several frames back to back (runs of stream messages).
        let mut at = 0;
        while at < frame.len() {
            let header = match Header::decode(&frame[at..]) {
                Ok(Some(header)) if at + header.frame_len() <= frame.len() => header,
                _ => return Err(TransportError::Other("a malformed frame to send".into())),
            };
            let one = frame.slice(at..at + header.frame_len());
            at += header.frame_len();
            match header.kind {
                FrameKind::GoAway => {
                    self.shared.goaway.send_replace(true);
                }
                FrameKind::Pong | FrameKind::Ping => {}
                _ => {
                    let call = self.shared.calls.lock().get(&header.call_id).cloned();
                    // A call that ended (its client reset it) takes nothing more.
                    let Some(call) = call else { continue };
                    // Messages wait here (the server's send waits) while the connection's
                    // response buffer is spent: backpressure on this client.
                    let held = match header.payload_len {
                        0 => Held::default(),
                        len => self.hold(len as usize).await?,
                    };
                    let _ = call.send((one, held));
                }
            }
        }
        Ok(())
    }

    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        Ok(self
            .incoming
            .lock()
            .await
            .recv()
            .await
            .map(|(frame, _)| frame))
    }

    fn recv_ready(&self, out: &mut Vec<Bytes>, max: usize) {
        if let Ok(mut incoming) = self.incoming.try_lock() {
            while out.len() < max {
                match incoming.try_recv() {
                    Ok((frame, _)) => out.push(frame),
                    Err(_) => return,
                }
            }
        }
    }

    /// Runs of stream messages may come in one buffer: each goes out as its own gRPC
    /// message.
    fn max_frames_per_buffer(&self) -> usize {
        usize::MAX
    }

    fn close(&self) {
        self.shared.closed.send_replace(true);
    }

    /// A graceful close: HTTP/2's GOAWAY, then the calls' last frames (their trailers)
    /// are flushed as the calls finish, and the connection closes (the server bounds
    /// how long it waits).
    async fn shutdown(&self) {
        self.shared.goaway.send_replace(true);
        let mut ended = self.shared.ended.subscribe();
        set(&mut ended).await;
    }

    /// Each unary request's bytes are charged by its call, from the first byte read
    /// until its final response goes out.
    fn charges_requests(&self) -> bool {
        true
    }

    fn serving(&self, methods: Arc<dyn MethodKinds>, account: &Account) {
        let _ = self.shared.methods.set(methods);
        let _ = self.shared.account.set(account.clone());
        self.shared.ready.send_replace(true);
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }
}

impl Drop for ServerConnection {
    fn drop(&mut self) {
        self.shared.closed.send_replace(true);
    }
}

/// Runs the HTTP/2 connection: accepts calls (once the server told its methods) until
/// the client goes, the server closes, a graceful shutdown completes, or the connection
/// misbehaves (writes make no progress, a keepalive PING goes unanswered, rapid reset).
///
/// A stream is accepted only while fewer than `max_concurrent_streams` of this
/// connection's calls' tasks are alive: a client that resets streams frees HTTP/2's
/// count at once, not the handlers it started.
async fn drive<T>(
    mut connection: h2::server::Connection<Watched<Returned<Rewind<T>>>, Bytes>,
    returned: oneshot::Receiver<Rewind<T>>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<ToServer>,
    activity: Arc<Activity>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut ready = shared.ready.subscribe();
    let mut goaway = shared.goaway.subscribe();
    let mut closed = shared.closed.subscribe();
    let mut calm = shared.calm.subscribe();
    tokio::select! {
        () = set(&mut ready) => {}
        () = set(&mut closed) => {
            shared.ended.send_replace(true);
            return;
        }
    }
    let config = &shared.config;
    let keepalive = config
        .keepalive_interval
        .map(|i| (i, config.keepalive_timeout));
    let mut timers = Timers::new(
        config.write_timeout,
        keepalive,
        activity,
        connection.ping_pong(),
    );
    let slots = Arc::new(Semaphore::new(config.max_concurrent_streams.max(1) as usize));
    let mut slot = None;
    let mut going_away = false;
    // Whether the server's last frames are for the client to read (a GOAWAY with a
    // reason, the end of a graceful shutdown): then the socket is closed lingering.
    let mut linger = false;
    loop {
        if slot.is_none() {
            slot = slots.clone().try_acquire_owned().ok();
        }
        tokio::select! {
            accepted = next_stream(&mut connection, slot.is_some()) => match accepted {
                // A stream that crossed the GOAWAY (opened during HTTP/2's graceful
                // shutdown, before the client knew): refused, so that the client sends
                // it again elsewhere. The server is no longer reading new calls.
                Some(Ok((_, mut respond))) if going_away => {
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                }
                Some(Ok((request, respond))) => {
                    let slot = slot.take();
                    shared.resets.lock().accepted();
                    let call_id = shared.next_call.fetch_add(1, Ordering::Relaxed);
                    let (shared, tx) = (shared.clone(), tx.clone());
                    // The call's future (about 2 KiB) is built on the heap once, in its
                    // task: the spawned future holds only the arguments and a pointer,
                    // so spawning copies those, not the whole state (perf: the copies
                    // of the call's future were 2-3 % of a small call's server CPU).
                    tokio::spawn(async move {
                        Box::pin(call(shared, tx, call_id, request, respond)).await;
                        drop(slot);
                    });
                }
                Some(Err(e)) => {
                    tracing::debug!("HTTP/2 connection ended: {e}");
                    break;
                }
                None => {
                    linger = going_away;
                    break;
                }
            },
            permit = slots.clone().acquire_owned(), if slot.is_none() => slot = permit.ok(),
            why = timers.closing() => {
                tracing::debug!("HTTP/2 connection closed: {why}");
                break;
            }
            () = set(&mut calm) => {
                tracing::debug!("HTTP/2 connection closed: the client resets the streams it opens");
                connection.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                // The GOAWAY goes out (within a bound), then the connection closes.
                let flush = std::future::poll_fn(|cx| connection.poll_closed(cx));
                let _ = tokio::time::timeout(Duration::from_secs(1), flush).await;
                linger = true;
                break;
            }
            () = set(&mut goaway), if !going_away => {
                going_away = true;
                // HTTP/2 refuses new streams from here on and closes once the open ones are
                // done (this loop goes on polling it, which flushes their last frames).
                connection.graceful_shutdown();
                // The server waits for the client's acknowledgement of its GOAWAY: the
                // refusal of new streams is what it would acknowledge. Never waits here.
                let _ = tx.try_send((control(FrameKind::GoAway, 0), Charge::none()));
            }
            () = set(&mut closed) => {
                connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                break;
            }
        }
    }
    drop(connection);
    if let (true, Ok(io)) = (linger, returned.await) {
        linger::close(io, linger::LINGER).await;
    }
    shared.ended.send_replace(true);
    // The calls' tasks end with their streams; the server sees the end once they and this
    // sender are gone.
}

/// A stream the client opened: its request and the handle of its response.
type Accepted = (Request<RecvStream>, SendResponse<Bytes>);

/// The connection's next stream when `accept`; else drives the connection (its reads,
/// writes and PINGs) without taking one, resolving only when it ends.
fn next_stream<T>(
    connection: &mut h2::server::Connection<T, Bytes>,
    accept: bool,
) -> impl std::future::Future<Output = Option<Result<Accepted, h2::Error>>> + '_
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    std::future::poll_fn(move |cx| {
        if accept {
            return connection.poll_accept(cx);
        }
        match connection.poll_closed(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    })
}

/// The largest DATA frame a client may send (HTTP/2's default `SETTINGS_MAX_FRAME_SIZE`,
/// which this server keeps): the most one chunk of a body can be.
const CHUNK: usize = 16 * 1024;

/// Room on the connection's account for a request stream's next body chunk, taken
/// before the chunk is read; when there is none, waited for without holding up the rest
/// of the call (the server's frames, its responses), so that a call never waits for room
/// that only its own queued messages could free.
struct Room {
    account: Account,
    reserved: Charge,
    waiting: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Charge> + Send>>>,
}

impl Room {
    fn new(account: Account) -> Room {
        Room {
            account,
            reserved: Charge::none(),
            waiting: None,
        }
    }

    /// Whether a chunk may be read now, `held` being what the call's message in
    /// progress holds; if not, a wait for room has started ([`Room::granted`]).
    fn ready(&mut self, held: &Charge) -> bool {
        if self.waiting.is_some() {
            return false;
        }
        let limit = self.account.limit(Resource::Bytes);
        let room = limit.saturating_sub(held.amount() + self.reserved.amount());
        if self.reserved.amount() >= CHUNK || room == 0 {
            // Room for a chunk, or a message charged as the whole of the limit already.
            return true;
        }
        let want = (CHUNK - self.reserved.amount()).min(room);
        match self.account.try_charge(Resource::Bytes, want) {
            Ok(more) => {
                self.reserved.merge(more);
                true
            }
            Err(_) => {
                let account = self.account.clone();
                self.waiting = Some(Box::pin(async move {
                    account.charge(Resource::Bytes, want).await
                }));
                false
            }
        }
    }

    fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// Resolves once the room waited for is granted.
    async fn granted(&mut self) {
        if let Some(waiting) = self.waiting.as_mut() {
            let more = waiting.await;
            self.reserved.merge(more);
            self.waiting = None;
        }
    }

    /// A chunk of `n` bytes arrived: its room moves to `held`.
    fn take(&mut self, held: &mut Charge, n: usize) {
        held.merge(self.reserved.split(n));
    }
}

/// Charges `n` more bytes of a message's inflated output into `inflated`, refusing when
/// the account has no room; what the call holds (`held`, what is still compressed, and
/// `inflated`) is charged up to the smallest limit at most, as `Call::hold` does.
fn inflate(
    account: &Account,
    held: &Charge,
    inflated: &mut Charge,
    n: usize,
) -> Result<(), Status> {
    let room = account
        .limit(Resource::Bytes)
        .saturating_sub(held.amount() + inflated.amount());
    if room > 0 {
        inflated.merge(account.try_charge(Resource::Bytes, n.min(room))?);
    }
    Ok(())
}

/// Resolves once the flag is set (or its sender is gone).
pub(crate) async fn set(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await.map(|_| ());
}

fn stalled() -> Status {
    Status::cancelled("the request body stalled")
}

/// A frame with no body.
pub(crate) fn control(kind: FrameKind, call_id: u64) -> Bytes {
    Bytes::copy_from_slice(&Header::new(kind, call_id).encode())
}

/// A frame with `metadata` and `payload`.
pub(crate) fn frame(mut header: Header, metadata: &Metadata, payload: &[u8]) -> Bytes {
    header.payload_len = payload.len() as u32;
    let mut buf = BytesMut::with_capacity(HEADER_LEN + metadata.encoded_len() + payload.len());
    encode_head(&mut header, metadata, &mut buf);
    buf.put_slice(payload);
    buf.freeze()
}

/// Answers a call the server never saw, with only trailers.
fn refuse(respond: &mut SendResponse<Bytes>, status: &Status) {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    status_headers(headers, status.code(), status.message());
    text::append_metadata(headers, &status.to_metadata());
    let _ = respond.send_response(response, true);
}

fn status_headers(headers: &mut HeaderMap, code: Code, message: &str) {
    headers.insert("grpc-status", HeaderValue::from(code as u8 as u32));
    if !message.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&text::percent_encode(message)) {
            headers.insert("grpc-message", value);
        }
    }
}

/// One gRPC call: see the module docs.
async fn call(
    shared: Arc<Shared>,
    tx: mpsc::Sender<ToServer>,
    call_id: u64,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let (parts, body) = request.into_parts();
    let grpc = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v == "application/grpc"
                || v.starts_with("application/grpc+")
                || v.starts_with("application/grpc;")
        });
    if !grpc || parts.method != http::Method::POST {
        // Not gRPC: HTTP's answer (gRPC's spec: 415 for a wrong content type).
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        let _ = respond.send_response(response, true);
        return;
    }
    let request_encoding = match Encoding::of_headers(&parts.headers) {
        Ok(encoding) => encoding,
        Err(why) => {
            let status = Status::unimplemented(why);
            let mut response = Response::new(());
            let headers = response.headers_mut();
            headers.insert("content-type", HeaderValue::from_static("application/grpc"));
            headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
            status_headers(headers, status.code(), status.message());
            let _ = respond.send_response(response, true);
            return;
        }
    };
    // Responses compressed as configured, if the client reads that.
    let response_encoding = shared
        .config
        .send_compression
        .filter(|e| e.accepted_by(&parts.headers));
    let timeout = match parts.headers.get("grpc-timeout") {
        None => None,
        Some(value) => match text::parse_timeout(value.as_bytes()) {
            Some(timeout) => Some(timeout),
            None => return refuse(&mut respond, &Status::internal("malformed grpc-timeout")),
        },
    };
    let metadata = text::metadata_from(&parts.headers);
    if metadata.check().is_err() || metadata.encoded_len() > MAX_METADATA_LEN {
        return refuse(
            &mut respond,
            &Status::resource_exhausted("request metadata over the limit"),
        );
    }
    let path = parts.uri.path();
    // By the full path: a path whose hash collides with a method's id is not that method.
    let Some((id, kind)) = shared.methods.get().and_then(|m| m.method(path)) else {
        let status = Status::unimplemented(format!("unknown method {path}"));
        return refuse(&mut respond, &status);
    };
    let (frames_tx, frames) = mpsc::unbounded_channel();
    shared.calls.lock().insert(call_id, frames_tx);
    let mut call = Call {
        shared: shared.clone(),
        tx,
        call_id,
        kind,
        body,
        respond,
        sending: None,
        out: VecDeque::new(),
        finished: None,
        trailers: None,
        headers_sent: false,
        done: false,
        request_encoding,
        response_encoding,
        deadline: timeout.and_then(|t| tokio::time::Instant::now().checked_add(t)),
        request_bytes: Charge::none(),
        waiting: None,
    };
    let mut header = Header::new(FrameKind::Request, call_id);
    header.method_id = id;
    header.timeout_us = timeout.map_or(0, |t| t.as_micros().clamp(1, u64::MAX.into()) as u64);
    call.run(header, &metadata, frames).await;
    shared.calls.lock().remove(&call_id);
}

/// A response message waiting for HTTP/2 flow control: its bytes (prefixed), the
/// window it took from the server, the response buffer it holds.
type Outgoing = (Bytes, usize, Held);

struct Call {
    shared: Arc<Shared>,
    tx: mpsc::Sender<ToServer>,
    call_id: u64,
    kind: MethodKind,
    body: RecvStream,
    respond: SendResponse<Bytes>,
    /// The response body, once the headers went out.
    sending: Option<SendStream<Bytes>>,
    /// Response messages (prefixed) waiting for HTTP/2 flow control, with the window
    /// each took from the server and the response buffer it holds.
    out: VecDeque<Outgoing>,
    /// The server's final frame, handled once `out` is empty.
    finished: Option<ToCall>,
    /// The trailers of a unary or client-streaming call, sent once its response message
    /// went out.
    trailers: Option<HeaderMap>,
    headers_sent: bool,
    /// The final status went out.
    done: bool,
    /// How the client compresses its messages (`grpc-encoding`).
    request_encoding: Option<Encoding>,
    /// How the responses' messages are compressed, if they are.
    response_encoding: Option<Encoding>,
    /// The call's deadline (`grpc-timeout`), from the arrival of its headers.
    deadline: Option<tokio::time::Instant>,
    /// What the request message holds on the connection's account, given back when the
    /// call ends (its final response went out, or it was reset).
    request_bytes: Charge,
    /// Since when response data waits for the client's window with none granted.
    waiting: Option<tokio::time::Instant>,
}

/// What a call's HTTP/2 stream did.
enum Wait {
    /// This many bytes may be sent.
    Capacity(usize),
    /// The client reset the call (or the connection went).
    Reset,
    /// The response waited for the client's window past the stream idle timeout.
    Idle,
}

/// Why a call's task stops early.
enum Stop {
    /// The client reset the call or the connection went: the server is told (CANCEL).
    Cancelled,
    /// The server stopped reading this connection for good.
    ServerGone,
    /// The response waited for the client's window past the stream idle timeout: the
    /// call was reset, the server is told (CANCEL).
    Idle,
}

impl Call {
    async fn run(
        &mut self,
        mut header: Header,
        metadata: &Metadata,
        mut frames: mpsc::UnboundedReceiver<ToCall>,
    ) {
        let max = self.shared.config.max_message_size;
        let window = self.shared.config.stream_window;
        if self.kind.server_streams() {
            header.credits = window;
        }
        let result = if self.kind.client_streams() {
            self.stream_requests(header, metadata, &mut frames, max)
                .await
        } else {
            match self.one_request(max).await {
                Ok((message, held)) => {
                    header.flags = Flags::END_STREAM;
                    // The deadline ran from the request's headers: the server gets what
                    // is left of it.
                    if let Some(deadline) = self.deadline {
                        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                        header.timeout_us = left.as_micros().clamp(1, u64::MAX.into()) as u64;
                    }
                    // Held by this call until it ends (the transport charges requests
                    // for the server: `Connection::charges_requests`).
                    self.request_bytes = held;
                    self.to_server(frame(header, metadata, &message), Charge::none())
                        .await
                }
                Err(Some(status)) => {
                    refuse(&mut self.respond, &status);
                    return;
                }
                Err(None) => {
                    // Reset before the request was complete.
                    self.client_reset();
                    return;
                }
            }
        };
        let result = match result {
            Ok(()) => self.respond_until_done(&mut frames).await,
            Err(stop) => Err(stop),
        };
        match result {
            Err(Stop::Cancelled) => {
                self.client_reset();
                self.cancel_server().await;
            }
            Err(Stop::Idle) => self.cancel_server().await,
            _ => {}
        }
    }

    /// The client reset the call: counted toward the rapid-reset budget unless its
    /// deadline (`grpc-timeout`) had passed, which is a client giving up on a call, as
    /// gRPC clients do at their deadline, not an abuse.
    fn client_reset(&self) {
        let expired = self
            .deadline
            .is_some_and(|d| d <= tokio::time::Instant::now() + Duration::from_millis(20));
        if !expired {
            self.shared.reset_by_client();
        }
    }

    /// Tells the server the call is over (CANCEL).
    async fn cancel_server(&self) {
        let cancel = control(FrameKind::Cancel, self.call_id);
        let _ = self.tx.send((cancel, Charge::none())).await;
    }

    /// The connection's account (set before any call starts: the driver waits for it).
    fn account(&self) -> &Account {
        self.shared
            .account
            .get()
            .expect("set before calls are accepted")
    }

    /// The one message of a unary or server-streaming request, read to the end of the
    /// body, with what it holds on the connection's account (what arrived, and what a
    /// compressed message inflated to). `Err(None)`: the client went.
    ///
    /// The whole body must arrive within the body timeout and the call's deadline, both
    /// counted from the request's headers: a body trickled a byte at a time does not
    /// hold the call open past them.
    async fn one_request(&mut self, max: usize) -> Result<(Bytes, Charge), Option<Status>> {
        let mut deframer = Deframer::default();
        deframer.set_encoding(self.request_encoding);
        let mut message: Option<(Bytes, Charge)> = None;
        // What the deframer holds (the message in progress) on the account.
        let mut held = Charge::none();
        let body_deadline = tokio::time::Instant::now() + self.shared.config.body_timeout;
        let (until, why) = match self.deadline {
            Some(deadline) if deadline < body_deadline => (deadline, Code::DeadlineExceeded),
            _ => (body_deadline, Code::Cancelled),
        };
        let late = || match why {
            Code::DeadlineExceeded => {
                Status::deadline_exceeded("the deadline passed while the request body arrived")
            }
            _ => stalled(),
        };
        loop {
            let chunk = match tokio::time::timeout_at(until, self.body.data()).await {
                Err(_) => return Err(Some(late())),
                Ok(None) => break,
                Ok(Some(chunk)) => chunk.map_err(|_| None)?,
            };
            if tokio::time::timeout_at(until, self.hold(&mut held, chunk.len()))
                .await
                .is_err()
            {
                return Err(Some(late()));
            }
            let _ = self.body.flow_control().release_capacity(chunk.len());
            deframer.push(&chunk);
            loop {
                let account = self.account();
                let mut inflated = Charge::none();
                let next =
                    deframer.next_charged(max, &mut |n| inflate(account, &held, &mut inflated, n));
                match next.map_err(Some)? {
                    Some(next) => {
                        // As received, or as inflated (the compressed bytes are gone).
                        let received = held.split(deframer.take_consumed());
                        let charge = if inflated.amount() > 0 {
                            inflated
                        } else {
                            received
                        };
                        if message.replace((next, charge)).is_some() {
                            return Err(Some(Status::unimplemented(
                                "more than one request message for a method that takes one",
                            )));
                        }
                    }
                    None => break,
                }
            }
        }
        if deframer.held() > 0 {
            return Err(Some(Status::internal("the request ended inside a message")));
        }
        message.ok_or_else(|| Some(Status::unimplemented("no request message")))
    }

    /// Charges `bytes` more (a chunk of the body, read) to the connection's account into
    /// `held`, waiting (the body unread) while the connection, its peer or the server
    /// holds its maximum of requests. What one holder holds is charged up to the
    /// smallest limit at most (a message larger than it fits an account that holds
    /// nothing else, as the whole of it), so that a call never waits for itself.
    async fn hold(&self, held: &mut Charge, bytes: usize) {
        let room = self
            .account()
            .limit(Resource::Bytes)
            .saturating_sub(held.amount());
        if room > 0 {
            let more = self
                .account()
                .charge(Resource::Bytes, bytes.min(room))
                .await;
            held.merge(more);
        }
    }

    /// A client-streaming or bidirectional call: the opening request, then the body's
    /// messages as the server grants its window, while answering the server's frames.
    async fn stream_requests(
        &mut self,
        mut header: Header,
        metadata: &Metadata,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
        max: usize,
    ) -> Result<(), Stop> {
        if self.kind.server_streams() {
            header.credits = self.shared.config.stream_window;
        }
        self.to_server(frame(header, metadata, &[]), Charge::none())
            .await?;
        let mut deframer = Deframer::default();
        deframer.set_encoding(self.request_encoding);
        // Messages waiting for the server's window, each with what it holds on the
        // connection's account (its bytes as received, or as inflated).
        let mut queued: VecDeque<(Bytes, Charge)> = VecDeque::new();
        let mut queued_bytes = 0usize;
        // What the deframer holds (a message in progress) on the account, and the room
        // taken for the next chunk.
        let mut held = Charge::none();
        let mut room = Room::new(self.account().clone());
        // When the last chunk came: a message in progress may stall only so long.
        let mut last_chunk = tokio::time::Instant::now();
        let mut was_reading = true;
        let body_timeout = self.shared.config.body_timeout;
        let mut window: i64 = 0;
        let mut body_done = false;
        let limit = self.shared.config.stream_window as usize;
        loop {
            // Messages within the server's window go up.
            while window > 0 {
                let Some((message, charge)) = queued.pop_front() else {
                    break;
                };
                queued_bytes -= HEADER_LEN + message.len();
                window -= (HEADER_LEN + message.len()) as i64;
                let m = Header::new(FrameKind::Message, self.call_id);
                self.to_server(frame(m, &Metadata::new(), &message), charge)
                    .await?;
            }
            if body_done && queued.is_empty() {
                let mut end = Header::new(FrameKind::Message, self.call_id);
                end.flags = Flags::END_STREAM;
                self.to_server(frame(end, &Metadata::new(), &[]), Charge::none())
                    .await?;
                return Ok(());
            }
            if self.out.is_empty() && (self.finished.is_some() || self.trailers.is_some()) {
                // The server ended the call before the client finished sending.
                self.finish()?;
                if self.done {
                    return Ok(());
                }
            }
            // The body is read while the messages waiting for the server's window are
            // under the limit (a message in progress is read to its end whatever its
            // size: its prefix was checked). Only while reading does a stalled message
            // count against the client. A chunk is read once there is room on the account
            // for it, waited for as a branch of its own: the call goes on forwarding its
            // queued messages (which frees room) meanwhile.
            let reading = !body_done && queued_bytes < limit && room.ready(&held);
            if reading && !was_reading {
                last_chunk = tokio::time::Instant::now();
            }
            was_reading = reading;
            tokio::select! {
                chunk = self.body.data(), if reading => {
                    match chunk {
                        Some(Ok(chunk)) => {
                            last_chunk = tokio::time::Instant::now();
                            room.take(&mut held, chunk.len());
                            let _ = self.body.flow_control().release_capacity(chunk.len());
                            deframer.push(&chunk);
                            loop {
                                let account = self.account();
                                let mut inflated = Charge::none();
                                let next = deframer.next_charged(max, &mut |n| {
                                    inflate(account, &held, &mut inflated, n)
                                });
                                match next {
                                    Ok(Some(message)) => {
                                        // As received, or as inflated (the compressed
                                        // bytes are gone then).
                                        let received = held.split(deframer.take_consumed());
                                        let charge = if inflated.amount() > 0 {
                                            inflated
                                        } else {
                                            received
                                        };
                                        queued_bytes += HEADER_LEN + message.len();
                                        queued.push_back((message, charge));
                                    }
                                    Ok(None) => break,
                                    Err(status) => {
                                        // The server's call is told to stop; the client gets the reason.
                                        self.cancel_server().await;
                                        self.fail(&status);
                                        return Err(Stop::ServerGone);
                                    }
                                }
                            }
                        }
                        Some(Err(_)) => return Err(Stop::Cancelled),
                        None => body_done = true,
                    }
                }
                () = room.granted(), if room.is_waiting() => {}
                frame = frames.recv() => {
                    let Some(frame) = frame else { return Err(Stop::ServerGone) };
                    // With what came along: a run of messages goes out as one DATA frame.
                    let mut next = Some(frame);
                    while let Some((frame, permit)) = next.take().or_else(|| frames.try_recv().ok()) {
                        if let Some(credits) = self.on_server_frame(frame, permit)? {
                            window += i64::from(credits);
                        }
                    }
                }
                wait = Self::wait_stream(&mut self.respond, &mut self.sending, &self.out, &mut self.waiting, self.shared.config.stream_idle_timeout) => {
                    self.sent(wait).await?;
                }
                () = tokio::time::sleep_until(last_chunk + body_timeout), if reading && deframer.held() > 0 => {
                    self.cancel_server().await;
                    self.fail(&stalled());
                    return Err(Stop::ServerGone);
                }
            }
        }
    }

    /// After the request: the server's frames until its final one went out.
    async fn respond_until_done(
        &mut self,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
    ) -> Result<(), Stop> {
        loop {
            if self.out.is_empty() && (self.finished.is_some() || self.trailers.is_some()) {
                self.finish()?;
            }
            if self.done {
                return Ok(());
            }
            tokio::select! {
                frame = frames.recv() => {
                    let Some(frame) = frame else { return Err(Stop::ServerGone) };
                    // With what came along: a run of messages goes out as one DATA frame.
                    // (Window updates for a request stream that ended: nothing to do.)
                    let mut next = Some(frame);
                    while let Some((frame, permit)) = next.take().or_else(|| frames.try_recv().ok()) {
                        self.on_server_frame(frame, permit)?;
                    }
                }
                wait = Self::wait_stream(&mut self.respond, &mut self.sending, &self.out, &mut self.waiting, self.shared.config.stream_idle_timeout) => {
                    self.sent(wait).await?;
                }
            }
        }
    }

    /// Waits until HTTP/2 lets the first queued message (or part of it) go, the client
    /// resets the call, or the queued messages waited for the client's window `idle`
    /// since `waiting` (set when a wait with none granted begins: the only clock read).
    async fn wait_stream(
        respond: &mut SendResponse<Bytes>,
        sending: &mut Option<SendStream<Bytes>>,
        out: &VecDeque<Outgoing>,
        waiting: &mut Option<tokio::time::Instant>,
        idle: Duration,
    ) -> Wait {
        let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        std::future::poll_fn(|cx| match sending {
            Some(stream) => {
                if stream.poll_reset(cx).is_ready() {
                    return Poll::Ready(Wait::Reset);
                }
                if !out.is_empty() {
                    stream.reserve_capacity(out.iter().map(|(data, _, _)| data.len()).sum());
                    match stream.poll_capacity(cx) {
                        Poll::Ready(Some(Ok(0))) | Poll::Pending => {}
                        Poll::Ready(Some(Ok(n))) => {
                            *waiting = None;
                            return Poll::Ready(Wait::Capacity(n));
                        }
                        Poll::Ready(_) => return Poll::Ready(Wait::Reset),
                    }
                    let since = *waiting.get_or_insert_with(tokio::time::Instant::now);
                    let timer = timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + idle)));
                    if std::future::Future::poll(timer.as_mut(), cx).is_ready() {
                        return Poll::Ready(Wait::Idle);
                    }
                }
                Poll::Pending
            }
            None => match respond.poll_reset(cx) {
                Poll::Ready(_) => Poll::Ready(Wait::Reset),
                Poll::Pending => Poll::Pending,
            },
        })
        .await
    }

    /// Sends what HTTP/2 now allows of the queued messages, in one DATA frame (clients
    /// refuse floods of small ones); each message that went out whole gives the server
    /// its window back.
    async fn sent(&mut self, wait: Wait) -> Result<(), Stop> {
        let mut capacity = match wait {
            Wait::Capacity(capacity) => capacity,
            Wait::Reset => return Err(Stop::Cancelled),
            Wait::Idle => {
                tracing::debug!("call {}: reset, its response idle", self.call_id);
                if let Some(stream) = self.sending.as_mut() {
                    stream.send_reset(h2::Reason::CANCEL);
                }
                return Err(Stop::Idle);
            }
        };
        let stream = self.sending.as_mut().expect("capacity needs a stream");
        let mut pieces = Vec::new();
        let mut granted = 0usize;
        while capacity > 0 {
            let Some((data, charged, _)) = self.out.front_mut() else {
                break;
            };
            let n = capacity.min(data.len());
            pieces.push(data.split_to(n));
            capacity -= n;
            if data.is_empty() {
                granted += *charged;
                self.out.pop_front();
            }
        }
        let data = match pieces.len() {
            1 => pieces.pop().expect("one"),
            _ => {
                let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
                for piece in &pieces {
                    joined.extend_from_slice(piece);
                }
                joined.freeze()
            }
        };
        if stream.send_data(data, false).is_err() {
            return Err(Stop::Cancelled);
        }
        if granted > 0 {
            let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
            grant.credits = granted.min(u32::MAX as usize) as u32;
            self.to_server(Bytes::copy_from_slice(&grant.encode()), Charge::none())
                .await?;
        }
        Ok(())
    }

    /// One frame from the server for this call. Returns the credits of a window update
    /// (for the request stream).
    fn on_server_frame(&mut self, buf: Bytes, permit: Held) -> Result<Option<u32>, Stop> {
        let Ok(frame) = Frame::parse(&buf) else {
            return Ok(None);
        };
        let header = frame.header;
        match header.kind {
            FrameKind::WindowUpdate => return Ok(Some(header.credits)),
            FrameKind::Message => {
                if !self.headers_sent {
                    self.send_headers(&Metadata::new(), false)?;
                }
                self.out.push_back((
                    deframe::frame_with(frame.payload, self.response_encoding),
                    header.frame_len(),
                    permit,
                ));
            }
            FrameKind::Response if !header.flags.contains(Flags::END_STREAM) => {
                let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
                self.send_headers(&metadata, false)?;
            }
            FrameKind::Response => self.finished = Some((buf, permit)),
            _ => {}
        }
        Ok(None)
    }

    fn send_headers(&mut self, metadata: &Metadata, end: bool) -> Result<(), Stop> {
        let mut response = Response::new(());
        let headers = response.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
        if let Some(encoding) = self.response_encoding {
            headers.insert("grpc-encoding", HeaderValue::from_static(encoding.name()));
        }
        text::append_metadata(headers, metadata);
        self.headers_sent = true;
        match self.respond.send_response(response, end) {
            Ok(stream) => {
                self.sending = Some(stream);
                Ok(())
            }
            Err(_) => Err(Stop::Cancelled),
        }
    }

    /// The server's final frame: status and trailers (with the response message of a
    /// unary or client-streaming call, queued first: the trailers follow once it went
    /// out, as HTTP/2 flow control lets it).
    fn finish(&mut self) -> Result<(), Stop> {
        if let Some(trailers) = self.trailers.take() {
            self.done = true;
            let stream = self.sending.as_mut().expect("headers sent");
            return stream.send_trailers(trailers).map_err(|_| Stop::Cancelled);
        }
        let (buf, permit) = self.finished.take().expect("finished");
        let Ok(frame) = Frame::parse(&buf) else {
            self.fail(&Status::internal("malformed response"));
            return Ok(());
        };
        let code = Code::from_u8(frame.header.status);
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        if frame.header.flags.contains(Flags::REFUSED) && !self.headers_sent {
            // Not started (the server is draining): HTTP/2's refusal, which gRPC clients
            // retry transparently.
            self.done = true;
            self.respond.send_reset(h2::Reason::REFUSED_STREAM);
            return Ok(());
        }
        if code != Code::Ok {
            let message = String::from_utf8_lossy(frame.payload).into_owned();
            self.fail(&Status::from_metadata(code, message, metadata));
            return Ok(());
        }
        let mut trailers = HeaderMap::new();
        status_headers(&mut trailers, Code::Ok, "");
        if self.kind.server_streams() {
            // A stream's end: its metadata block is the trailers.
            if !self.headers_sent {
                self.send_headers(&Metadata::new(), false)?;
            }
            text::append_metadata(&mut trailers, &metadata);
            self.done = true;
            let stream = self.sending.as_mut().expect("headers sent");
            return stream.send_trailers(trailers).map_err(|_| Stop::Cancelled);
        }
        // The one response message; headers and trailers come in one block here.
        let (metadata, app_trailers) = metadata.split_trailers();
        if !self.headers_sent {
            self.send_headers(&metadata, false)?;
        }
        text::append_metadata(&mut trailers, &app_trailers);
        self.out.push_back((
            deframe::frame_with(frame.payload, self.response_encoding),
            0,
            permit,
        ));
        self.trailers = Some(trailers);
        Ok(())
    }

    /// Ends the call with `status`: trailers-only if nothing was sent yet.
    fn fail(&mut self, status: &Status) {
        self.done = true;
        match self.sending.as_mut() {
            Some(stream) => {
                let mut trailers = HeaderMap::new();
                status_headers(&mut trailers, status.code(), status.message());
                text::append_metadata(&mut trailers, &status.to_metadata());
                let _ = stream.send_trailers(trailers);
            }
            None => refuse(&mut self.respond, status),
        }
    }

    /// Queues `frame` for the server, with what it holds on the connection's account
    /// (given back when the server takes it).
    async fn to_server(&self, frame: Bytes, held: Charge) -> Result<(), Stop> {
        self.tx
            .send((frame, held))
            .await
            .map_err(|_| Stop::ServerGone)
    }
}

/// An I/O object whose first bytes were already read: they are read again first.
#[derive(Debug)]
struct Rewind<T> {
    prefix: Bytes,
    io: T,
}

impl<T> Rewind<T> {
    fn new(io: T, prefix: Bytes) -> Rewind<T> {
        Rewind { prefix, io }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let part = self.prefix.split_to(n);
            buf.put_slice(&part);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
