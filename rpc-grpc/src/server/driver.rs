//! The HTTP/2 connection's driver: accepts streams while the connection has room for
//! their calls, watches its progress and keepalive, answers rapid reset and GOAWAY, and
//! closes the socket lingering.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use h2::server::SendResponse;
use h2::RecvStream;
use http::Request;
use rdmarpc_core::account::Charge;
use rdmarpc_core::wire::FrameKind;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use super::call::call;
use super::rewind::Rewind;
use super::{Shared, ToServer};
use crate::frames::{control, set};
use crate::linger::{self, Returned};
use crate::progress::{Activity, Timers, Watched};

/// Runs the HTTP/2 connection: accepts calls (once the server told its methods) until
/// the client goes, the server closes, a graceful shutdown completes, or the connection
/// misbehaves (writes make no progress, a keepalive PING goes unanswered, rapid reset).
///
/// The connection's calls are futures this driver polls beside the HTTP/2 connection
/// (no task per call: a call's HTTP/2 work and the connection's I/O take turns on one
/// task, not hand each other over between threads). A stream is accepted only while
/// fewer than `max_concurrent_streams` of them are unfinished: a client that resets
/// streams frees HTTP/2's count at once, not the calls it started.
pub(super) async fn drive<T>(
    mut connection: h2::server::Connection<Watched<Returned<Rewind<T>>>, Bytes>,
    returned: oneshot::Receiver<Rewind<T>>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<ToServer>,
    activity: Arc<Activity>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let _ended = Ended(shared.clone());
    let mut goaway = shared.goaway.subscribe();
    let mut closed = shared.closed.subscribe();
    let mut calm = shared.calm.subscribe();
    if !ready_or_closed(&shared).await {
        return;
    }
    let config = &shared.config;
    let mut timers = Timers::new(config, activity, connection.ping_pong());
    let max_calls = config.max_concurrent_streams.max(1) as usize;
    let mut calls = FuturesUnordered::new();
    let mut going_away = false;
    // Whether the server's last frames are for the client to read (a GOAWAY with a
    // reason, the end of a graceful shutdown): then the socket is closed lingering.
    let mut linger = false;
    loop {
        let room = calls.len() < max_calls;
        tokio::select! {
            // In this order: the connection's end and timers (cheap to ask, and never
            // starved by a busy connection), then the calls, then HTTP/2 itself, so that
            // what the calls hand it goes out in one write for all of them (writes were
            // a quarter of a small call's server CPU).
            biased;
            () = set(&mut closed) => {
                connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                break;
            }
            () = set(&mut calm) => {
                tracing::debug!("HTTP/2 connection closed: the client resets the streams it opens");
                calm_down(&mut connection).await;
                linger = true;
                break;
            }
            () = set(&mut goaway), if !going_away => {
                going_away = true;
                go_away(&mut connection, &tx);
            }
            why = timers.closing() => {
                tracing::debug!("HTTP/2 connection closed: {why}");
                break;
            }
            Some(()) = calls.next(), if !calls.is_empty() => {}
            accepted = next_stream(&mut connection, room) => match accepted {
                // A stream that crossed the GOAWAY (opened during HTTP/2's graceful
                // shutdown, before the client knew): refused, so that the client sends
                // it again elsewhere. The server is no longer reading new calls.
                Some(Ok((_, mut respond))) if going_away => {
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                }
                Some(Ok((request, respond))) => {
                    calls.push(start_call(&shared, &tx, (request, respond)));
                }
                Some(Err(e)) => {
                    tracing::debug!("HTTP/2 connection ended: {e}");
                    break;
                }
                None => {
                    linger = going_away;
                    break;
                }
            },
        }
    }
    // The calls still open go with the connection (their streams are gone with it), and
    // so do their routes: the server's frames for them are dropped, not held.
    drop(calls);
    shared.calls.lock().clear();
    drop(connection);
    close(linger, returned).await;
    // The server sees the end once the calls and this sender are gone.
}

/// Closes the socket, lingering if the server's last frames are for the client to read.
async fn close<T: AsyncRead + AsyncWrite + Unpin>(
    linger: bool,
    returned: oneshot::Receiver<Rewind<T>>,
) {
    if let (true, Ok(io)) = (linger, returned.await) {
        linger::close(io, linger::LINGER).await;
    }
}

/// Tells the server the driver is done when it ends, returning or unwinding.
struct Ended(Arc<Shared>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.ended.send_replace(true);
    }
}

/// The future of an accepted call, polled by the driver. Built on the heap once: it
/// holds the call's whole state (about 2 KiB), which then never moves. A call whose
/// messages are compressed (either way) runs as a task of its own, which the future
/// waits for: inflating or deflating a large message must not hold up the
/// connection's other calls and its I/O. A call that panics ends alone, its stream
/// reset (dropped), as a task's would.
fn start_call(
    shared: &Arc<Shared>,
    tx: &mpsc::Sender<ToServer>,
    (request, respond): Accepted,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    shared.resets.lock().accepted();
    let call_id = shared.next_call.fetch_add(1, Ordering::Relaxed);
    let compressed = shared.config.send_compression.is_some()
        || request
            .headers()
            .get("grpc-encoding")
            .is_some_and(|v| v.as_bytes() != b"identity");
    let call = call(shared.clone(), tx.clone(), call_id, request, respond);
    if compressed {
        let task = tokio::spawn(Box::pin(call));
        return Box::pin(async move {
            if let Err(e) = task.await {
                tracing::error!(call_id, "gRPC call's task failed: {e}");
            }
        });
    }
    Box::pin(async move {
        if AssertUnwindSafe(Box::pin(call))
            .catch_unwind()
            .await
            .is_err()
        {
            tracing::error!(call_id, "gRPC call panicked");
        }
    })
}

/// Waits until the server told its methods (true) or closed the connection first.
async fn ready_or_closed(shared: &Shared) -> bool {
    let mut ready = shared.ready.subscribe();
    let mut closed = shared.closed.subscribe();
    tokio::select! {
        () = set(&mut ready) => true,
        () = set(&mut closed) => false,
    }
}

/// The server's graceful shutdown: HTTP/2 refuses new streams from here on and closes
/// once the open ones are done (the driver goes on polling it, which flushes their last
/// frames); the server is told GOAWAY, as if the client had acknowledged it (the refusal
/// of new streams is what it would acknowledge). Never waits.
fn go_away<T: AsyncRead + AsyncWrite + Unpin>(
    connection: &mut h2::server::Connection<T, Bytes>,
    tx: &mpsc::Sender<ToServer>,
) {
    connection.graceful_shutdown();
    let _ = tx.try_send((control(FrameKind::GoAway, 0), Charge::none()));
}

/// Answers rapid reset: GOAWAY `ENHANCE_YOUR_CALM`, flushed within a bound; the
/// connection closes after it.
async fn calm_down<T: AsyncRead + AsyncWrite + Unpin>(
    connection: &mut h2::server::Connection<T, Bytes>,
) {
    connection.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
    let flush = std::future::poll_fn(|cx| connection.poll_closed(cx));
    let _ = tokio::time::timeout(Duration::from_secs(1), flush).await;
}

/// A stream the client opened: its request and the handle of its response.
pub(super) type Accepted = (Request<RecvStream>, SendResponse<Bytes>);

/// The connection's next stream when `accept`; else drives the connection (its reads,
/// writes and PINGs) without taking one, resolving only when it ends.
pub(super) fn next_stream<T>(
    connection: &mut h2::server::Connection<T, Bytes>,
    accept: bool,
) -> impl std::future::Future<Output = Option<Result<Accepted, h2::Error>>> + '_
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    std::future::poll_fn(move |cx| {
        if accept {
            return connection.poll_accept(cx);
        }
        match connection.poll_closed(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    })
}
