//! Serving one connection: read frames, start handlers, send their responses.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::future::{AbortHandle, Abortable};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::Inner;
use crate::outbound::{send_control, send_frame, send_status};
use crate::transport::Connection;
use crate::wire::{Flags, Frame, FrameKind, Header};
use crate::{Metadata, Request, Status};

/// Handlers running for one connection, by call id, so that a CANCEL can drop them.
type Running = Arc<Mutex<HashMap<u64, AbortHandle>>>;

/// Serves `conn` until the peer closes it, it fails, or a graceful shutdown completes.
///
/// Loop order: a frame is parsed and routed and its handler spawned before the next
/// frame is read; the concurrency permit is taken before the handler starts, so a server
/// at its limit stops reading (the transport then pushes back on the client).
pub(super) async fn serve<C: Connection>(inner: Arc<Inner>, conn: C) {
    let conn = Arc::new(conn);
    let span = tracing::info_span!("connection", peer = %conn.peer());
    async move {
        tracing::debug!("connection open");
        let running: Running = Arc::default();
        // Every handler task holds a clone of `alive`; `done` yields None once all are gone.
        let (alive, mut done) = mpsc::channel::<()>(1);
        let mut alive = Some(alive);
        let mut shutdown = inner.shutdown.subscribe();
        let mut draining = false;
        let graceful = loop {
            if !draining && *shutdown.borrow_and_update() {
                draining = true;
                alive = None;
                let conn = conn.clone();
                tokio::spawn(async move { send_control(&*conn, FrameKind::GoAway, 0).await });
            }
            tokio::select! {
                received = conn.recv() => match received {
                    Ok(Some(buf)) => {
                        let ctx = Ctx { inner: &inner, conn: &conn, running: &running, alive: alive.as_ref() };
                        if let Err(reason) = ctx.handle(&buf).await {
                            tracing::warn!("closing connection: {reason}");
                            break false;
                        }
                    }
                    Ok(None) => {
                        tracing::debug!("peer closed the connection");
                        break false;
                    }
                    Err(e) => {
                        tracing::warn!("closing connection: {e}");
                        break false;
                    }
                },
                changed = shutdown.changed(), if !draining => {
                    if changed.is_err() { break false; }
                }
                _ = done.recv(), if draining => break true,
            }
        };
        if !graceful {
            // The peer is gone: nobody can receive these handlers' responses.
            for (_, handle) in running.lock().drain() {
                handle.abort();
            }
        }
        conn.close();
        tracing::debug!("connection closed");
    }
    .instrument(span)
    .await
}

/// What handling one frame needs.
struct Ctx<'a, C: Connection> {
    inner: &'a Arc<Inner>,
    conn: &'a Arc<C>,
    running: &'a Running,
    /// `None` while draining: no new handlers start.
    alive: Option<&'a mpsc::Sender<()>>,
}

impl<C: Connection> Ctx<'_, C> {
    /// Handles one received frame.
    ///
    /// # Errors
    /// Why the connection must close (a malformed frame).
    async fn handle(&self, buf: &[u8]) -> Result<(), String> {
        let frame = Frame::parse(buf).map_err(|e| format!("malformed frame: {e}"))?;
        let header = frame.header;
        match header.kind {
            FrameKind::Request => self.request(frame).await,
            FrameKind::Cancel => {
                if let Some(handle) = self.running.lock().remove(&header.call_id) {
                    tracing::debug!(call_id = header.call_id, "call cancelled by the client");
                    handle.abort();
                }
            }
            FrameKind::Ping => self.reply_later(FrameKind::Pong, header.call_id, None),
            FrameKind::Response => return Err("client sent a response frame".into()),
            _ => {}
        }
        Ok(())
    }

    async fn request(&self, frame: Frame<'_>) {
        let header = frame.header;
        let call_id = header.call_id;
        let Some(alive) = self.alive else {
            let status = Status::unavailable("server is shutting down");
            return self.reply_later(FrameKind::Response, call_id, Some(status));
        };
        let max = self.inner.config.max_message_size;
        if frame.is_discarded() || header.payload_len as usize > max {
            let status = Status::resource_exhausted(format!(
                "request message of {} bytes exceeds the maximum of {max}",
                header.payload_len
            ));
            return self.reply_later(FrameKind::Response, call_id, Some(status));
        }
        let Some(route) = self.inner.router.get(header.method_id) else {
            let status =
                Status::unimplemented(format!("unknown method id {:#010x}", header.method_id));
            return self.reply_later(FrameKind::Response, call_id, Some(status));
        };
        let metadata = match Metadata::decode(frame.metadata) {
            Ok(metadata) => metadata,
            Err(e) => {
                let status = Status::invalid_argument(e.to_string());
                return self.reply_later(FrameKind::Response, call_id, Some(status));
            }
        };
        let Ok(permit) = self.inner.limit.clone().acquire_owned().await else {
            return;
        };
        let timeout = (header.timeout_us > 0).then(|| Duration::from_micros(header.timeout_us));
        // Decodes the request from the borrowed buffer; the buffer is released after this.
        let mut call = route.service.call(
            route.index,
            Request::from_parts(metadata, frame.payload, timeout),
        );
        let span = tracing::info_span!("rpc", method = route.method.path, call_id);

        // Fast path: a handler that is done on its first poll (no I/O, no waiting) is
        // answered from here, saving a task spawn and a wake-up per call. A handler that
        // is not done is polled again by its own task below, which registers a real waker
        // (futures re-register on every poll, so the no-op waker here is never relied on).
        let first_poll = {
            let _entered = span.enter();
            let mut cx = Context::from_waker(Waker::noop());
            call.as_mut().poll(&mut cx)
        };
        if let Poll::Ready(outcome) = first_poll {
            drop(permit);
            respond(&**self.conn, call_id, outcome)
                .instrument(span)
                .await;
            return;
        }

        let (handle, registration) = AbortHandle::new_pair();
        self.running.lock().insert(call_id, handle);

        let conn = self.conn.clone();
        let running = self.running.clone();
        let alive = alive.clone();
        tokio::spawn(
            async move {
                let call = async move {
                    match timeout {
                        Some(t) => tokio::time::timeout(t, call).await.unwrap_or_else(|_| {
                            Err(Status::deadline_exceeded(format!(
                                "deadline of {t:?} exceeded"
                            )))
                        }),
                        None => call.await,
                    }
                };
                let outcome = Abortable::new(call, registration).await;
                running.lock().remove(&call_id);
                drop(permit);
                if let Ok(outcome) = outcome {
                    respond(&*conn, call_id, outcome).await;
                }
                drop(alive);
            }
            .instrument(span),
        );
    }
}

/// Sends a handler's outcome: the response message, or its status.
async fn respond<C: Connection>(
    conn: &C,
    call_id: u64,
    outcome: Result<crate::Response<crate::service::BoxMessage>, Status>,
) {
    let sent = match outcome {
        Ok(response) => {
            let (metadata, message) = response.into_parts();
            let mut header = Header::new(FrameKind::Response, call_id);
            header.flags = Flags::END_STREAM;
            header.payload_len = message.encoded_len() as u32;
            send_frame(conn, header, &metadata, |buf| message.encode_to(buf)).await
        }
        Err(status) => {
            tracing::debug!(code = %status.code(), "call failed: {}", status.message());
            send_status(conn, call_id, &status).await
        }
    };
    if let Err(e) = sent {
        tracing::debug!("response not sent: {e}");
    }
}

impl<C: Connection> Ctx<'_, C> {
    /// Sends a control frame or a failed response from its own task, so that the reader
    /// never waits for send credit.
    fn reply_later(&self, kind: FrameKind, call_id: u64, status: Option<Status>) {
        let conn = self.conn.clone();
        tokio::spawn(async move {
            let sent = match status {
                Some(status) => {
                    tracing::debug!(call_id, code = %status.code(), "{}", status.message());
                    send_status(&*conn, call_id, &status).await
                }
                None => send_control(&*conn, kind, call_id).await,
            };
            if let Err(e) = sent {
                tracing::debug!("frame not sent: {e}");
            }
        });
    }
}
