//! One connection of a client: its state, shared by the channel, the call guards and the
//! tasks; its demultiplexer (`demux.rs`, sans-IO), the receive shell around it
//! (`receive.rs`) and its tasks (`tasks.rs`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::client::calls::CallTable;
use crate::control::ControlQueue;
use crate::transport::Connection;

pub(crate) mod demux;
mod receive;
mod tasks;

pub(in crate::client) use self::tasks::start;

/// Who hears of a connection's life and of its calls' outcomes: a balanced endpoint
/// (its connector redials, its ejection counts failures in a row).
pub(in crate::client) trait Watcher: Send + Sync {
    /// The connection ended or began draining.
    fn connection_changed(&self);
    /// A call on the connection ended with `code`.
    fn record(&self, code: crate::Code);
}

/// One connection's state, shared by the channel, the call guards and the receive task.
pub(in crate::client) struct Shared<C: Connection> {
    /// Also held by the receive task, which must not keep `Shared` alive.
    pub(in crate::client) conn: Arc<C>,
    /// Waiting calls. Locked briefly by callers (insert/remove) and by the receive task
    /// (complete); never held across an await.
    pub(in crate::client) calls: Mutex<CallTable<C::RecvBuf>>,
    /// Control frames (cancel, pong, ping, goaway) to send from contexts that cannot
    /// await (Drop, the receive loop). Bounded.
    pub(in crate::client) control: Arc<ControlQueue>,
    /// When the last frame arrived from the server (keepalive).
    /// Set by every received frame, cleared by the keepalive task (a store per frame, not
    /// a clock read).
    pub(in crate::client) heard: AtomicBool,
    /// The endpoint of a balanced channel this connection belongs to: told when the
    /// connection ends or drains, and of each call's outcome (passive ejection).
    pub(in crate::client) endpoint: Option<Arc<dyn Watcher>>,
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
