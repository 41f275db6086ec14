//! The client side: a gRPC server reached over HTTP/2, as a [`Connection`] whose frames
//! are calls (`grpc://`, `grpcs://`).
//!
//! The channel's frames are turned into gRPC calls: a `Request` opens an HTTP/2 stream
//! (its path and kind told beforehand by [`Connection::calling`]), `Message` frames
//! become length-prefixed messages in its body, `Cancel` resets it. A task per call turns
//! the response (headers, messages, trailers; or a reset) back into the framework's
//! frames for the channel. Bounds: request messages the channel may send are its window,
//! granted back once they went out under HTTP/2 flow control; response messages are read
//! from HTTP/2 only while fewer than a window of them wait for the channel's window, so a
//! caller that does not read holds back the server through HTTP/2 flow control.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request};
use parking_lot::{Mutex, RwLock};
use rpc_core::codegen::{MethodDescriptor, MethodKind};
use rpc_core::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN};
use rpc_core::{Code, Metadata, Status, TransportError, MAX_METADATA_LEN};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};

use crate::compress::{Encoding, ACCEPT};
use crate::deframe::{self, Deframer};
use crate::frames::{control, frame, set};
use crate::{text, GrpcConfig};

/// Frames queued for the channel before call tasks wait.
const TO_CHANNEL_FRAMES: usize = 256;

/// The client side of one HTTP/2 connection.
#[derive(Debug)]
pub(crate) struct ClientConnection {
    shared: Arc<Shared>,
    incoming: tokio::sync::Mutex<mpsc::Receiver<Bytes>>,
    pub(crate) peer: String,
    pub(crate) peer_addr: Option<SocketAddr>,
}

#[derive(Debug)]
struct Shared {
    config: GrpcConfig,
    /// `http` or `https`, and `host:port`: the requests' URI.
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    h2: SendRequest<Bytes>,
    /// Paths and kinds of the methods called so far, by id.
    methods: RwLock<HashMap<u32, (&'static str, MethodKind)>>,
    /// The call tasks, by call id: frames from the channel for each.
    calls: Mutex<HashMap<u64, mpsc::UnboundedSender<Bytes>>>,
    to_channel: mpsc::Sender<Bytes>,
    /// HTTP/2 PING, for the channel's keepalive.
    ping: tokio::sync::Mutex<Option<h2::PingPong>>,
    /// Set when the connection is closed (by `close`, or because HTTP/2 ended).
    closed: watch::Sender<bool>,
    /// Why HTTP/2 ended, if it failed.
    failure: Mutex<Option<String>>,
    /// Set once the server's graceful GOAWAY was seen (a stream it refused, or a look
    /// when a call ended): the channel has been told.
    going_away: AtomicBool,
}

impl Shared {
    /// The status of a call whose stream failed with `e`. A stream the server's GOAWAY
    /// (with NO_ERROR, a graceful close) left unprocessed, or that could not open once
    /// it arrived, was never seen by the server: it is flagged refused, so that the
    /// channel sends it again elsewhere, and the channel is told GOAWAY (once), so that
    /// it sends no more calls here. (HTTP/2 reports streams the server did process as
    /// a broken pipe when the connection then ends, never as GOAWAY.)
    fn stream_error(&self, e: &h2::Error) -> (Status, Flags) {
        if graceful_go_away(e) {
            self.going_away();
            return (
                Status::unavailable(
                    "the server is going away (GOAWAY): the call was not processed",
                ),
                Flags::REFUSED,
            );
        }
        reset_status(e)
    }

    /// Tells the channel GOAWAY, once: it sends no more calls here.
    fn going_away(&self) {
        if !self.going_away.swap(true, Ordering::AcqRel) {
            let to_channel = self.to_channel.clone();
            tokio::spawn(async move {
                let _ = to_channel.send(control(FrameKind::GoAway, 0)).await;
            });
        }
    }

    /// Whether HTTP/2 received the server's graceful GOAWAY, which it reports only to
    /// streams being opened: looked at when a call ends, so that the channel moves its
    /// next calls to a new connection before this one closes under them.
    fn look_for_go_away(&self) {
        if self.going_away.load(Ordering::Acquire) {
            return;
        }
        let mut h2 = self.h2.clone();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(Err(e)) = h2.poll_ready(&mut cx) {
            if graceful_go_away(&e) {
                self.going_away();
            }
        }
    }
}

/// A GOAWAY with NO_ERROR from the server.
fn graceful_go_away(e: &h2::Error) -> bool {
    e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR)
}

impl ClientConnection {
    /// Runs the client side of HTTP/2 on `io` (already connected, under TLS for
    /// `grpcs://`) to `authority` (`host:port`).
    pub(crate) async fn connect<T>(
        io: T,
        authority: &str,
        tls: bool,
        config: &GrpcConfig,
        peer_addr: Option<SocketAddr>,
    ) -> Result<ClientConnection, TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let authority: http::uri::Authority = authority
            .parse()
            .map_err(|e| TransportError::Other(format!("{authority:?}: {e}")))?;
        let mut builder = h2::client::Builder::new();
        builder
            .enable_push(false)
            .initial_window_size(config.stream_window)
            .initial_connection_window_size(config.connection_window)
            .max_header_list_size((MAX_METADATA_LEN + 16 * 1024) as u32)
            .max_send_buffer_size(64 * 1024);
        let (h2, mut connection) = builder
            .handshake(io)
            .await
            .map_err(|e| TransportError::Other(format!("HTTP/2 handshake: {e}")))?;
        let ping = connection.ping_pong();
        let (to_channel, incoming) = mpsc::channel(TO_CHANNEL_FRAMES);
        let shared = Arc::new(Shared {
            config: config.clone(),
            scheme: if tls {
                http::uri::Scheme::HTTPS
            } else {
                http::uri::Scheme::HTTP
            },
            authority,
            h2,
            methods: RwLock::default(),
            calls: Mutex::default(),
            to_channel,
            ping: tokio::sync::Mutex::new(ping),
            closed: watch::channel(false).0,
            failure: Mutex::new(None),
            going_away: AtomicBool::new(false),
        });
        let driver = shared.clone();
        tokio::spawn(async move {
            let mut closed = driver.closed.subscribe();
            tokio::select! {
                ended = connection => {
                    if let Err(e) = ended {
                        tracing::debug!("HTTP/2 connection ended: {e}");
                        driver.failure.lock().get_or_insert(format!("HTTP/2: {e}"));
                    }
                }
                () = set(&mut closed) => {}
            }
            driver.closed.send_replace(true);
            // Calls in progress end with their streams' errors; new ones find it closed.
        });
        let scheme = if tls { "grpcs" } else { "grpc" };
        let peer = match peer_addr {
            Some(addr) => format!("{scheme}://{addr}"),
            None => format!("{scheme}://{}", shared.authority),
        };
        Ok(ClientConnection {
            shared,
            incoming: tokio::sync::Mutex::new(incoming),
            peer,
            peer_addr,
        })
    }

    pub(crate) fn max_frame(&self) -> usize {
        HEADER_LEN + MAX_METADATA_LEN + self.shared.config.max_message_size
    }

    pub(crate) fn send(&self, frame: Bytes) -> Result<(), TransportError> {
        if *self.shared.closed.borrow() {
            return Err(self.closed_error());
        }
        // A buffer may hold several frames back to back (runs of stream messages).
        let mut at = 0;
        while at < frame.len() {
            let header = match rpc_core::wire::Header::decode(&frame[at..]) {
                Ok(Some(header)) if at + header.frame_len() <= frame.len() => header,
                _ => return Err(TransportError::Other("a malformed frame to send".into())),
            };
            let one = frame.slice(at..at + header.frame_len());
            at += header.frame_len();
            match header.kind {
                FrameKind::Request => self.open(header, one),
                FrameKind::Ping => self.ping(header.call_id),
                FrameKind::Pong | FrameKind::GoAway | FrameKind::Credit => {}
                _ => {
                    let call = self.shared.calls.lock().get(&header.call_id).cloned();
                    if let Some(call) = call {
                        let _ = call.send(one);
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts the task of the call `request` opens.
    fn open(&self, header: Header, request: Bytes) {
        let method = self.shared.methods.read().get(&header.method_id).copied();
        let Some((path, kind)) = method else {
            let status = Status::internal(format!(
                "method id {:#x} was not announced to the gRPC transport (Connection::calling)",
                header.method_id
            ));
            let shared = self.shared.clone();
            tokio::spawn(async move {
                let _ = shared
                    .to_channel
                    .send(status_frame(
                        header.call_id,
                        &status,
                        Flags::default(),
                        &Metadata::new(),
                    ))
                    .await;
            });
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared.calls.lock().insert(header.call_id, tx);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let call_id = header.call_id;
            let mut call = Call::new(shared.clone(), call_id, kind);
            call.run(path, header, request, rx).await;
            shared.calls.lock().remove(&call_id);
            shared.look_for_go_away();
        });
    }

    /// Answers the channel's PING with a PONG once HTTP/2's PING is answered.
    fn ping(&self, call_id: u64) {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // One PING at a time: a keepalive finds the previous one still waiting.
            let Ok(mut guard) = shared.ping.try_lock() else {
                return;
            };
            let Some(ping) = guard.as_mut() else { return };
            if ping.ping(h2::Ping::opaque()).await.is_ok() {
                let _ = shared
                    .to_channel
                    .send(control(FrameKind::Pong, call_id))
                    .await;
            }
        });
    }

    pub(crate) async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        let mut incoming = self.incoming.lock().await;
        let mut closed = self.shared.closed.subscribe();
        tokio::select! {
            biased;
            frame = incoming.recv() => Ok(frame),
            () = set(&mut closed) => {
                // Calls may still be reporting how they ended (a refused stream's status
                // the channel must see to send it again): until every call task is done,
                // up to 2 s.
                let until = tokio::time::Instant::now() + Duration::from_secs(2);
                loop {
                    let next = tokio::time::timeout(Duration::from_millis(50), incoming.recv());
                    match next.await {
                        Ok(Some(frame)) => return Ok(Some(frame)),
                        Ok(None) => break,
                        Err(_) if self.shared.calls.lock().is_empty() => break,
                        Err(_) if tokio::time::Instant::now() >= until => break,
                        Err(_) => {}
                    }
                }
                match self.shared.failure.lock().clone() {
                    Some(reason) => Err(TransportError::Other(reason)),
                    None => Ok(None),
                }
            }
        }
    }

    pub(crate) fn recv_ready(&self, out: &mut Vec<Bytes>, max: usize) {
        if let Ok(mut incoming) = self.incoming.try_lock() {
            while out.len() < max {
                match incoming.try_recv() {
                    Ok(frame) => out.push(frame),
                    Err(_) => return,
                }
            }
        }
    }

    pub(crate) fn calling(&self, method: &MethodDescriptor) {
        if self.shared.methods.read().contains_key(&method.id) {
            return;
        }
        self.shared
            .methods
            .write()
            .insert(method.id, (method.path, method.kind));
    }

    pub(crate) fn close(&self) {
        self.shared.closed.send_replace(true);
    }

    fn closed_error(&self) -> TransportError {
        match self.shared.failure.lock().clone() {
            Some(reason) => TransportError::Other(reason),
            None => TransportError::Closed,
        }
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        self.shared.closed.send_replace(true);
    }
}

/// Fails the call, not the connection, when `metadata` cannot be a frame's metadata
/// block: HTTP/2 takes header lists up to the metadata limit plus 16 KiB (a server's
/// pseudo-headers and gRPC's own), and a block over the limit would be a frame the
/// channel treats as malformed, failing every call on the connection.
fn within_limit(metadata: &Metadata, what: &str) -> Result<(), (Status, Flags)> {
    let len = metadata.encoded_len();
    if len > MAX_METADATA_LEN {
        return Err((
            Status::resource_exhausted(format!(
                "{what} of {len} bytes exceed the metadata limit of {MAX_METADATA_LEN}"
            )),
            Flags::default(),
        ));
    }
    Ok(())
}

/// A failed `Response` frame with `status` (its message as payload).
fn status_frame(call_id: u64, status: &Status, flags: Flags, metadata: &Metadata) -> Bytes {
    let mut header = Header::new(FrameKind::Response, call_id);
    header.flags = Flags::END_STREAM | flags;
    header.status = status.code() as u8;
    frame(header, metadata, status.message().as_bytes())
}

/// A `grpc-timeout` value for `timeout` (at most 8 digits, the finest unit that fits).
fn format_timeout(timeout: Duration) -> String {
    let micros = timeout.as_micros();
    if micros < 100_000_000 {
        return format!("{}u", micros.max(1));
    }
    let millis = timeout.as_millis();
    if millis < 100_000_000 {
        return format!("{millis}m");
    }
    format!("{}S", timeout.as_secs().min(99_999_999))
}

/// The gRPC status of an HTTP response that is not gRPC (gRPC's HTTP-to-gRPC mapping).
fn http_status(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("HTTP status {status} from a gRPC server"))
}

/// The status a reset stream (or a failed connection) ends a call with.
fn reset_status(e: &h2::Error) -> (Status, Flags) {
    match e.reason() {
        Some(h2::Reason::REFUSED_STREAM) => (
            Status::unavailable("the server refused the stream (REFUSED_STREAM)"),
            Flags::REFUSED,
        ),
        Some(h2::Reason::CANCEL) => (
            Status::cancelled("the server cancelled the call"),
            Flags::default(),
        ),
        Some(h2::Reason::ENHANCE_YOUR_CALM) => (
            Status::resource_exhausted("the server asked to slow down (ENHANCE_YOUR_CALM)"),
            Flags::default(),
        ),
        Some(h2::Reason::INADEQUATE_SECURITY) => (
            Status::new(Code::PermissionDenied, "HTTP/2: inadequate security"),
            Flags::default(),
        ),
        _ if e.is_go_away() || e.is_io() => (
            Status::unavailable(format!("connection: {e}")),
            Flags::default(),
        ),
        _ => (Status::internal(format!("HTTP/2: {e}")), Flags::default()),
    }
}

/// `grpc-status`, `grpc-message` and the application's metadata of a response's headers
/// or trailers.
fn status_of(headers: &HeaderMap) -> Option<Status> {
    let code = headers.get("grpc-status")?;
    let code = code
        .to_str()
        .ok()
        .and_then(|c| c.parse::<u8>().ok())
        .map_or(Code::Unknown, Code::from_u8);
    let message = headers
        .get("grpc-message")
        .map(|m| text::percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Status::new(code, message))
}

/// One call's task: see the module docs.
struct Call {
    shared: Arc<Shared>,
    call_id: u64,
    kind: MethodKind,
    /// Request messages (prefixed) waiting for HTTP/2 flow control, with the window
    /// each took from the channel.
    out: VecDeque<(Bytes, usize)>,
    /// The channel half-closed the request stream.
    out_done: bool,
    /// The request body was ended on HTTP/2.
    out_ended: bool,
    /// Response messages waiting for the channel's window.
    queued: VecDeque<Bytes>,
    queued_bytes: usize,
    /// The channel's window for response stream messages, in frame bytes.
    window: i64,
    /// Response headers' metadata, kept for the final frame of a call with one response.
    headers: Metadata,
    /// The one response message of a unary or client-streaming call.
    message: Option<Bytes>,
    /// The response headers of a stream, for the channel before its messages.
    head: Option<Bytes>,
    /// The final frame, sent once `queued` is empty.
    last: Option<Bytes>,
    /// How request messages are compressed, if they are.
    request_encoding: Option<Encoding>,
    /// How the server compresses its messages (`grpc-encoding` of the response).
    response_encoding: Option<Encoding>,
}

impl Call {
    fn new(shared: Arc<Shared>, call_id: u64, kind: MethodKind) -> Call {
        Call {
            shared,
            call_id,
            kind,
            out: VecDeque::new(),
            out_done: false,
            out_ended: false,
            queued: VecDeque::new(),
            queued_bytes: 0,
            window: 0,
            headers: Metadata::new(),
            message: None,
            head: None,
            last: None,
            request_encoding: None,
            response_encoding: None,
        }
    }

    async fn run(
        &mut self,
        path: &'static str,
        header: Header,
        request: Bytes,
        mut frames: mpsc::UnboundedReceiver<Bytes>,
    ) {
        if let Err((status, flags)) = self.exchange(path, header, request, &mut frames).await {
            // Headers over the limit are the reason, not a part, of the failure.
            if within_limit(&self.headers, "").is_err() {
                self.headers = Metadata::new();
            }
            let _ = self
                .to_channel(status_frame(self.call_id, &status, flags, &self.headers))
                .await;
        }
    }

    /// The whole call; `Err` carries the status it failed with, for the channel.
    async fn exchange(
        &mut self,
        path: &'static str,
        header: Header,
        request: Bytes,
        frames: &mut mpsc::UnboundedReceiver<Bytes>,
    ) -> Result<(), (Status, Flags)> {
        let frame = Frame::parse(&request)
            .map_err(|e| (Status::internal(e.to_string()), Flags::default()))?;
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        if header.credits > 0 {
            self.window = i64::from(header.credits);
        } else if self.kind.server_streams() {
            self.window = i64::from(rpc_core::wire::INITIAL_STREAM_WINDOW);
        }
        let uri = http::Uri::builder()
            .scheme(self.shared.scheme.clone())
            .authority(self.shared.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| (Status::internal(format!("{path}: {e}")), Flags::default()))?;
        let mut http = Request::builder()
            .method("POST")
            .uri(uri)
            .body(())
            .map_err(|e| (Status::internal(e.to_string()), Flags::default()))?;
        let headers = http.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        headers.insert(
            "user-agent",
            HeaderValue::from_static(concat!("rpc-grpc/", env!("CARGO_PKG_VERSION"))),
        );
        headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
        let request_encoding = self.shared.config.send_compression;
        if let Some(encoding) = request_encoding {
            headers.insert("grpc-encoding", HeaderValue::from_static(encoding.name()));
        }
        self.request_encoding = request_encoding;
        if header.timeout_us > 0 {
            let timeout = format_timeout(Duration::from_micros(header.timeout_us));
            headers.insert(
                "grpc-timeout",
                HeaderValue::from_str(&timeout).expect("ASCII"),
            );
        }
        text::append_metadata(headers, &metadata);

        let shared = self.shared.clone();
        let unavailable = |e: h2::Error| shared.stream_error(&e);
        // Waits while the server's limit of concurrent streams is reached (frames from
        // the channel wait in their queue; a cancel is seen once the stream is open).
        let mut h2 = self.shared.h2.clone().ready().await.map_err(unavailable)?;
        let one_request = !self.kind.client_streams();
        let (response, mut body_out) = h2.send_request(http, false).map_err(unavailable)?;
        if one_request {
            body_out
                .send_data(deframe::frame_with(frame.payload, request_encoding), true)
                .map_err(unavailable)?;
            self.out_ended = true;
        } else {
            // The request stream's window: the channel may send this much ahead.
            let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
            grant.credits = self.shared.config.stream_window;
            if self
                .to_channel(Bytes::copy_from_slice(&grant.encode()))
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        let mut response = std::pin::pin!(response);
        let mut body: Option<RecvStream> = None;
        let mut deframer = Deframer::for_responses();
        let max = self.shared.config.max_message_size;
        let limit = self.shared.config.stream_window as usize;
        loop {
            if let Some(head) = self.head.take() {
                self.to_channel(head)
                    .await
                    .map_err(|()| (Status::cancelled("the channel went"), Flags::default()))?;
            }
            self.deliver().await?;
            if self.last.is_some() && self.queued.is_empty() {
                let last = self.last.take().expect("checked");
                let _ = self.to_channel(last).await;
                return Ok(());
            }
            if self.out_done && self.out.is_empty() && !self.out_ended {
                self.out_ended = true;
                let _ = body_out.send_data(Bytes::new(), true);
            }
            let reading = body.is_some() && self.queued_bytes < limit && self.last.is_none();
            tokio::select! {
                got = frames.recv() => match got {
                    None => return Ok(()),
                    Some(frame) => {
                        if self.on_channel_frame(&frame) {
                            body_out.send_reset(h2::Reason::CANCEL);
                            return Ok(());
                        }
                    }
                },
                headers = &mut response, if body.is_none() && self.last.is_none() => {
                    let response = headers.map_err(unavailable)?;
                    if let Some(ended) = self.on_headers(response, &mut body)? {
                        self.last = Some(ended);
                    }
                }
                chunk = async { body.as_mut().expect("reading").data().await }, if reading => {
                    match chunk {
                        Some(Ok(chunk)) => {
                            let stream = body.as_mut().expect("reading");
                            let _ = stream.flow_control().release_capacity(chunk.len());
                            deframer.push(&chunk);
                            deframer.set_encoding(self.response_encoding);
                            while let Some(message) = deframer.next(max).map_err(|s| {
                                body_out.send_reset(h2::Reason::CANCEL);
                                (s, Flags::default())
                            })? {
                                self.on_message(message)?;
                            }
                        }
                        Some(Err(e)) => return Err(self.shared.stream_error(&e)),
                        None => {
                            let mut stream = body.take().expect("reading");
                            let trailers = stream.trailers().await.map_err(unavailable)?;
                            if deframer.held() > 0 {
                                return Err((Status::internal("the response ended inside a message"), Flags::default()));
                            }
                            self.last = Some(self.on_trailers(trailers.unwrap_or_default())?);
                        }
                    }
                }
                wait = Self::wait_stream(&mut body_out, &self.out), if !self.out.is_empty() => {
                    match wait {
                        Some(capacity) => self.sent(&mut body_out, capacity).await?,
                        None => {
                            // The server reset the request stream; the response tells why.
                            self.out.clear();
                            self.out_ended = true;
                        }
                    }
                }
            }
        }
    }

    /// A frame from the channel for this call; `true` if it cancels the call.
    fn on_channel_frame(&mut self, buf: &Bytes) -> bool {
        let Ok(frame) = Frame::parse(buf) else {
            return false;
        };
        let header = frame.header;
        match header.kind {
            FrameKind::Cancel => return true,
            FrameKind::WindowUpdate => self.window += i64::from(header.credits),
            FrameKind::Message
                if header.flags.contains(Flags::END_STREAM) && frame.payload.is_empty() =>
            {
                self.out_done = true;
            }
            FrameKind::Message => {
                if self.out_ended {
                    return false;
                }
                self.out
                    .push_back((deframe::frame(frame.payload), header.frame_len()));
                if header.flags.contains(Flags::END_STREAM) {
                    self.out_done = true;
                }
            }
            _ => {}
        }
        false
    }

    /// Waits until HTTP/2 lets some of the first queued request message go; `None` if
    /// the stream was reset.
    async fn wait_stream(
        stream: &mut SendStream<Bytes>,
        out: &VecDeque<(Bytes, usize)>,
    ) -> Option<usize> {
        std::future::poll_fn(|cx| {
            if stream.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            stream.reserve_capacity(out.iter().map(|(data, _)| data.len()).sum());
            match stream.poll_capacity(cx) {
                Poll::Ready(Some(Ok(0))) | Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(n))) => Poll::Ready(Some(n)),
                Poll::Ready(_) => Poll::Ready(None),
            }
        })
        .await
    }

    /// Sends what HTTP/2 allows of the queued request messages in one DATA frame; each
    /// message that went out whole gives the channel its window back.
    async fn sent(
        &mut self,
        stream: &mut SendStream<Bytes>,
        mut capacity: usize,
    ) -> Result<(), (Status, Flags)> {
        let mut data = BytesMut::new();
        let mut granted = 0usize;
        while capacity > 0 {
            let Some((message, charged)) = self.out.front_mut() else {
                break;
            };
            let n = capacity.min(message.len());
            data.extend_from_slice(&message.split_to(n));
            capacity -= n;
            if message.is_empty() {
                granted += *charged;
                self.out.pop_front();
            }
        }
        let end = self.out_done && self.out.is_empty();
        stream
            .send_data(data.freeze(), end)
            .map_err(|e| self.shared.stream_error(&e))?;
        if end {
            self.out_ended = true;
        }
        if granted > 0 {
            let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
            grant.credits = granted.min(u32::MAX as usize) as u32;
            let _ = self
                .to_channel(Bytes::copy_from_slice(&grant.encode()))
                .await;
        }
        Ok(())
    }

    /// The response's headers: the body to read, or (trailers-only) the final frame.
    fn on_headers(
        &mut self,
        response: http::Response<RecvStream>,
        body: &mut Option<RecvStream>,
    ) -> Result<Option<Bytes>, (Status, Flags)> {
        let (parts, stream) = response.into_parts();
        if parts.status != http::StatusCode::OK {
            return Err((http_status(parts.status), Flags::default()));
        }
        let grpc = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        if !grpc {
            return Err((
                Status::new(Code::Unknown, "the response is not gRPC (content-type)"),
                Flags::default(),
            ));
        }
        match Encoding::of_headers(&parts.headers) {
            Ok(encoding) => self.response_encoding = encoding,
            Err(why) => return Err((Status::internal(why), Flags::default())),
        }
        self.headers = text::metadata_from(&parts.headers);
        within_limit(&self.headers, "response headers")?;
        if let Some(status) = status_of(&parts.headers) {
            // Trailers-only: the call ends here, its headers are its trailers.
            let trailers = std::mem::take(&mut self.headers);
            return self.end(status, trailers).map(Some);
        }
        if self.kind.server_streams() {
            // A stream's response headers go first, outside its window.
            let header = Header::new(FrameKind::Response, self.call_id);
            let headers = std::mem::take(&mut self.headers);
            self.head = Some(frame(header, &headers, &[]));
        }
        *body = Some(stream);
        Ok(None)
    }

    /// One response message.
    fn on_message(&mut self, message: Bytes) -> Result<(), (Status, Flags)> {
        if self.kind.server_streams() {
            self.queued_bytes += HEADER_LEN + message.len();
            let header = Header::new(FrameKind::Message, self.call_id);
            self.queued
                .push_back(frame(header, &Metadata::new(), &message));
            return Ok(());
        }
        if self.message.replace(message).is_some() {
            return Err((
                Status::internal("more than one response message for a method that returns one"),
                Flags::default(),
            ));
        }
        Ok(())
    }

    /// The trailers: the final frame.
    fn on_trailers(&mut self, trailers: HeaderMap) -> Result<Bytes, (Status, Flags)> {
        let status = status_of(&trailers)
            .unwrap_or_else(|| Status::internal("the response ended without grpc-status"));
        let trailers = text::metadata_from(&trailers);
        within_limit(&trailers, "response trailers")?;
        self.end(status, trailers)
    }

    /// The final frame for `status` and `trailers`.
    fn end(&mut self, status: Status, trailers: Metadata) -> Result<Bytes, (Status, Flags)> {
        let mut header = Header::new(FrameKind::Response, self.call_id);
        header.flags = Flags::END_STREAM;
        header.status = status.code() as u8;
        if self.kind.server_streams() {
            // A stream's end: its metadata block is the trailers.
            let payload = if status.code() == Code::Ok {
                &[][..]
            } else {
                status.message().as_bytes()
            };
            return Ok(frame(header, &trailers, payload));
        }
        let mut metadata = std::mem::take(&mut self.headers);
        metadata.append_trailers(&trailers);
        within_limit(&metadata, "response headers and trailers together")?;
        if status.code() != Code::Ok {
            return Ok(frame(header, &metadata, status.message().as_bytes()));
        }
        let Some(message) = self.message.take() else {
            return Err((
                Status::internal("the response ended OK without a message"),
                Flags::default(),
            ));
        };
        Ok(frame(header, &metadata, &message))
    }

    /// Hands the channel the queued response frames its window allows.
    async fn deliver(&mut self) -> Result<(), (Status, Flags)> {
        while self.window > 0 {
            let Some(frame) = self.queued.pop_front() else {
                break;
            };
            self.queued_bytes = self.queued_bytes.saturating_sub(frame.len());
            self.window -= frame.len() as i64;
            if self.to_channel(frame).await.is_err() {
                return Err((Status::cancelled("the channel went"), Flags::default()));
            }
        }
        Ok(())
    }

    async fn to_channel(&self, frame: Bytes) -> Result<(), ()> {
        self.shared.to_channel.send(frame).await.map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_written_in_eight_digits_at_most() {
        assert_eq!(format_timeout(Duration::from_millis(250)), "250000u");
        assert_eq!(format_timeout(Duration::from_secs(1000)), "1000000m");
        assert_eq!(format_timeout(Duration::from_secs(10_000_000)), "10000000S");
        assert_eq!(format_timeout(Duration::from_nanos(1)), "1u");
        for t in [
            Duration::from_micros(7),
            Duration::from_secs(100_000),
            Duration::from_secs(1 << 40),
        ] {
            let text = format_timeout(t);
            assert!(text.len() <= 9, "{text}");
            assert!(text::parse_timeout(text.as_bytes()).is_some(), "{text}");
        }
    }

    #[test]
    fn http_statuses_map_as_grpc_says() {
        assert_eq!(
            http_status(http::StatusCode::NOT_FOUND).code(),
            Code::Unimplemented
        );
        assert_eq!(
            http_status(http::StatusCode::SERVICE_UNAVAILABLE).code(),
            Code::Unavailable
        );
        assert_eq!(
            http_status(http::StatusCode::UNAUTHORIZED).code(),
            Code::Unauthenticated
        );
        assert_eq!(
            http_status(http::StatusCode::IM_A_TEAPOT).code(),
            Code::Unknown
        );
    }
}
