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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use parking_lot::{Mutex, RwLock};
use rdmarpc_core::codegen::{MethodDescriptor, MethodKind};
use rdmarpc_core::wire::{Flags, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::{Metadata, Status, TransportError, MAX_METADATA_LEN};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};

use crate::frames::{control, set};
use crate::GrpcConfig;
mod call;
mod status;
pub(crate) mod translate;

use self::call::Call;
use self::status::{reset_status, status_frame};

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
            .max_frame_size(config.frame_size())
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
            let header = match rdmarpc_core::wire::Header::decode(&frame[at..]) {
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
