//! [`RdmaConnection`]: one RC queue pair with its rings, as an `rdmarpc_core::Connection`.
//!
//! Sending a frame of `len` bytes:
//! - `len <= eager limit`: `alloc` waits for a free send slot and a data credit, the frame
//!   is encoded into the slot right after the 16-byte prefix, `send` posts one SEND.
//! - otherwise (rendezvous): `alloc` reserves room in the lending limit, takes a lendable
//!   buffer from the connection's pool plus a slot and a credit; the frame is encoded into
//!   the buffer; `send` lends it (`Rings::lend`) and sends the descriptor (offset, key of
//!   the connection's own protection domain); the peer's read-done ends the loan and the
//!   buffer returns to the pool.
//!
//! Receiving: whoever polls the shared completion queue (`completion/`, `driver.rs`)
//! hands eager frames up in their receive slot (re-posted when the [`RecvBuf`] is
//! dropped) and pulls rendezvous frames with RDMA READ into a buffer of the local pool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rdmarpc_core::wire::HEADER_LEN;
use rdmarpc_core::{Connection, FrameSink, TransportError, MAX_METADATA_LEN};
use tokio::sync::{watch, Notify};

use crate::completion::{Membership, Spin};
use crate::counters::{Counters, RdmaCounters};
use crate::pool::LargePool;
use crate::protocol::session::{Close, Session};
use crate::protocol::MAX_BATCH;
use crate::verbs::{Rings, SendBuf, Target};
mod message;
mod push;
mod received;
mod send;
mod slots;
mod upward;

pub use self::message::MessageBuf;
pub use self::received::RecvBuf;
pub(crate) use self::received::{KeptBytes, Received, SlotHold};
pub(crate) use self::send::RegisteredSend;
pub(crate) use self::slots::Sends;
pub(crate) use self::upward::Receiving;

/// An established RDMA connection. Cheap to share: clones of the inner state are held by
/// its task, the ping task, a shared CQ's poller while it handles its completions and
/// every outstanding buffer.
#[derive(Debug)]
pub struct RdmaConnection {
    pub(crate) inner: Arc<Inner>,
}

/// State shared by the connection, its driver and its buffers.
///
/// Field order is drop order: the rings (and with them the QP) go first, so the NIC is
/// done with every buffer before the lent ones and the pools are released.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) rings: Rings,
    /// Its place on a shared completion queue (left after the QP is destroyed).
    pub(crate) completion: Membership,
    pub(crate) state: Mutex<State>,
    /// Woken when a send slot or credits come back, or the connection fails.
    pub(crate) space: Notify,
    /// Set once with the reason the connection ended.
    pub(crate) closed: watch::Sender<Option<Close>>,
    pub(crate) counters: Arc<Counters>,
    /// Where received frames go once the runtime asked for them to be pushed
    /// ([`Connection::push_to`]); until then they wait in the session for `recv`, which
    /// is woken here.
    pub(crate) receiving: Receiving,
    /// The first completion error after the end was logged.
    pub(crate) cause_logged: AtomicBool,
    /// Frames sent and received (also counted by the shared CQ, which spins for replies
    /// while more were sent than received there).
    pub(crate) frames: crate::completion::FrameCounts,
    pub(crate) tx_pool: LargePool,
    pub(crate) rx_pool: LargePool,
    /// Message buffers: lendable, never kept idle (each is registered for one use).
    pub(crate) msg_pool: LargePool,
    /// Registered memory of received frames the application keeps.
    pub(crate) kept: Arc<KeptBytes>,
    pub(crate) peer: String,
    /// The local device, port and GID, in words (`Context::describe`).
    pub(crate) route: String,
    /// The side channel's peer address.
    pub(crate) peer_addr: Option<std::net::SocketAddr>,
    /// The certificate chain the peer presented on the side channel under TLS.
    pub(crate) peer_certificates: Option<Arc<[bytes::Bytes]>>,
    /// Largest frame accepted or sent.
    pub(crate) max_frame: usize,
    pub(crate) eager_limit: usize,
    /// Bytes of a pushed frame one PIECE message carries (what fits a slot of either
    /// side after the prefix and the token).
    pub(crate) piece_len: usize,
    /// What the frames lent to the peer hold on a server's account.
    pub(crate) loan_charges: crate::sending::LoanCharges,
    /// The connection's rdma_cm id, destroyed after the queue pair (fields drop in
    /// order); on iWARP it holds the connection itself.
    #[allow(dead_code, reason = "held for its lifetime, never read")]
    pub(crate) cm: Mutex<crate::cm_service::Routed>,
}

/// Mutable state, under one short lock: the protocol session (a sans-IO core, its
/// fields its own) and the send half (`slots.rs`: free send slots, sends in flight, the
/// batch waiting for them; private fields).
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) session: Session<RecvBuf>,
    pub(crate) sends: Sends,
    /// READs no pinned buffer could be had for, waiting for bounce slots (in order;
    /// bounded by the session's READ budget).
    pub(crate) unpinned: std::collections::VecDeque<crate::protocol::session::Read>,
    /// Frames being pushed in pieces (`push.rs`).
    pub(crate) pushes: push::Pushes,
}

impl Inner {
    /// Counts a frame sent, here and on the shared CQ.
    pub(crate) fn frame_sent(&self) {
        self.frames.sent.fetch_add(1, Ordering::Relaxed);
        self.completion.shared().frame_sent();
    }

    /// Counts a frame received, here and on the shared CQ.
    pub(crate) fn frame_received(&self) {
        self.frames.received.fetch_add(1, Ordering::Relaxed);
        self.completion.shared().frame_received();
    }

    /// How the connection ended, for the runtime: `Ok` for a clean close.
    pub(crate) fn end_result(&self) -> Result<(), TransportError> {
        match &*self.closed.borrow() {
            Some(why) if !why.is_clean() => Err(why.into()),
            _ => Ok(()),
        }
    }

    pub(crate) fn close_error(&self) -> TransportError {
        match &*self.closed.borrow() {
            Some(why) => why.into(),
            None => TransportError::Closed,
        }
    }

    pub(crate) fn counters(&self) -> RdmaCounters {
        self.counters.snapshot(
            self.tx_pool.registrations() + self.rx_pool.registrations(),
            (self.rings.send_slots(), self.rings.recv_slots()),
            self.kept.held.load(Ordering::Relaxed) as u64,
        )
    }
}

impl RdmaConnection {
    /// This connection's transport counters.
    pub fn counters(&self) -> RdmaCounters {
        self.inner.counters()
    }

    /// The local RDMA device, port and GID this connection runs on, in words, e.g.
    /// `rxe0 port 1 (Ethernet), GID fd00::1 (RoCE v2, index 3)` or
    /// `mlx5_0 port 1 (InfiniBand, LID 4), GID fe80::88e9:a4ff:ff25:a462 (index 0)`.
    pub fn route(&self) -> &str {
        &self.inner.route
    }

    /// Largest frame that travels eagerly (by one SEND) on this connection.
    pub fn eager_limit(&self) -> usize {
        self.inner.eager_limit
    }

    /// A buffer of `len` bytes for a large message field, in this connection's
    /// registered memory (as eRPC's `alloc_msg_buffer`): fill it, [`MessageBuf::freeze`]
    /// it into `Bytes`, put those in a message's `bytes` field, and a call on this
    /// connection lends the field from where it lies instead of copying it. It counts
    /// against [`RdmaConfig::keep_bytes`](crate::RdmaConfig::keep_bytes) while held;
    /// beyond that (or if registering fails) the buffer is ordinary heap memory, and the
    /// field is copied when sent, as any other.
    ///
    /// Each buffer is registered for its own use and deregistered when the last of its
    /// `Bytes` is dropped (a registration per buffer: worth it for large fields), so that
    /// the peer, which may read it once it was lent, never sees anything else in it. Fill
    /// it only with what this connection's peer may see.
    pub fn message_buf(&self, len: usize) -> MessageBuf {
        MessageBuf::registered(&self.inner, len).unwrap_or_else(|| MessageBuf::heap(len))
    }

    /// [`Connection::push_to`] while nobody polls.
    fn push_waiting(&self, sink: Arc<dyn FrameSink<RecvBuf>>) -> bool {
        let Some(ended) = self.inner.receiving.set_sink(sink.clone()) else {
            return false;
        };
        // Outside the `upward` lock: the sink's work may drop this handle, whose drop
        // takes it.
        let waiting = self.inner.state.lock().session.take_ready();
        for frame in waiting {
            sink.frame(frame);
        }
        if ended {
            sink.closed(self.inner.end_result());
        }
        true
    }
}

impl Connection for RdmaConnection {
    type SendBuf = SendBuf;
    type RecvBuf = RecvBuf;

    async fn alloc(&self, len: usize) -> Result<SendBuf, TransportError> {
        self.inner.alloc(len).await
    }

    async fn send(&self, frame: SendBuf) -> Result<(), TransportError> {
        match frame.target {
            Target::Registered(send) => {
                if frame.filled != frame.cap {
                    return Err(TransportError::Other(format!(
                        "frame of {} bytes sent with {} written",
                        frame.cap, frame.filled
                    )));
                }
                self.inner.send(send)
            }
            Target::Bytes(_) => Err(TransportError::Other(
                "a TCP buffer sent on an RDMA connection".into(),
            )),
        }
    }

    /// Frames back to back in one eager buffer go as one batch message (the receiver
    /// splits and checks them as it does the batches this transport makes itself).
    fn max_frames_per_buffer(&self) -> usize {
        usize::from(MAX_BATCH)
    }

    /// Fields of more than a slot's worth: those that lie in a kept received frame are
    /// lent from where they are (the frame's first bytes inline in the descriptor);
    /// others are copied.
    fn gather_min(&self) -> Option<usize> {
        Some(self.inner.eager_limit + 1)
    }

    async fn send_gathered(
        &self,
        head: SendBuf,
        tail: Vec<bytes::Bytes>,
    ) -> Result<(), TransportError> {
        match head.target {
            Target::Registered(send) if head.filled == head.cap => {
                self.inner.send_gathered(send, tail).await
            }
            Target::Registered(_) => Err(TransportError::Other(format!(
                "frame head of {} bytes sent with {} written",
                head.cap, head.filled
            ))),
            Target::Bytes(_) => Err(TransportError::Other(
                "a TCP buffer sent on an RDMA connection".into(),
            )),
        }
    }

    /// Keeps the server's account: frames lent to the peer are charged to it until
    /// their read-done.
    fn serving(
        &self,
        methods: std::sync::Arc<dyn rdmarpc_core::MethodKinds>,
        account: &rdmarpc_core::account::Account,
    ) {
        let _ = methods;
        self.inner.loan_charges.serving(account);
    }

    /// Rendezvous frames (pulled by READ into a buffer of their own) while the
    /// connection's [`RdmaConfig::keep_bytes`](crate::RdmaConfig::keep_bytes) has room;
    /// never eager ones, which hold a receive slot (and with it the peer's credit).
    fn keep(&self, frame: RecvBuf) -> Result<bytes::Bytes, RecvBuf> {
        frame.keep()
    }

    /// The frames the session has in order, without polling the completion queue.
    fn recv_ready(&self, out: &mut Vec<RecvBuf>, max: usize) {
        let mut state = self.inner.state.lock();
        while out.len() < max {
            match state.session.poll_deliver() {
                Some(frame) => out.push(frame),
                None => break,
            }
        }
    }

    /// Takes the next frame the session has in order; when there is none, polls the
    /// completion queue itself (under load the next frame is usually there: no hop
    /// through the driver), and only then waits for the driver.
    async fn recv(&self) -> Result<Option<RecvBuf>, TransportError> {
        let inner = &self.inner;
        loop {
            let notified = inner.receiving.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up in between is not lost.
            notified.as_mut().enable();
            {
                let mut state = inner.state.lock();
                if let Some(frame) = state.session.poll_deliver() {
                    return Ok(Some(frame));
                }
                if state.session.is_closed() {
                    drop(state);
                    return inner.end_result().map(|()| None);
                }
            }
            match crate::driver::progress(inner) {
                Ok(0) => {
                    inner.completion.shared().wake_driver();
                    notified.await;
                }
                Ok(_) => {}
                Err(why) => inner.fail(why),
            }
        }
    }

    fn close(&self) {
        self.inner.close_gracefully();
    }

    fn push_to(&self, sink: Arc<dyn FrameSink<RecvBuf>>) -> bool {
        // Nobody polls meanwhile, so the frames waiting now go up before any later ones.
        self.inner
            .completion
            .shared()
            .exclusive(|| self.push_waiting(sink))
    }

    fn spin_until(&self, done: &mut dyn FnMut() -> bool, others: &dyn Fn() -> bool) -> bool {
        match self.inner.completion.shared().spin_until(done, others) {
            Spin::Ready => true,
            Spin::Found => {
                Counters::bump(&self.inner.counters.found_by_spin, 1);
                true
            }
            Spin::NotFound => false,
        }
    }

    fn calling(&self, method: &rdmarpc_core::codegen::MethodDescriptor) {
        // A stream's frames are nobody's to spin for: the driver polls for them.
        if method.kind != rdmarpc_core::codegen::MethodKind::Unary {
            self.inner.completion.shared().wake_driver();
        }
    }

    fn peer(&self) -> String {
        self.inner.peer.clone()
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.inner.peer_addr
    }

    fn peer_certificates(&self) -> Option<Arc<[bytes::Bytes]>> {
        self.inner.peer_certificates.clone()
    }
}

impl Drop for RdmaConnection {
    fn drop(&mut self) {
        self.inner.close_gracefully();
        // Frames nobody will receive hold the connection's state: let them go.
        let waiting = self
            .inner
            .receiving
            .receiver_gone(|| self.inner.state.lock().session.take_ready());
        drop(waiting);
    }
}

/// Frame-size limit for a payload limit.
pub(crate) fn max_frame(max_message_size: usize) -> usize {
    HEADER_LEN + MAX_METADATA_LEN + max_message_size
}
