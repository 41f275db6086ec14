//! The receive half's hand-off: where received frames go (the runtime's sink once it
//! asked for them to be pushed, else the session's queue, which `recv` takes from), and
//! the wake-up of a `recv` waiting for them. The fields are private: the connection
//! handle (`mod.rs`) and the driver (`driver.rs`) change them only through these methods.
//!
//! Lock order: this lock, then the state lock (the closures given to [`Receiving::end`]
//! and [`Receiving::receiver_gone`] take it); never the other way.

use std::sync::Arc;

use parking_lot::Mutex;
use rdmarpc_core::FrameSink;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use super::RecvBuf;

/// The runtime's sink for received frames.
pub(crate) type Sink = Arc<dyn FrameSink<RecvBuf>>;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Receiving {
    upward: Mutex<Upward>,
    /// Woken when frames wait for `recv`, or the connection ends.
    arrived: Notify,
}

/// The runtime's receive path, when it takes frames from the completion path.
#[derive(Default)]
struct Upward {
    sink: Option<Sink>,
    /// The driver finished: the sink, set now or later, has (or gets) the end.
    ended: bool,
    /// The connection handle is gone: nobody will receive (frames are dropped, not
    /// kept: a kept frame holds the connection's state alive).
    receiver_gone: bool,
}

impl std::fmt::Debug for Upward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upward")
            .field("sink", &self.sink.is_some())
            .field("ended", &self.ended)
            .field("receiver_gone", &self.receiver_gone)
            .finish()
    }
}

impl Receiving {
    /// Wakes a `recv` waiting for frames or for the end.
    pub(crate) fn wake(&self) {
        self.arrived.notify_one();
    }

    /// A wake-up to wait for (enable it before looking for frames, so that one in
    /// between is not lost).
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.arrived.notified()
    }

    /// The runtime's sink, if it asked for frames to be pushed, and whether the
    /// connection handle is gone (nobody will receive).
    pub(crate) fn sink(&self) -> (Option<Sink>, bool) {
        let upward = self.upward.lock();
        (upward.sink.clone(), upward.receiver_gone)
    }

    /// The runtime asks for frames to be pushed to `sink`. `None` if a sink is set
    /// already; else whether the driver has ended (the sink is then to be told).
    pub(crate) fn set_sink(&self, sink: Sink) -> Option<bool> {
        let mut upward = self.upward.lock();
        if upward.sink.is_some() {
            return None;
        }
        upward.sink = Some(sink);
        Some(upward.ended)
    }

    /// The driver finished. Returns the sink, to tell it the end (outside every lock:
    /// its work may drop the connection handle), and, if nobody will receive, what
    /// `take` takes of the frames waiting (to drop outside the lock).
    pub(crate) fn end<T>(&self, take: impl FnOnce() -> T) -> (Option<Sink>, Option<T>) {
        let mut upward = self.upward.lock();
        upward.ended = true;
        let waiting = upward.receiver_gone.then(take);
        (upward.sink.clone(), waiting)
    }

    /// The connection handle is gone: nobody will receive. Returns what `take` takes of
    /// the frames waiting (they hold the connection's state: drop them outside the lock).
    pub(crate) fn receiver_gone<T>(&self, take: impl FnOnce() -> T) -> T {
        let mut upward = self.upward.lock();
        upward.receiver_gone = true;
        take()
    }
}
