//! A connection's tasks: starting them, the receive loop, the control-frame sender and the
//! keepalive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::sync::Weak;
use std::time::Instant;

use parking_lot::Mutex;
use tracing::Instrument;

use super::receive::{dispatch_messages, dispatch_run, ended, Dispatch, MAX_RUN, MAX_TURNS};
use super::{Shared, Watcher};
use crate::client::calls::CallTable;
use crate::control::ControlQueue;
use crate::outbound::send_control_credits;
use crate::transport::Connection;
use crate::{ClientConfig, Status};

/// Starts the tasks of one connection.
pub(in crate::client) fn start<C: Connection>(
    conn: C,
    config: &ClientConfig,
    endpoint: Option<Arc<dyn Watcher>>,
) -> Arc<Shared<C>> {
    let control = Arc::new(ControlQueue::default());
    let conn = Arc::new(conn);
    let shared = Arc::new(Shared {
        conn: conn.clone(),
        calls: Mutex::new(CallTable::new()),
        control: control.clone(),
        heard: AtomicBool::new(false),
        endpoint,
    });
    // A first frame at once, as HTTP/2's preface: servers close sockets that stay
    // silent past their first-frame timeout, and a channel may make its first call late.
    control.ping(0);
    let weak = Arc::downgrade(&shared);
    let sink = Arc::new(Dispatch::new(weak.clone()));
    if !conn.push_to(sink) {
        tokio::spawn(
            receive_loop(conn, weak.clone()).instrument(tracing::debug_span!("channel-recv")),
        );
    }
    tokio::spawn(control_loop(weak.clone(), control));
    if let Some(interval) = config.keepalive_interval {
        tokio::spawn(keepalive_loop(weak, interval, config.keepalive_timeout));
    }
    shared
}

/// Receives frames and hands responses to their callers until the connection ends
/// (transports that do not run to completion; see [`Dispatch`] for those that do).
///
/// It holds the connection but only a weak reference to the channel's state, so dropping
/// the last [`Channel`] closes the connection, which ends this loop.
pub(super) async fn receive_loop<C: Connection>(conn: Arc<C>, shared: std::sync::Weak<Shared<C>>) {
    let mut run = Vec::new();
    let reason = loop {
        let received = conn.recv().await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        match received {
            Ok(Some(buf)) => {
                // The frames that arrived with it are handled as one run, and a run of
                // stream messages that follows them in one buffer.
                run.push(buf);
                if let Err(reason) = dispatch_ready(&*conn, &strong, &mut run) {
                    break reason;
                }
            }
            Ok(None) => break Status::unavailable("connection closed by peer"),
            Err(e) => break Status::unavailable(e.to_string()),
        }
    };
    if let Some(strong) = shared.upgrade() {
        ended(&strong, reason);
    }
    conn.close();
}

/// Hands on `run` and the frames that arrived after it: runs of frames and runs of
/// stream messages in one buffer, as the transport has them, a few turns' worth.
fn dispatch_ready<C: Connection>(
    conn: &C,
    shared: &Shared<C>,
    run: &mut Vec<C::RecvBuf>,
) -> Result<(), Status> {
    for _ in 0..MAX_TURNS {
        let messages = conn.recv_ready_run(run, MAX_RUN);
        if !run.is_empty() {
            dispatch_run(shared, run)?;
        }
        match messages {
            Some(messages) => dispatch_messages(shared, &messages)?,
            None => break,
        }
    }
    Ok(())
}

/// Sends control frames queued from synchronous contexts, until the channel's state is
/// dropped.
pub(super) async fn control_loop<C: Connection>(shared: Weak<Shared<C>>, queue: Arc<ControlQueue>) {
    while let Some(batch) = queue.next_batch().await {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        for control in batch {
            if let Err(e) = send_control_credits(&*strong.conn, control).await {
                tracing::debug!("control frame not sent: {e}");
            }
        }
    }
}

/// Pings the server while calls are in flight and it has been silent for `interval`;
/// fails the connection when nothing arrives within `timeout` of a ping.
pub(super) async fn keepalive_loop<C: Connection>(
    shared: Weak<Shared<C>>,
    interval: std::time::Duration,
    timeout: std::time::Duration,
) {
    let mut sequence = 0u64;
    let mut wait = interval;
    // When a frame was last seen; sampled every wake-up (a quarter interval at least).
    let mut last_heard = Instant::now();
    loop {
        tokio::time::sleep(wait).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if strong.calls.lock().is_closed() {
            return;
        }
        if strong.heard.swap(false, Ordering::Relaxed) {
            last_heard = Instant::now();
        }
        let silent = last_heard.elapsed();
        if strong.calls.lock().len() == 0 || silent < interval {
            wait = interval.saturating_sub(silent).max(interval / 4);
            continue;
        }
        sequence += 1;
        strong.control.ping(sequence);
        drop(strong);
        tokio::time::sleep(timeout).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if !strong.heard.swap(false, Ordering::Relaxed) {
            let status = Status::unavailable(format!(
                "the server did not answer a ping within {timeout:?}"
            ));
            tracing::warn!(peer = %strong.conn.peer(), "closing connection: {}", status.message());
            ended(&strong, status);
            return;
        }
        last_heard = Instant::now();
        wait = interval;
    }
}
