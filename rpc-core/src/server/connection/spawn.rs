//! Starting an admitted call: its handler on a task of its own, its response handed to
//! the responder, its permit and charges given back when it ends.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures_util::future::{AbortHandle, AbortRegistration, Abortable};
use futures_util::FutureExt;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::streams::{Running, Streams};
use super::waiting::Pending;
use super::State;
use crate::account::Charge;
use crate::server::admission::Admitted;
use crate::server::respond::Limits;
use crate::server::respond::{respond, Reply};
use crate::service::{BoxMessage, ServiceFuture};
use crate::transport::Connection;
use crate::wire::Flags;
use crate::{Response, Status};

impl<C: Connection> State<C> {
    /// Answers a call that cannot start: its deadline passed while it waited (`expired`),
    /// or the server is shutting down.
    async fn not_started(&mut self, call_id: u64, expired: bool) {
        if expired {
            self.end_stream(call_id, "deadline exceeded");
            let status = Status::deadline_exceeded("deadline exceeded before the call started");
            self.reply(Reply::Status(call_id, status, Flags::default()))
                .await;
        } else {
            self.end_stream(call_id, "server is shutting down");
            self.refuse(call_id, Status::unavailable("server is shutting down"))
                .await;
        }
    }

    /// Runs an admitted call: answered here if its handler is done on its first poll,
    /// else on a task of its own that holds its permit (or slot) and its bytes. A call
    /// that `waited` for its permit may have outlived its deadline meanwhile; one that
    /// did not had at least a microsecond left when its request was read (its handler's
    /// timer ends it if that is all), so no clock is read for it.
    pub(super) async fn start(&mut self, admitted: Admitted<Pending>, slot: Charge, waited: bool) {
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
        let expired = waited && deadline.is_some_and(|d| d <= Instant::now());
        let alive = match self.alive.clone() {
            Some(alive) if !expired => alive,
            _ => {
                drop(permits);
                return self.not_started(call_id, expired).await;
            }
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
        let first_poll = match stream {
            None => poll_once(&mut call, &span),
            Some(_) => Ok(Poll::Pending),
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
        let task = CallTask {
            conn: self.conn.clone(),
            running: self.running.clone(),
            streams: self.streams.clone(),
            last_end: self.last_end.clone(),
            call_id,
            serial,
            stream,
            deadline,
            limits,
        };
        tokio::spawn(
            task.run(call, registration, permits, alive)
                .instrument(span),
        );
    }
}

pub(super) fn panicked() -> Status {
    Status::internal("the handler panicked")
}

pub(super) fn deadline_exceeded() -> Status {
    Status::deadline_exceeded("deadline exceeded")
}

/// What a call's own task needs of its connection once the reader has spawned it.
struct CallTask<C: Connection> {
    conn: Arc<C>,
    running: Running,
    streams: Streams,
    last_end: Option<Arc<Mutex<Option<Instant>>>>,
    call_id: u64,
    /// The serial of its entry in `running` (a later call may reuse the id).
    serial: u64,
    /// For a streaming call, the serial of its stream's ends.
    stream: Option<u64>,
    deadline: Option<Instant>,
    limits: Limits,
}

impl<C: Connection> CallTask<C> {
    /// Runs the handler to its end (its deadline, a CANCEL's abort, a panic), removes the
    /// call's entries, and hands its response to the transport before giving back its
    /// permit and bytes: a client that does not read cannot have more responses waiting
    /// than the call limit.
    async fn run(
        self,
        call: ServiceFuture,
        registration: AbortRegistration,
        permits: (Charge, Charge),
        alive: mpsc::Sender<()>,
    ) {
        let (call_id, deadline) = (self.call_id, self.deadline);
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
        self.leave();
        if let Ok(outcome) = outcome {
            respond(&*self.conn, call_id, outcome, &self.limits).await;
        }
        drop(permits);
        drop(alive);
    }

    /// Removes the call's own entries (after a CANCEL the id may already be in use again),
    /// before the id may be reused, and notes when it ended (the idle timer).
    fn leave(&self) {
        let (call_id, serial) = (self.call_id, self.serial);
        if let Some(stream_serial) = self.stream {
            let mut streams = self.streams.lock();
            if streams
                .get(&call_id)
                .is_some_and(|e| e.serial == stream_serial)
            {
                if let Some(ends) = streams.remove(&call_id) {
                    ends.end(Status::cancelled("the call ended"));
                }
            }
        }
        {
            let mut running = self.running.lock();
            if running.get(&call_id).is_some_and(|(s, _)| *s == serial) {
                running.remove(&call_id);
            }
        }
        if let Some(last_end) = &self.last_end {
            *last_end.lock() = Some(Instant::now());
        }
    }
}

/// Polls a unary handler once, under its span, with a no-op waker (its own task polls it
/// again with a real one if it is not done).
fn poll_once(
    call: &mut ServiceFuture,
    span: &tracing::Span,
) -> std::thread::Result<Poll<Result<Response<BoxMessage>, Status>>> {
    let _entered = span.enter();
    let mut cx = Context::from_waker(Waker::noop());
    std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(&mut cx)))
}
