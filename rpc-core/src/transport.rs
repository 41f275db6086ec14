//! The transport contract: the one small trait that TCP, RDMA and the in-memory pair
//! implement.
//!
//! Unlike a `Stream + Sink` of owned frames, a [`Connection`] hands out send buffers, so
//! the runtime encodes a frame straight into the transport's memory: a slot of a
//! registered ring on RDMA, a `BytesMut` on TCP. Received frames borrow the transport's
//! memory too; dropping a [`Connection::RecvBuf`] gives it back.

use std::future::Future;
use std::io;
use std::ops::Deref;
use std::sync::Arc;

use bytes::{BufMut, Bytes};

use crate::wire::FrameError;

/// One established, bidirectional, frame-oriented connection.
///
/// Frames are complete wire frames (header, metadata, payload; see [`crate::wire`]).
/// Every method takes `&self`: many callers allocate and send concurrently while one
/// task receives.
pub trait Connection: Send + Sync + 'static {
    /// Room for exactly one frame of the length given to [`Connection::alloc`].
    type SendBuf: BufMut + Send + 'static;
    /// A received frame. Holding it holds transport resources (an RDMA receive slot).
    type RecvBuf: Deref<Target = [u8]> + Send + 'static;

    /// Reserves room for one frame of `len` bytes, waiting for flow-control credit or
    /// ring space when there is none. The caller writes exactly `len` bytes.
    ///
    /// # Errors
    /// [`TransportError::TooLarge`] if `len` exceeds the transport's maximum frame,
    /// [`TransportError::Closed`] if the connection is gone.
    fn alloc(
        &self,
        len: usize,
    ) -> impl Future<Output = Result<Self::SendBuf, TransportError>> + Send;

    /// Queues a filled buffer for transmission. Returns once the transport owns it (not
    /// necessarily once the peer has it).
    fn send(&self, frame: Self::SendBuf)
        -> impl Future<Output = Result<(), TransportError>> + Send;

    /// The next complete frame, or `Ok(None)` when the peer closed the connection cleanly.
    ///
    /// Must be cancel-safe: dropping the future loses no bytes. Only one task calls it at a
    /// time. A frame whose declared payload exceeds the transport's maximum is delivered as
    /// its header alone with [`Flags::DISCARDED`](crate::wire::Flags::DISCARDED) set and
    /// its body skipped, so that the runtime can answer it with `RESOURCE_EXHAUSTED`.
    fn recv(&self) -> impl Future<Output = Result<Option<Self::RecvBuf>, TransportError>> + Send;

    /// Complete frames that have already arrived, without waiting: appends up to `max` of
    /// them to `out`, in order, as consecutive [`Connection::recv`] calls would return
    /// them. A receiver drains a run of frames this way after one `recv` and handles it
    /// as a whole (one lookup, one lock and one wake-up per stream and run rather than
    /// per frame). Errors and the end of the stream are left for `recv` to report. Same
    /// caller rules as `recv`; the default appends nothing.
    fn recv_ready(&self, out: &mut Vec<Self::RecvBuf>, max: usize) {
        let _ = (out, max);
    }

    /// As [`Connection::recv_ready`], but a run of small stream messages (at least two
    /// plain `Message` frames back to back, see [`crate::wire::message_run`]) that comes
    /// next is returned whole, as one buffer, rather than as a buffer per frame: the
    /// frames before it are appended to `out` and the run follows them. For transports
    /// whose frames lie back to back in their memory (a byte stream's read buffer): the
    /// receiver then splits the messages out as their stream is read, with no buffer or
    /// queue entry per message on the way. Every frame of a run must be whole, plain and
    /// within the transport's maximum message size (the receiver checks the first two
    /// and trusts the last). The default is `recv_ready` and no run.
    fn recv_ready_run(&self, out: &mut Vec<Self::RecvBuf>, max: usize) -> Option<Bytes> {
        self.recv_ready(out, max);
        None
    }

    /// Starts closing the connection: pending and future `recv`/`send` calls fail or
    /// return `None` soon after.
    fn close(&self);

    /// Closes gracefully and resolves once the close is done: what was sent has been
    /// written out (or failed), so that a process may exit without losing its last
    /// frames. The default closes and resolves at once.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        self.close();
        std::future::ready(())
    }

    /// Lets go of a received frame so that the application may keep slices of it: the
    /// frame's memory as [`Bytes`], no longer counted against the transport's receive
    /// resources (an RDMA transport acknowledges the transfer at once), valid until the
    /// last slice is dropped. Returns the frame unchanged (`Err`) when keeping it would
    /// pin something scarce (a receive slot, a buffer shared with other frames) or when
    /// it is too small to be worth it: the runtime then copies its fields out. The
    /// default keeps nothing.
    fn keep(&self, frame: Self::RecvBuf) -> Result<Bytes, Self::RecvBuf> {
        Err(frame)
    }

    /// The smallest `bytes` field worth sending from where it lies rather than copying
    /// it into the frame ([`Connection::send_gathered`]), or `None` (the default) when the
    /// transport copies every frame into its own memory.
    fn gather_min(&self) -> Option<usize> {
        None
    }

    /// Sends one frame whose first bytes are in `head` and the rest in `tail`, in
    /// order, without copying `tail` (a gathered write). Only called when
    /// [`Connection::gather_min`] is `Some`; the default refuses.
    fn send_gathered(
        &self,
        head: Self::SendBuf,
        tail: Vec<Bytes>,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let _ = (head, tail);
        std::future::ready(Err(TransportError::Other(
            "this transport does not send gathered frames".into(),
        )))
    }

    /// How many complete frames one buffer from [`Connection::alloc`] may hold back to
    /// back, within [`Connection::gather_min`] bytes: the runtime then sends a run of
    /// small stream messages in one buffer (a byte stream writes them in one go; RDMA
    /// sends them as one batch message). The default is 1 (one frame per buffer).
    fn max_frames_per_buffer(&self) -> usize {
        1
    }

    /// Asks the transport to hand every received frame to `sink` from its own completion
    /// path instead of queueing it for [`Connection::recv`]: run to completion, one task
    /// hop less per frame. Returns `false` if the transport does not do this (the
    /// default); the caller then receives with `recv`. Once it returned `true`, `recv` is
    /// not called again, and `sink` gets every frame not yet received, then the end.
    fn push_to(&self, sink: Arc<dyn FrameSink<Self::RecvBuf>>) -> bool {
        let _ = sink;
        false
    }

    /// Waits for `done` by making the transport's progress from the calling task, for a
    /// short bounded time and without yielding: a caller alone on its connection then
    /// finds its response, and a server connection with nothing in flight its next
    /// request, without a task hop, a wake-up or a worker that sleeps and wakes (each
    /// of which costs system calls). `done` is asked between turns and becomes true once
    /// what the task waits for was delivered (to a call's response channel, or to
    /// [`Connection::recv_ready`]); the transport does this only where it polls its own
    /// completions (RDMA) and only when it can spare the poll.
    ///
    /// `others` says whether anyone else waits for frames on the connection. The
    /// transport asks it first, and spins only for a task alone; and once the spin ends,
    /// its own poller goes on for the others (and for the caller, if what it waited for
    /// did not come). Every waiter calls this before it waits, alone or not, so that the
    /// transport's poller knows it is needed. Returns whether `done` returned true. The
    /// default spins not at all and returns `false`.
    fn spin_until(&self, done: &mut dyn FnMut() -> bool, others: &dyn Fn() -> bool) -> bool {
        let _ = (done, others);
        false
    }

    /// Whether the transport charges each request's bytes to the connection's account
    /// (given in [`Connection::serving`]) itself, from its first byte until the call's
    /// final response is sent, so that the server does not charge them again (a
    /// translating transport knows them before the server does: a gRPC body as it
    /// arrives and inflates). The default is `false`: the server charges each request at
    /// its arrival.
    fn charges_requests(&self) -> bool {
        false
    }

    /// Called by a server before it reads the connection, with the methods it serves
    /// and the connection's account: a transport that translates another protocol's
    /// calls into frames (gRPC over HTTP/2) needs the methods to know how a call's
    /// request is framed, and charges what it holds for the server to the account
    /// ([`crate::account`]) before it allocates. The default ignores both.
    fn serving(&self, methods: Arc<dyn MethodKinds>, account: &crate::account::Account) {
        let _ = (methods, account);
    }

    /// Called by a client before it sends the request that opens a call of `method`: a
    /// transport that translates frames into another protocol's calls (gRPC over
    /// HTTP/2) needs the method's path and kind, which frames carry only as an id. The
    /// default ignores it.
    fn calling(&self, method: &crate::codegen::MethodDescriptor) {
        let _ = method;
    }

    /// A short description of the peer for logs, e.g. `tcp://127.0.0.1:4000`.
    fn peer(&self) -> String;

    /// The certificate chain the peer presented in a TLS handshake (DER, its own first),
    /// if the connection (or RDMA's side channel) runs under TLS and the peer presented
    /// one. The default is `None`.
    fn peer_certificates(&self) -> Option<Arc<[Bytes]>> {
        None
    }

    /// The peer's socket address, where it has one (TCP, and RDMA's side channel): the
    /// server groups connections by its IP address for
    /// [`ServerConfig::max_concurrent_calls_per_peer`](crate::ServerConfig::max_concurrent_calls_per_peer).
    /// The default is `None` (each connection counts as a peer of its own).
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }
}

/// The kinds of the methods a server serves, by wire id (see [`Connection::serving`]).
pub trait MethodKinds: Send + Sync + 'static {
    /// The kind of method `method_id`, or `None` if the server does not serve it.
    fn kind(&self, method_id: u32) -> Option<crate::codegen::MethodKind>;

    /// The id and kind of the method at `path` (`/package.Service/Method`), or `None`
    /// if the server serves no method of that name (a path whose id collides with a
    /// served method's is not that method).
    fn method(&self, path: &str) -> Option<(u32, crate::codegen::MethodKind)>;
}

/// Where a transport that runs to completion hands received frames (see
/// [`Connection::push_to`]).
pub trait FrameSink<B>: Send + Sync + 'static {
    /// A received frame. Called in arrival order, never concurrently, on the transport's
    /// completion path: it must not block or wait.
    fn frame(&self, frame: B);

    /// Frames that arrived together, in order (drained from `frames`): the receiver may
    /// handle them as one run (see [`Connection::recv_ready`]). The default hands each to
    /// [`FrameSink::frame`].
    fn frames(&self, frames: &mut Vec<B>) {
        for frame in frames.drain(..) {
            self.frame(frame);
        }
    }

    /// The connection ended, after the last frame: `Ok(())` when it closed cleanly, else
    /// why it failed. Called once.
    fn closed(&self, result: Result<(), TransportError>);
}

/// Accepts connections for a server.
pub trait Listener: Send + 'static {
    /// The connections it yields.
    type Conn: Connection;

    /// The next established connection. A failed handshake of one peer is logged by the
    /// transport and not returned: errors here are errors of the listener itself.
    fn accept(&mut self) -> impl Future<Output = Result<Self::Conn, TransportError>> + Send;

    /// The local address, as a URL (`tcp://127.0.0.1:4000`).
    fn local_addr(&self) -> String;

    /// Stops taking connections, at once, as a graceful shutdown begins: a socket
    /// listener closes its listening socket, so a client that dials after the server's
    /// GOAWAY is refused (or reaches the server that replaced this one) instead of being
    /// left in the kernel's backlog of a socket about to close, to be reset with its
    /// requests unread.
    ///
    /// Connections already established by then (queued, in the kernel's backlog, or in
    /// their handshake) are still yielded by [`accept`](Self::accept), which then fails
    /// with [`TransportError::Closed`]; the server serves them draining (GOAWAY at once,
    /// every request refused as not started), so their clients retry elsewhere.
    ///
    /// Returns whether this listener does so. The default does nothing and returns
    /// `false`: the server then drops the listener with whatever it holds.
    fn stop_accepting(&mut self) -> bool {
        false
    }
}

/// A transport failure. Calls on the connection fail with `UNAVAILABLE` carrying its text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The connection is closed.
    #[error("connection closed")]
    Closed,
    /// A socket or device operation failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The peer sent bytes that are not a valid frame.
    #[error("malformed frame: {0}")]
    Frame(#[from] FrameError),
    /// A frame larger than the configured maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Length asked for.
        len: usize,
        /// Configured maximum.
        max: usize,
    },
    /// The peer went silent past the keepalive timeout.
    #[error("peer silent for longer than {0:?}")]
    PeerSilent(std::time::Duration),
    /// The peer broke the transport's own protocol (a lie about lengths, credits, keys or
    /// tokens, a loan held past its timeout): the connection was closed.
    #[error("protocol violation by the peer: {0}")]
    Protocol(String),
    /// This process cannot pin the memory RDMA needs: its locked-memory limit
    /// (`RLIMIT_MEMLOCK`) is too low, or taken by what is pinned already. At connect, for
    /// the connection's rings (`auto://` falls back to TCP instead); on a connection up,
    /// for one large message's buffer (that call fails `RESOURCE_EXHAUSTED`, the
    /// connection goes on). The text says how to raise the limit.
    #[error(
        "RDMA needs {} KiB of locked memory and {} KiB are left of this process's \
         limit of {} KiB (RLIMIT_MEMLOCK): raise it (`ulimit -l unlimited`, Docker's \
         `--ulimit memlock=-1`, systemd's `LimitMEMLOCK=infinity`, or the `IPC_LOCK` \
         capability) or use tcp://",
        .needed / 1024,
        .left / 1024,
        .limit / 1024
    )]
    LockedMemory {
        /// Bytes asked for (at connect: the connection's reserve; for a message: what its
        /// buffer needs beyond what the connection had reserved).
        needed: u64,
        /// Bytes this process may still pin.
        left: u64,
        /// The soft `RLIMIT_MEMLOCK`, bytes.
        limit: u64,
    },
    /// A URL that names no endpoint (a channel's `connect`).
    #[error(transparent)]
    Endpoint(#[from] crate::ParseEndpointError),
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
}

/// A connection type that dials a URL by itself, with settings of its own (e.g. from the
/// environment): what [`Channel::connect`](crate::Channel::connect),
/// [`Channel::connect_lazy`](crate::Channel::connect_lazy) and the generated
/// `FooClient::connect` use. `rdmarpc_transport::AnyConnection` implements it for every
/// scheme.
pub trait Dial: Connection + Sized {
    /// Opens a connection to `endpoint`.
    ///
    /// # Errors
    /// The transport's: unreachable, refused, a failed handshake or bad settings.
    fn dial(
        endpoint: &crate::Endpoint,
    ) -> impl Future<Output = Result<Self, TransportError>> + Send;

    /// The settings of channels over connections dialled this way. The default is
    /// [`ClientConfig::default`](crate::ClientConfig::default).
    ///
    /// # Errors
    /// Settings that cannot be used (e.g. a malformed environment variable).
    fn client_config() -> Result<crate::ClientConfig, TransportError> {
        Ok(crate::ClientConfig::default())
    }
}
