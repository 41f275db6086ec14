//! How a connection ends: shared by the connection, its reader and its writer.

use std::sync::Arc;

use parking_lot::Mutex;
use rdmarpc_core::TransportError;
use tokio::sync::{watch, Semaphore};

/// How a connection ends: shared by the connection, its reader and its writer.
#[derive(Debug)]
pub(crate) struct Closing {
    /// Set to true by `close` or a failure; wakes a pending `recv` and stops the writer.
    pub(crate) closed: watch::Sender<bool>,
    /// Why the connection failed, if it did (a write timeout, a write error).
    failure: Mutex<Option<String>>,
    /// Closed with the connection, so that senders waiting for queue room wake up.
    queued_bytes: Arc<Semaphore>,
}

impl Closing {
    /// A connection's end, `closed` once it comes; `queued_bytes` (the send queue's
    /// room) is closed with it.
    pub(crate) fn new(closed: watch::Sender<bool>, queued_bytes: Arc<Semaphore>) -> Closing {
        Closing {
            closed,
            failure: Mutex::new(None),
            queued_bytes,
        }
    }

    /// Closes the connection cleanly.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
        self.queued_bytes.close();
    }

    /// Closes the connection because of `reason`; `recv` then reports it.
    pub(crate) fn fail(&self, reason: String) {
        self.failure.lock().get_or_insert(reason);
        self.close();
    }

    /// The failure, if the connection failed.
    pub(crate) fn failure(&self) -> Option<TransportError> {
        self.failure
            .lock()
            .clone()
            .map(|r| TransportError::Io(std::io::Error::other(r)))
    }
}
