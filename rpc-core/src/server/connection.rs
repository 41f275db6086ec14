//! Serving one connection: read frames, admit calls, run handlers, send responses.
//!
//! Bounds (see `docs/limits.md`), from the connection's [`Account`]: unary calls running
//! (call permits) and streaming calls open (stream slots) per connection, per peer and
//! server-wide; the bytes of requests held, likewise; and per connection, decoded
//! requests waiting for a permit or slot (calls and bytes) and queued replies.
//! The reader never waits for a permit: it keeps reading CANCEL, PING, GOAWAY and EOF
//! while calls wait. It waits only for the transport (sending an inline response) or for
//! room in the bounded reply queue, which is backpressure on the peer that causes it.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_util::future::{AbortHandle, Abortable};
use futures_util::FutureExt;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::admission::{Admission, Admitted, Refused};
use super::lifetime::{self, Due, Lifetime};
use super::respond::Limits;
use super::respond::{respond, responder, Reply};
use super::Inner;
use crate::account::{Account, Charge, Resource};
use crate::control::ControlQueue;
use crate::outbound::{send_frame, send_message};
use crate::payload::{self, Inbound};
use crate::service::{
    BoxMessage, MethodKind, ServiceFuture, StreamRequest, StreamResponse, StreamingFuture,
};
use crate::stream::{self, Budget, Inbox, Outbox};
use crate::transport::Connection;
use crate::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN};
use crate::{Code, Metadata, Request, Response, Status, Streaming};

/// Handlers running for one connection, by call id, so that a CANCEL can drop them; with
/// a serial number, so that a finishing task removes its own entry and not that of a
/// later call that reused the id.
type Running = Arc<Mutex<HashMap<u64, (u64, AbortHandle)>>>;

/// The open streams of a connection's streaming calls, by call id: where the reader
/// puts the client's messages and window updates.
type Streams = Arc<Mutex<HashMap<u64, StreamEnds>>>;

#[derive(Default)]
struct StreamEnds {
    /// Which opening of the call id this is: the task of a cancelled call must not
    /// remove the streams of a later call that reused the id.
    serial: u64,
    /// The client's messages (client-streaming and bidirectional calls).
    inbox: Option<Arc<Inbox>>,
    /// The window for the server's messages (server-streaming and bidirectional calls).
    outbox: Option<Arc<Outbox>>,
}

impl StreamEnds {
    /// The call is over: the handler's request stream fails (if it still reads it) and
    /// its response stream stops.
    fn end(self, status: Status) {
        if let Some(inbox) = self.inbox {
            inbox.forget_window();
            inbox.fail(status.clone(), true);
        }
        if let Some(outbox) = self.outbox {
            outbox.close(status);
        }
    }
}

/// A decoded call waiting for its permit (unary) or slot (streaming).
struct Pending {
    call: ServiceFuture,
    span: tracing::Span,
    /// A request stream whose window is granted when the call starts.
    inbox: Option<Arc<Inbox>>,
    /// For a streaming call, the serial of its [`StreamEnds`].
    stream: Option<u64>,
    /// The request's bytes, charged at its arrival, held until the call's response is
    /// handed to the transport.
    bytes: Charge,
    /// The request's frame length: what the request's charge (the server's, or the
    /// transport's) stands for, and so what its response may hold without more.
    covered: usize,
}

/// A call permit or a stream slot of the connection's account (narrowest first, in
/// arrival order at each level: the accounts' pools serve waiters in turn).
type Acquire = Pin<Box<dyn Future<Output = Charge> + Send>>;

fn acquire(account: &Account, resource: Resource) -> Acquire {
    let account = account.clone();
    Box::pin(async move { account.charge(resource, 1).await })
}

/// What a call of `kind` holds while it runs: a unary call a call permit, a streaming
/// call a stream slot for as long as it is open.
fn slot_of(kind: MethodKind) -> Resource {
    match kind {
        MethodKind::Unary => Resource::Calls,
        _ => Resource::Streams,
    }
}

/// The calls waiting for a permit and the streams waiting for a slot, in two queues so
/// that neither waits behind the other.
struct Waiting {
    calls: Admission<Pending>,
    streams: Admission<Pending>,
}

impl Waiting {
    fn queue(&mut self, resource: Resource) -> &mut Admission<Pending> {
        match resource {
            Resource::Calls => &mut self.calls,
            _ => &mut self.streams,
        }
    }

    fn contains(&self, call_id: u64) -> bool {
        self.calls.contains(call_id) || self.streams.contains(call_id)
    }

    fn cancel(&mut self, call_id: u64) -> bool {
        self.calls.cancel(call_id) || self.streams.cancel(call_id)
    }

    fn expire(&mut self, now: Instant) -> Vec<Admitted<Pending>> {
        let mut expired = self.calls.expire(now);
        expired.extend(self.streams.expire(now));
        expired
    }

    fn next_deadline(&self) -> Option<Instant> {
        match (self.calls.next_deadline(), self.streams.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn drain(&mut self) -> Vec<Admitted<Pending>> {
        let mut all = self.calls.drain();
        all.extend(self.streams.drain());
        all
    }
}

/// Serves `conn` until the peer closes it, it fails, or a graceful shutdown completes.
pub(super) async fn serve<C: Connection>(inner: Arc<Inner>, conn: C) {
    let account = inner.ledger.account(conn.peer_addr());
    conn.serving(inner.clone(), &account);
    let conn = Arc::new(conn);
    let span = tracing::info_span!("connection", peer = %conn.peer());
    async move {
        tracing::debug!("connection open");
        let config = &inner.config;
        let (replies, replies_rx) = mpsc::channel(config.max_queued_replies.max(1));
        let control = Arc::new(ControlQueue::default());
        let responder =
            tokio::spawn(responder(conn.clone(), replies_rx, control.clone()).in_current_span());
        // Every handler task holds a clone of `alive`; `done` yields None once all are gone.
        let (alive, done) = mpsc::channel::<()>(1);
        let lifetime = Lifetime::new(
            lifetime::Settings {
                idle: config.max_connection_idle,
                age: config.max_connection_age,
                grace: config.max_connection_age_grace,
            },
            Instant::now(),
            std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                conn.peer(),
            ),
        );
        let last_end = lifetime.watches_idle().then(Arc::default);
        let mut state = State {
            account,
            lifetime,
            last_end,
            waiting: Waiting {
                calls: Admission::new(
                    config.max_queued_calls_per_connection,
                    config.max_queued_bytes_per_connection,
                ),
                streams: Admission::new(
                    config.max_queued_calls_per_connection,
                    config.max_queued_bytes_per_connection,
                ),
            },
            running: Arc::default(),
            streams: Arc::default(),
            control,
            budget: Arc::new(Budget::new(config.max_stream_bytes_per_connection)),
            alive: Some(alive),
            replies,
            started: 0,
            opened: 0,
            peer: Arc::new(crate::Peer::new(
                conn.peer(),
                conn.peer_addr(),
                conn.peer_certificates(),
            )),
            inner: inner.clone(),
            conn: conn.clone(),
        };
        let graceful = state.run(done).await;
        if !graceful {
            // The peer is gone: nobody can receive these handlers' responses.
            for (_, (_, handle)) in state.running.lock().drain() {
                handle.abort();
            }
            for (_, ends) in state.streams.lock().drain() {
                ends.end(Status::unavailable("connection closed"));
            }
            conn.close();
        }
        drop(state);
        // Let the responder send what the reader queued (refusals during a drain), but
        // not for long: a peer that stopped reading is the transport's to time out.
        if tokio::time::timeout(Duration::from_secs(5), responder)
            .await
            .is_err()
        {
            tracing::debug!("replies still queued at close");
        }
        // Awaited, not left to a drop: a server process exits once its connections are
        // done, and the transport's last writes (responses, refusals) must not die with it.
        if tokio::time::timeout(Duration::from_secs(5), conn.shutdown())
            .await
            .is_err()
        {
            tracing::debug!("the transport's close did not finish within 5 s");
        }
        tracing::debug!("connection closed");
    }
    .instrument(span)
    .await
}

/// One connection's serving state; owned by its reader loop.
struct State<C: Connection> {
    inner: Arc<Inner>,
    conn: Arc<C>,
    /// Where running calls' permits, open streams' slots and held bytes come from.
    account: Account,
    /// `max_connection_idle`, `max_connection_age` and its grace.
    lifetime: Lifetime,
    /// When a handler task last ended, if `max_connection_idle` is set (else no task
    /// reads the clock for it).
    last_end: Option<Arc<Mutex<Option<Instant>>>>,
    /// Decoded requests waiting for a permit or a slot.
    waiting: Waiting,
    running: Running,
    streams: Streams,
    /// Window updates for the client's request streams (sent by the responder).
    control: Arc<ControlQueue>,
    /// The windows the request streams may grant together.
    budget: Arc<Budget>,
    /// `None` while draining: no new handlers start.
    alive: Option<mpsc::Sender<()>>,
    replies: mpsc::Sender<Reply>,
    /// Handler tasks started so far (their serial numbers in `running`).
    started: u64,
    /// Streaming calls opened so far (their serial numbers in `streams`).
    opened: u64,
    /// Who is on the other end, for each request (`Request::peer`).
    peer: Arc<crate::Peer>,
}

/// What the loop learned from one wake-up.
enum Event<B> {
    Received(Result<Option<B>, crate::TransportError>),
    Admitted(Resource, Charge),
    Expiry,
    Lifetime,
    Shutdown(bool),
    HandlersDone,
    DrainTimeout,
}

impl<C: Connection> State<C> {
    /// The reader loop. Returns whether the connection ended gracefully (drained).
    async fn run(&mut self, mut done: mpsc::Receiver<()>) -> bool {
        let mut shutdown = self.inner.shutdown.subscribe();
        // A call permit for the first unary call waiting, a stream slot for the first
        // stream.
        let mut acquiring_call: Option<Acquire> = None;
        let mut acquiring_stream: Option<Acquire> = None;
        // Draining: when it started; whether the handlers are done; whether the client
        // acknowledged (its GOAWAY).
        let mut drain: Option<Instant> = None;
        let mut handlers_done = false;
        let mut acknowledged = false;
        loop {
            if drain.is_none() && *shutdown.borrow_and_update() {
                self.start_draining().await;
                let now = Instant::now();
                self.lifetime.draining(now);
                drain = Some(now);
            }
            if let Some(started) = drain {
                if handlers_done
                    && (acknowledged || started.elapsed() >= self.inner.config.drain_timeout)
                {
                    return true;
                }
            }
            if self.waiting.calls.len() > 0 && acquiring_call.is_none() {
                acquiring_call = Some(acquire(&self.account, Resource::Calls));
            }
            if self.waiting.streams.len() > 0 && acquiring_stream.is_none() {
                acquiring_stream = Some(acquire(&self.account, Resource::Streams));
            }
            let expiry = self.waiting.next_deadline();
            let drain_end = drain.map(|s| s + self.inner.config.drain_timeout);
            let lifetime_next = self.lifetime.next();
            let event = tokio::select! {
                received = self.conn.recv() => Event::Received(received),
                permit = async { acquiring_call.as_mut().expect("guarded").await }, if acquiring_call.is_some() => {
                    acquiring_call = None;
                    Event::Admitted(Resource::Calls, permit)
                }
                slot = async { acquiring_stream.as_mut().expect("guarded").await }, if acquiring_stream.is_some() => {
                    acquiring_stream = None;
                    Event::Admitted(Resource::Streams, slot)
                }
                () = sleep_until(expiry), if expiry.is_some() => Event::Expiry,
                () = sleep_until(lifetime_next), if lifetime_next.is_some() => Event::Lifetime,
                changed = shutdown.changed(), if drain.is_none() => Event::Shutdown(changed.is_ok()),
                _ = done.recv(), if drain.is_some() && !handlers_done => Event::HandlersDone,
                () = sleep_until(drain_end), if drain_end.is_some() && handlers_done => Event::DrainTimeout,
            };
            match event {
                Event::Received(Ok(Some(buf))) => match self.handle(buf, drain.is_some()).await {
                    Ok(Acknowledged(true)) => acknowledged = true,
                    Ok(Acknowledged(false)) => {}
                    Err(reason) => {
                        tracing::warn!("closing connection: {reason}");
                        return false;
                    }
                },
                Event::Received(Ok(None)) => {
                    tracing::debug!("peer closed the connection");
                    return false;
                }
                Event::Received(Err(e)) => {
                    tracing::warn!("closing connection: {e}");
                    return false;
                }
                Event::Admitted(resource, slot) => {
                    if let Some(admitted) = self.waiting.queue(resource).pop() {
                        self.start(admitted, slot).await;
                    }
                }
                Event::Expiry => {
                    self.touched();
                    for expired in self.waiting.expire(Instant::now()) {
                        self.end_stream(expired.call_id, "deadline exceeded");
                        let status = Status::deadline_exceeded(
                            "deadline exceeded while waiting for a concurrency permit",
                        );
                        self.reply(Reply::Status(expired.call_id, status, Flags::default()))
                            .await;
                    }
                }
                Event::Lifetime => {
                    let now = Instant::now();
                    let last_end = self.last_end.as_ref().and_then(|e| *e.lock());
                    match self.lifetime.check(now, self.busy(), last_end) {
                        Due::Nothing => {}
                        Due::Drain(why) => {
                            tracing::debug!("{why}: closing the connection gracefully");
                            self.start_draining().await;
                            self.lifetime.draining(now);
                            drain = Some(now);
                        }
                        Due::Close => {
                            tracing::debug!(
                                "max_connection_age_grace: closing with calls in flight"
                            );
                            return false;
                        }
                    }
                }
                Event::Shutdown(true) => {}
                Event::Shutdown(false) => return false,
                Event::HandlersDone => handlers_done = true,
                Event::DrainTimeout => {}
            }
        }
    }

    /// A call arrived or ended here (not in a handler task): the connection is not idle
    /// from now. Reads the clock only if `max_connection_idle` is set.
    fn touched(&mut self) {
        if self.lifetime.watches_idle() {
            self.lifetime.activity(Instant::now());
        }
    }

    /// Whether a call is waiting, running or open (the connection is not idle).
    fn busy(&self) -> bool {
        self.waiting.calls.len() > 0
            || self.waiting.streams.len() > 0
            || !self.running.lock().is_empty()
            || !self.streams.lock().is_empty()
    }

    /// Tells the client (GOAWAY), refuses the calls still waiting for a permit, and stops
    /// starting handlers.
    async fn start_draining(&mut self) {
        tracing::debug!("draining");
        self.alive = None;
        self.reply(Reply::Control(FrameKind::GoAway, 0)).await;
        for waiting in self.waiting.drain() {
            self.end_stream(waiting.call_id, "server is shutting down");
            self.refuse(
                waiting.call_id,
                Status::unavailable("server is shutting down"),
            )
            .await;
        }
    }

    /// Queues a reply; waits (stops reading) while the reply queue is full.
    async fn reply(&mut self, reply: Reply) {
        // The responder only ends when the queue closes, or when the transport is closed.
        let _ = self.replies.send(reply).await;
    }

    /// Answers a call that was not started with `status`, flagged as refused.
    async fn refuse(&mut self, call_id: u64, status: Status) {
        self.reply(Reply::Status(call_id, status, Flags::REFUSED))
            .await;
    }

    /// Handles one received frame.
    ///
    /// # Errors
    /// Why the connection must close (a malformed frame, a protocol violation).
    async fn handle(&mut self, buf: C::RecvBuf, draining: bool) -> Result<Acknowledged, String> {
        let frame = Frame::parse(&buf).map_err(|e| format!("malformed frame: {e}"))?;
        let header = frame.header;
        match header.kind {
            FrameKind::Request => {
                self.touched();
                // A request with a payload is offered to the application: kept, its
                // `bytes` fields are slices of the frame (the transport decides).
                let inbound = if header.payload_len > 0 && !frame.is_discarded() {
                    payload::keep(&*self.conn, buf)
                } else {
                    Inbound::Held(buf)
                };
                self.request(inbound, draining).await?
            }
            FrameKind::Message => self.message(buf)?,
            FrameKind::WindowUpdate => {
                let outbox = self
                    .streams
                    .lock()
                    .get(&header.call_id)
                    .and_then(|ends| ends.outbox.clone());
                if let Some(outbox) = outbox {
                    outbox.grant(header.credits)?;
                }
            }
            FrameKind::Cancel => {
                self.touched();
                let call_id = header.call_id;
                if let Some(ends) = self.streams.lock().remove(&call_id) {
                    ends.end(Status::cancelled("the client cancelled the call"));
                }
                if let Some((_, handle)) = self.running.lock().remove(&call_id) {
                    tracing::debug!(call_id, "call cancelled by the client");
                    handle.abort();
                } else if self.waiting.cancel(call_id) {
                    tracing::debug!(call_id, "waiting call cancelled by the client");
                }
            }
            FrameKind::Ping => {
                self.reply(Reply::Control(FrameKind::Pong, header.call_id))
                    .await
            }
            FrameKind::GoAway => return Ok(Acknowledged(true)),
            FrameKind::Response => return Err("client sent a response frame".into()),
            _ => {}
        }
        Ok(Acknowledged(false))
    }

    /// A message of a client's request stream: queued for the handler, within the window.
    ///
    /// # Errors
    /// The client broke the stream's rules.
    fn message(&mut self, buf: C::RecvBuf) -> Result<(), String> {
        let header = Frame::parse(&buf)
            .map_err(|e| format!("malformed frame: {e}"))?
            .header;
        let call_id = header.call_id;
        let inbox = self
            .streams
            .lock()
            .get(&call_id)
            .and_then(|ends| ends.inbox.clone());
        let Some(inbox) = inbox else {
            // The call ended (or never streamed requests): messages in flight are dropped.
            tracing::trace!(call_id, "message for a stream no longer open");
            return Ok(());
        };
        // Over the limit: skipped by the transport (DISCARDED) or declared so.
        let max = self.inner.config.max_message_size;
        if header.flags.contains(Flags::DISCARDED) || header.payload_len as usize > max {
            inbox.fail(
                Status::resource_exhausted(format!(
                    "request message of {} bytes exceeds the maximum of {max}",
                    header.payload_len
                )),
                true,
            );
            return Ok(());
        }
        if header.flags.contains(Flags::END_STREAM) {
            if header.payload_len != 0 {
                return Err(format!("stream {call_id:#x}: half-close with a payload"));
            }
            return inbox.close(None);
        }
        let payload = stream::take_payload(&*self.conn, buf, &header);
        inbox.push(header.frame_len(), payload)
    }

    /// Opens the streams of a streaming call and starts its handler: the future that
    /// sends its response stream and ends with its final response.
    ///
    /// # Errors
    /// A status to answer the call with at once.
    fn open_stream(
        &mut self,
        header: &Header,
        route: &super::router::Route,
        request: Request<crate::Payload<'_>>,
    ) -> Result<(ServiceFuture, Option<Arc<Inbox>>, u64), Status> {
        let call_id = header.call_id;
        let kind = route.method.kind;
        let ended = header.flags.contains(Flags::END_STREAM);
        let (metadata, payload, timeout) = request.into_parts();
        let mut ends = StreamEnds::default();
        let body = if kind.client_streams() {
            if header.payload_len != 0 {
                return Err(Status::invalid_argument(
                    "the request that opens a client stream carries no message",
                ));
            }
            let inbox = Inbox::with_budget(
                call_id,
                self.control.clone(),
                self.inner.config.stream_window,
                self.budget.clone(),
                self.account.clone(),
            );
            if ended {
                // An empty request stream: the client half-closed with its request.
                let _ = inbox.close(None);
            }
            ends.inbox = Some(inbox.clone());
            StreamRequest::Stream(Streaming::raw(inbox, Code::InvalidArgument))
        } else {
            if !ended {
                return Err(Status::invalid_argument(
                    "a server-streaming call's request must carry its message and END_STREAM",
                ));
            }
            StreamRequest::Message(payload)
        };
        if kind.server_streams() {
            ends.outbox = Some(Arc::new(Outbox::new(header.credits)));
        }
        let mut request = Request::from_parts(metadata, body, timeout);
        request.set_peer(self.peer.clone());
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| {
            route.service.call_streaming(route.index, request)
        }))
        .map_err(|_| panicked())?;
        let inbox = ends.inbox.clone();
        let outbox = ends.outbox.clone();
        self.opened += 1;
        ends.serial = self.opened;
        self.streams.lock().insert(call_id, ends);
        let max = self.inner.config.max_message_size;
        let call = drive(self.conn.clone(), call_id, kind, outbox, call, max);
        Ok((call, inbox, self.opened))
    }

    async fn request(
        &mut self,
        inbound: Inbound<C::RecvBuf>,
        draining: bool,
    ) -> Result<(), String> {
        let frame = Frame::parse(inbound.bytes()).map_err(|e| format!("malformed frame: {e}"))?;
        let header = frame.header;
        let call_id = header.call_id;
        // A stream's entry lives while its call waits or runs, so these two cover it.
        if self.waiting.contains(call_id) || self.running.lock().contains_key(&call_id) {
            return Err(format!(
                "call id {call_id:#x} is already in use by a running call"
            ));
        }
        if draining {
            self.refuse(call_id, Status::unavailable("server is shutting down"))
                .await;
            return Ok(());
        }
        let max = self.inner.config.max_message_size;
        let status = if frame.is_discarded() || header.payload_len as usize > max {
            Some(Status::resource_exhausted(format!(
                "request message of {} bytes exceeds the maximum of {max}",
                header.payload_len
            )))
        } else {
            None
        };
        let route = self.inner.router.get(header.method_id);
        let (status, route) = match (status, route) {
            (Some(status), _) => (Some(status), None),
            (None, None) => (
                Some(Status::unimplemented(format!(
                    "unknown method id {:#010x}",
                    header.method_id
                ))),
                None,
            ),
            (None, Some(route)) => (None, Some(route)),
        };
        let metadata = match Metadata::decode(frame.metadata) {
            Ok(metadata) => metadata,
            Err(e) => {
                let status = status.unwrap_or_else(|| Status::invalid_argument(e.to_string()));
                self.reply(Reply::Status(call_id, status, Flags::default()))
                    .await;
                return Ok(());
            }
        };
        if let Some(status) = status {
            self.reply(Reply::Status(call_id, status, Flags::default()))
                .await;
            return Ok(());
        }
        let route = route.expect("checked");
        let resource = slot_of(route.method.kind);
        // What the peer sent for it, metadata included (the decoded form is about as
        // large: strings and bytes fields own what the frame carried), charged before
        // its message is decoded (unless the transport charged it already): past the
        // connection's, the peer's or the server's bound the call is refused.
        let charged = match self.conn.charges_requests() {
            true => Ok(Charge::none()),
            false => self.account.try_charge(Resource::Bytes, header.frame_len()),
        };
        let bytes = match charged {
            Ok(bytes) => bytes,
            Err(exhausted) => {
                tracing::debug!(call_id, "request refused: {exhausted}");
                let status = Status::resource_exhausted(format!(
                    "a request of {} bytes: {exhausted}",
                    header.frame_len()
                ));
                self.reply(Reply::Status(call_id, status, Flags::default()))
                    .await;
                return Ok(());
            }
        };
        let timeout = (header.timeout_us > 0).then(|| Duration::from_micros(header.timeout_us));
        // The deadline runs from the request's arrival, whether it waits for a permit.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // DEBUG, not INFO: an enabled span costs every call the formatting of its fields
        // by the fmt subscriber (~5 % of a 64 B call's server CPU at c=64, perf-measured);
        // `RUST_LOG=rpc_core=debug` turns it on.
        let span = tracing::debug_span!("rpc", method = route.method.path, call_id);
        // Decodes the request from the borrowed buffer (the buffer is released after
        // this, also for a call that then waits for a permit), or from the kept frame.
        let mut request = Request::from_parts(metadata, inbound.payload(frame.payload), timeout);
        request.set_peer(self.peer.clone());
        let started = if route.method.kind == MethodKind::Unary {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                route.service.call(route.index, request)
            }))
            .map(|call| (call, None, None))
            .map_err(|_| panicked())
        } else {
            let route = route.clone();
            self.open_stream(&header, &route, request)
                .map(|(call, inbox, serial)| (call, inbox, Some(serial)))
        };
        let (call, inbox, stream) = match started {
            Ok(started) => started,
            Err(status) => {
                self.reply(Reply::Status(call_id, status, Flags::default()))
                    .await;
                return Ok(());
            }
        };
        let pending = Pending {
            call,
            span,
            inbox,
            stream,
            bytes,
            covered: header.frame_len(),
        };
        if self.waiting.queue(resource).len() == 0 {
            if let Ok(slot) = self.account.try_charge(resource, 1) {
                let admitted = Admitted {
                    call_id,
                    deadline,
                    call: pending,
                };
                self.start(admitted, slot).await;
                return Ok(());
            }
        }
        let bytes = header.frame_len();
        let queue = self.waiting.queue(resource);
        if let Err((refused, _)) = queue.push(call_id, bytes, deadline, pending) {
            self.end_stream(call_id, "refused");
            let why = match refused {
                Refused::Calls(n) => format!("{n} calls already wait on this connection"),
                Refused::Bytes(n) => {
                    format!("{n} bytes of requests already wait on this connection")
                }
            };
            self.refuse(
                call_id,
                Status::resource_exhausted(format!("too many calls in flight: {why}")),
            )
            .await;
        }
        Ok(())
    }

    /// Forgets the streams of call `call_id`, which ended.
    fn end_stream(&self, call_id: u64, why: &str) {
        if let Some(ends) = self.streams.lock().remove(&call_id) {
            ends.end(Status::cancelled(why));
        }
    }

    /// Runs an admitted call: answered here if its handler is done on its first poll,
    /// else on a task of its own that holds its permit (or slot) and its bytes.
    async fn start(&mut self, admitted: Admitted<Pending>, slot: Charge) {
        let Admitted {
            call_id,
            deadline,
            call:
                Pending {
                    mut call,
                    span,
                    inbox,
                    stream,
                    bytes,
                    covered,
                },
        } = admitted;
        let permits = (slot, bytes);
        let limits = Limits {
            max_message_size: self.inner.config.max_message_size,
            account: self.account.clone(),
            covered,
        };
        if deadline.is_some_and(|d| d <= Instant::now()) {
            drop(permits);
            self.end_stream(call_id, "deadline exceeded");
            let status = Status::deadline_exceeded("deadline exceeded before the call started");
            return self
                .reply(Reply::Status(call_id, status, Flags::default()))
                .await;
        }
        let Some(alive) = self.alive.clone() else {
            drop(permits);
            self.end_stream(call_id, "server is shutting down");
            return self
                .refuse(call_id, Status::unavailable("server is shutting down"))
                .await;
        };
        // A request stream gets its window now that its handler runs.
        if let Some(inbox) = inbox {
            inbox.grant_rest();
        }

        // Fast path: a unary handler that is done on its first poll (no I/O, no waiting)
        // is answered from here, saving a task spawn and a wake-up per call. A handler
        // that is not done is polled again by its own task below, which registers a real
        // waker (futures re-register on every poll, so the no-op waker here is never
        // relied on). Streaming calls always get their task: their sending must not run
        // on this reader.
        let first_poll = if stream.is_none() {
            let _entered = span.enter();
            let mut cx = Context::from_waker(Waker::noop());
            std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(&mut cx)))
        } else {
            Ok(Poll::Pending)
        };
        match first_poll {
            Ok(Poll::Ready(outcome)) => {
                respond(&*self.conn, call_id, outcome, &limits)
                    .instrument(span)
                    .await;
                drop(permits);
                return;
            }
            Ok(Poll::Pending) => {}
            Err(_) => {
                drop(permits);
                let _entered = span.enter();
                tracing::error!(call_id, "handler panicked");
                return respond(&*self.conn, call_id, Err(panicked()), &limits).await;
            }
        }

        let (handle, registration) = AbortHandle::new_pair();
        self.started += 1;
        let serial = self.started;
        self.running.lock().insert(call_id, (serial, handle));
        let conn = self.conn.clone();
        let running = self.running.clone();
        let streams = self.streams.clone();
        let last_end = self.last_end.clone();
        tokio::spawn(
            async move {
                let call = async move {
                    let call = AssertUnwindSafe(call).catch_unwind();
                    let outcome = match deadline {
                        Some(d) => tokio::time::timeout_at(d.into(), call)
                            .await
                            .unwrap_or_else(|_| Ok(Err(deadline_exceeded()))),
                        None => call.await,
                    };
                    outcome.unwrap_or_else(|_| {
                        tracing::error!(call_id, "handler panicked");
                        Err(panicked())
                    })
                };
                let outcome: Result<Result<Response<BoxMessage>, Status>, _> =
                    Abortable::new(call, registration).await;
                // Before the call leaves `running` (its id may be reused after that); only
                // its own entry (after a CANCEL the id may already be in use again).
                if let Some(serial) = stream {
                    let mut streams = streams.lock();
                    if streams.get(&call_id).is_some_and(|e| e.serial == serial) {
                        if let Some(ends) = streams.remove(&call_id) {
                            ends.end(Status::cancelled("the call ended"));
                        }
                    }
                }
                {
                    let mut running = running.lock();
                    if running.get(&call_id).is_some_and(|(s, _)| *s == serial) {
                        running.remove(&call_id);
                    }
                }
                if let Some(last_end) = last_end {
                    *last_end.lock() = Some(Instant::now());
                }
                if let Ok(outcome) = outcome {
                    respond(&*conn, call_id, outcome, &limits).await;
                }
                // Held until the response is handed to the transport: a client that does
                // not read cannot have more responses waiting than the call limit.
                drop(permits);
                drop(alive);
            }
            .instrument(span),
        );
    }
}

/// The future of a streaming call: runs the handler, then (when the server streams)
/// sends the response headers and each message as the client's window allows; ends with
/// the final response (the one message of a client-streaming call, else the trailers).
fn drive<C: Connection>(
    conn: Arc<C>,
    call_id: u64,
    kind: MethodKind,
    outbox: Option<Arc<Outbox>>,
    call: StreamingFuture,
    max_message_size: usize,
) -> ServiceFuture {
    use bytes::BufMut;
    use futures_util::StreamExt;
    Box::pin(async move {
        let (metadata, body, trailers) = call.await?.into_all_parts();
        let (mut stream, outbox) = match (body, outbox) {
            (StreamResponse::Message(message), None) => {
                let mut response = Response::from_parts(metadata, message);
                *response.trailers_mut() = trailers;
                return Ok(response);
            }
            (StreamResponse::Stream(stream), Some(outbox)) => (stream, outbox),
            _ => {
                return Err(Status::internal(format!(
                    "the handler answered a {kind:?} method with the wrong kind of response"
                )))
            }
        };
        metadata
            .check()
            .map_err(|e| Status::internal(format!("response metadata: {e}")))?;
        let unavailable = |e: crate::TransportError| match e {
            crate::TransportError::TooLarge { .. } => Status::resource_exhausted(e.to_string()),
            e => Status::unavailable(e.to_string()),
        };
        // The response headers: a response frame without END_STREAM.
        send_frame(
            &*conn,
            Header::new(FrameKind::Response, call_id),
            &metadata,
            |_| {},
        )
        .await
        .map_err(unavailable)?;
        let limit = max_message_size.min(u32::MAX as usize);
        let too_large = |len: usize| {
            Status::resource_exhausted(format!(
                "response message of {len} bytes exceeds the maximum of {limit}"
            ))
        };
        // Small messages that are ready together go out in one buffer where the
        // transport takes several frames per buffer: one queueing and one write (TCP) or
        // one batch message (RDMA) for a run of them, as HTTP/2 packs messages into DATA
        // frames.
        let max_frames = conn.max_frames_per_buffer();
        let batch_max = if max_frames > 1 {
            conn.gather_min().unwrap_or(BATCH_BYTES).min(BATCH_BYTES)
        } else {
            0
        };
        // A message pulled for a batch that it did not fit: the next one's first.
        let mut carry: Option<(BoxMessage, usize)> = None;
        loop {
            let (message, len) = match carry.take() {
                Some(carried) => carried,
                None => match stream.next().await {
                    Some(item) => {
                        let message = item?;
                        let len = message.encoded_len();
                        if len > limit {
                            return Err(too_large(len));
                        }
                        (message, len)
                    }
                    None => break,
                },
            };
            outbox.reserve(HEADER_LEN + len).await?;
            if HEADER_LEN + len >= batch_max {
                let header = Header::new(FrameKind::Message, call_id);
                send_message(&*conn, header, &Metadata::new(), &*message)
                    .await
                    .map_err(unavailable)?;
                continue;
            }
            let mut batch = vec![(message, len)];
            let mut bytes = HEADER_LEN + len;
            let mut end = None;
            // Whatever the stream has ready now, while the window and the batch allow:
            // the window read once, what the batch takes subtracted once.
            let mut window = outbox.window();
            let mut taken = 0;
            while batch.len() < max_frames && window > 0 {
                let mut cx = Context::from_waker(Waker::noop());
                match stream.as_mut().poll_next(&mut cx) {
                    Poll::Ready(Some(Ok(next))) => {
                        let len = next.encoded_len();
                        if len > limit {
                            end = Some(Err(too_large(len)));
                            break;
                        }
                        if bytes + HEADER_LEN + len >= batch_max {
                            carry = Some((next, len));
                            break;
                        }
                        window -= (HEADER_LEN + len) as i64;
                        taken += HEADER_LEN + len;
                        bytes += HEADER_LEN + len;
                        batch.push((next, len));
                    }
                    Poll::Ready(Some(Err(status))) => {
                        end = Some(Err(status));
                        break;
                    }
                    Poll::Ready(None) => {
                        end = Some(Ok(()));
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            outbox.take(taken);
            let mut buf = conn.alloc(bytes).await.map_err(unavailable)?;
            for (message, len) in &batch {
                let mut header = Header::new(FrameKind::Message, call_id);
                header.payload_len = *len as u32;
                buf.put_slice(&header.encode());
                message.encode_to(&mut buf);
            }
            conn.send(buf).await.map_err(unavailable)?;
            match end {
                Some(Ok(())) => break,
                Some(Err(status)) => return Err(status),
                None => {}
            }
        }
        Ok(Response::from_parts(trailers, Box::new(()) as BoxMessage))
    })
}

/// The largest run of small stream messages sent in one buffer.
const BATCH_BYTES: usize = 32 * 1024;

/// Whether a frame was the client's GOAWAY (it will send no more requests).
struct Acknowledged(bool);

fn panicked() -> Status {
    Status::internal("the handler panicked")
}

fn deadline_exceeded() -> Status {
    Status::deadline_exceeded("deadline exceeded")
}

/// Sleeps until `at`, or forever for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
