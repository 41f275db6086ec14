//! The server side: an HTTP/2 connection from a gRPC client, as a [`Connection`] whose
//! frames are its calls.
//!
//! A driver task runs the HTTP/2 connection and, beside it, a future per gRPC call (no
//! task per call: `driver.rs`). The call's future turns the request into the
//! framework's frames for the server (`recv`), and the server's frames for the call
//! (`send`, routed to it by call id) into the HTTP/2 response: headers, length-prefixed
//! messages, trailers with `grpc-status`. Bounds: the HTTP/2 windows (stream and
//! connection) bound what a client may send before the server reads it; a call holds at
//! most one window's worth of request messages the server has not been granted yet, and
//! sends response messages only as HTTP/2 flow control lets it, granting the server a
//! message's window back once it went out, so a client that does not read holds at most
//! the server's stream window per call.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use rdmarpc_core::account::{Account, Charge, Resource};
use rdmarpc_core::wire::{FrameKind, Header, HEADER_LEN};
use rdmarpc_core::{Connection, MethodKinds, TransportError, MAX_METADATA_LEN};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::calm::ResetBudget;
use crate::inplace::InPlace;
use crate::linger::Returned;
use crate::progress::{Activity, Watched};
mod call;
mod driver;
mod head;
mod requests;
mod responses;
mod rewind;
mod room;
mod status;
pub(crate) mod translate;
pub(crate) mod upload;

use self::driver::drive;
use self::rewind::Rewind;
use crate::config::GrpcConfig;
use crate::frames::set;

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
/// stops the calls, which stop reading their bodies (HTTP/2 flow control).
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
            .max_frame_size(config.frame_size())
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
        let driver = drive(connection, returned, shared.clone(), tx, activity);
        tokio::spawn(InPlace::new(driver));
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
