//! Starting an admitted call: its handler on a task of its own, its response handed to
//! the responder, its permit and charges given back when it ends.

use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures_util::future::{AbortHandle, Abortable};
use futures_util::FutureExt;
use tracing::Instrument;

use super::waiting::Pending;
use super::State;
use crate::account::Charge;
use crate::server::admission::Admitted;
use crate::server::respond::Limits;
use crate::server::respond::{respond, Reply};
use crate::service::BoxMessage;
use crate::transport::Connection;
use crate::wire::Flags;
use crate::{Response, Status};

impl<C: Connection> State<C> {
    /// Runs an admitted call: answered here if its handler is done on its first poll,
    /// else on a task of its own that holds its permit (or slot) and its bytes.
    pub(super) async fn start(&mut self, admitted: Admitted<Pending>, slot: Charge) {
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

pub(super) fn panicked() -> Status {
    Status::internal("the handler panicked")
}

pub(super) fn deadline_exceeded() -> Status {
    Status::deadline_exceeded("deadline exceeded")
}
