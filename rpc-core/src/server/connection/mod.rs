//! Serving one connection: read frames, admit calls, run handlers, send responses.
//!
//! Bounds (see `docs/limits.md`), from the connection's [`Account`]: unary calls running
//! (call permits) and streaming calls open (stream slots) per connection, per peer and
//! server-wide; the bytes of requests held, likewise; and per connection, decoded
//! requests waiting for a permit or slot (calls and bytes) and queued replies.
//! The reader never waits for a permit: it keeps reading CANCEL, PING, GOAWAY and EOF
//! while calls wait. It waits only for the transport (sending an inline response) or for
//! room in the bounded reply queue, which is backpressure on the peer that causes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::account::{Account, Charge, Resource};
use crate::control::ControlQueue;
use crate::server::lifetime::{self, Due, Lifetime};
use crate::server::respond::{responder, Reply};
use crate::server::Inner;
use crate::stream::Budget;
use crate::transport::Connection;
use crate::wire::{Flags, FrameKind};
use crate::Status;
pub(crate) mod demux;
mod frames;
mod request;
mod spawn;
pub(crate) mod streams;
mod waiting;

use self::frames::Acknowledged;
use self::streams::{Running, Streams};
use self::waiting::{acquire, Acquire, Waiting};

/// Frames taken at once after a spin ([`State::spin_for_frames`]).
const MAX_SPUN: usize = 16;
/// Turns of the reader without a spin after frames came in a run.
const SPIN_PAUSE: u32 = 64;
/// Spins in a row that found frames, before the reader goes once through its `select!`.
const SPIN_TURNS: u32 = 16;

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
        let lifetime = lifetime_of(config, &conn.peer());
        let last_end = lifetime.watches_idle().then(Arc::default);
        let mut state = State {
            account,
            lifetime,
            last_end,
            waiting: Waiting::new(config),
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
            spin_pause: 0,
            spin_turns: 0,
        };
        let graceful = state.run(done).await;
        close(state, graceful, responder).await;
        tracing::debug!("connection closed");
    }
    .instrument(span)
    .await
}

/// A connection's lifetime policy from the server's settings; `peer` seeds its jitter.
fn lifetime_of(config: &crate::ServerConfig, peer: &str) -> Lifetime {
    let settings = lifetime::Settings {
        idle: config.max_connection_idle,
        age: config.max_connection_age,
        grace: config.max_connection_age_grace,
    };
    let seed =
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), peer);
    Lifetime::new(settings, Instant::now(), seed)
}

/// The connection's end, after its reader loop: unless the end was graceful the peer is
/// gone and its handlers are stopped; then the responder's queued replies and the
/// transport's last writes get a bounded time.
async fn close<C: Connection>(
    state: State<C>,
    graceful: bool,
    responder: tokio::task::JoinHandle<()>,
) {
    let conn = state.conn.clone();
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
    /// Turns left without a spin for frames ([`State::spin_for_frames`]).
    spin_pause: u32,
    /// Spins in a row that found frames (after `SPIN_TURNS`, a turn through `select!`).
    spin_turns: u32,
}

/// What a spin for frames came to ([`State::spin_for_frames`]).
enum Spun {
    /// No frame: wait as usual.
    Nothing,
    /// Frames came and were handled; whether one was the client's GOAWAY.
    Handled(bool),
    /// The connection ends.
    End,
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
        let mut spun = Vec::new();
        loop {
            if drain.is_none() && *shutdown.borrow_and_update() {
                drain = Some(self.begin_drain().await);
            }
            if let Some(started) = drain {
                if handlers_done
                    && (acknowledged || started.elapsed() >= self.inner.config.drain_timeout)
                {
                    return true;
                }
            }
            match self.spin_for_frames(&mut spun, drain.is_some()).await {
                Spun::Nothing => {}
                Spun::Handled(acknowledges) => {
                    acknowledged |= acknowledges;
                    continue;
                }
                Spun::End => return false,
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
                Event::Received(received) => match self.received(received, drain.is_some()).await {
                    Some(acknowledges) => acknowledged |= acknowledges,
                    None => return false,
                },
                Event::Admitted(resource, slot) => {
                    if let Some(admitted) = self.waiting.queue(resource).pop() {
                        self.start(admitted, slot, true).await;
                    }
                }
                Event::Expiry => self.expire_waiting().await,
                Event::Lifetime => {
                    if !self.lifetime_due(&mut drain).await {
                        return false;
                    }
                }
                Event::Shutdown(true) => {}
                Event::Shutdown(false) => return false,
                Event::HandlersDone => handlers_done = true,
                Event::DrainTimeout => {}
            }
        }
    }

    /// What the transport gave the reader: whether it was the client's GOAWAY, or `None`
    /// when the connection ends (the peer closed it, it failed, or a frame broke the
    /// protocol).
    async fn received(
        &mut self,
        received: Result<Option<C::RecvBuf>, crate::TransportError>,
        draining: bool,
    ) -> Option<bool> {
        match received {
            Ok(Some(buf)) => match self.handle(buf, draining).await {
                Ok(Acknowledged(acknowledges)) => Some(acknowledges),
                Err(violation) => {
                    tracing::warn!("closing connection: protocol violation: {violation}");
                    None
                }
            },
            Ok(None) => {
                tracing::debug!("peer closed the connection");
                None
            }
            Err(e) => {
                tracing::warn!("closing connection: {e}");
                None
            }
        }
    }

    /// Starts draining: GOAWAY, refusals of the calls waiting; when it started.
    async fn begin_drain(&mut self) -> Instant {
        self.start_draining().await;
        let now = Instant::now();
        self.lifetime.draining(now);
        now
    }

    /// Lets the transport poll for the next frames from this task while the connection
    /// has nothing in flight ([`Connection::spin_until`]): a request that comes soon is
    /// then read without a wake-up (nothing else needs the reader meanwhile: no call
    /// waits, runs or streams, no drain).
    ///
    /// Frames that come in runs (several at once: a client with many calls in flight)
    /// do not need it, and the transport's own poller then works beside this reader:
    /// after such a run the reader does not spin for its next `SPIN_PAUSE` turns.
    ///
    /// Replies queued for the responder go first (it runs once this reader yields), and
    /// after `SPIN_TURNS` spins in a row that found frames the reader yields its worker
    /// and goes through its `select!` (timers, permits, shutdown): a client that calls one
    /// call at a time without pause would otherwise keep it spinning for good. (A
    /// transport that does not spin never finds frames so: it never pays the yield.)
    async fn spin_for_frames(&mut self, spun: &mut Vec<C::RecvBuf>, draining: bool) -> Spun {
        let queued = self.replies.capacity() < self.replies.max_capacity();
        if draining || queued || self.busy() {
            return Spun::Nothing;
        }
        if self.spin_pause > 0 {
            self.spin_pause -= 1;
            return Spun::Nothing;
        }
        if self.spin_turns >= SPIN_TURNS {
            self.spin_turns = 0;
            tokio::task::yield_now().await;
            return Spun::Nothing;
        }
        let run = {
            let conn = &*self.conn;
            let run = std::cell::Cell::new(false);
            let mut ready = || {
                conn.recv_ready(spun, MAX_SPUN);
                run.set(spun.len() > 1);
                !spun.is_empty()
            };
            // A run says the transport's poller is needed beside this reader.
            conn.spin_until(&mut ready, &|| run.get());
            run.get()
        };
        if spun.is_empty() {
            self.spin_turns = 0;
            return Spun::Nothing;
        }
        self.spin_turns += 1;
        if run {
            self.spin_pause = SPIN_PAUSE;
        }
        let mut acknowledged = false;
        for buf in spun.drain(..) {
            match self.received(Ok(Some(buf)), false).await {
                Some(acknowledges) => acknowledged |= acknowledges,
                None => return Spun::End,
            }
        }
        Spun::Handled(acknowledged)
    }

    /// Answers the calls whose deadline passed while they waited for a permit or slot.
    async fn expire_waiting(&mut self) {
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

    /// What the connection's lifetime policy says now: drain (starting it, `drain` set),
    /// or close at once (false: the age's grace is over with calls in flight).
    async fn lifetime_due(&mut self, drain: &mut Option<Instant>) -> bool {
        let now = Instant::now();
        let last_end = self.last_end.as_ref().and_then(|e| *e.lock());
        match self.lifetime.check(now, self.busy(), last_end) {
            Due::Nothing => true,
            Due::Drain(why) => {
                tracing::debug!("{why}: closing the connection gracefully");
                self.start_draining().await;
                self.lifetime.draining(now);
                *drain = Some(now);
                true
            }
            Due::Close => {
                tracing::debug!("max_connection_age_grace: closing with calls in flight");
                false
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
}

/// Sleeps until `at`, or forever for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
