//! One connection's state, shared by the channel, the call guards and the tasks.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::Mutex;
use tracing::Instrument;

use super::demux::Dispatch;
use super::tasks::{control_loop, keepalive_loop, receive_loop};
use crate::client::balance::EndpointState;
use crate::client::calls::CallTable;
use crate::control::ControlQueue;
use crate::transport::Connection;
use crate::ClientConfig;

/// One connection's state, shared by the channel, the call guards and the receive task.
pub(in crate::client) struct Shared<C: Connection> {
    /// Also held by the receive task, which must not keep `Shared` alive.
    pub(in crate::client) conn: Arc<C>,
    /// Waiting calls. Locked briefly by callers (insert/remove) and by the receive task
    /// (complete); never held across an await.
    pub(in crate::client) calls: Mutex<CallTable<C::RecvBuf>>,
    /// Control frames (cancel, pong, ping, goaway) to send from contexts that cannot
    /// await (Drop, the receive loop). Bounded.
    pub(super) control: Arc<ControlQueue>,
    /// When the last frame arrived from the server (keepalive).
    /// Set by every received frame, cleared by the keepalive task (a store per frame, not
    /// a clock read).
    pub(super) heard: AtomicBool,
    /// The endpoint of a balanced channel this connection belongs to: told when the
    /// connection ends or drains, and of each call's outcome (passive ejection).
    pub(in crate::client) endpoint: Option<Arc<EndpointState>>,
}

impl<C: Connection> Shared<C> {
    /// Whether new calls may go here (not closed, not draining after a GOAWAY).
    pub(in crate::client) fn usable(&self) -> bool {
        let calls = self.calls.lock();
        !calls.is_closed() && !calls.is_draining()
    }

    /// Tells the balanced endpoint, if any, that the connection ended or drains.
    pub(super) fn changed(&self) {
        if let Some(endpoint) = &self.endpoint {
            endpoint.connection_changed();
        }
    }
}

impl<C: Connection> Drop for Shared<C> {
    fn drop(&mut self) {
        self.control.close();
        self.conn.close();
    }
}

/// Starts the tasks of one connection.
pub(in crate::client) fn start<C: Connection>(
    conn: C,
    config: &ClientConfig,
    endpoint: Option<Arc<EndpointState>>,
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
