//! Reconnecting: one dial at a time, its failure remembered with an exponential,
//! jittered back-off, so that many callers make no connect storm.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::client::connection::start;
use crate::client::connection::Shared;
use crate::client::dial::{dial_within, jitter, next_backoff, Dialing, REDIAL_BACKOFF};
use crate::transport::{Connection, TransportError};
use crate::{ClientConfig, Status};

pub(super) struct Redial<C: Connection> {
    /// The connection calls go to (`None` until a lazy channel's first dial). Read-locked
    /// for a pointer copy per call; written only when a (re)connect replaces it.
    current: RwLock<Option<Arc<Shared<C>>>>,
    dial: Box<dyn Fn() -> Dialing<C> + Send + Sync>,
    /// One dial at a time, held by the dial's task; callers that find it under way wait
    /// for its result.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The last dial failure: until its `retry_at`, calls fail with its status (or wait,
    /// with [`ClientConfig::wait_for_ready`]) instead of dialing again, so that many
    /// callers make no connect storm.
    last_failure: Mutex<Option<DialFailure>>,
}

impl<C: Connection> Redial<C> {
    /// Redials with `dial`.
    pub(super) fn new<F, Fut>(dial: F) -> Redial<C>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        Redial {
            current: RwLock::new(None),
            dial: Box::new(move || Box::pin(dial()) as Dialing<C>),
            lock: Arc::new(tokio::sync::Mutex::new(())),
            last_failure: Mutex::new(None),
        }
    }
}

#[derive(Clone)]
pub(super) struct DialFailure {
    retry_at: Instant,
    backoff: std::time::Duration,
    status: Status,
}

impl<C: Connection> Redial<C> {
    /// The connection calls go to, if it was dialled.
    pub(super) fn current(&self) -> Option<Arc<Shared<C>>> {
        self.current.read().clone()
    }

    /// Makes `shared` the connection calls go to.
    pub(super) fn replace(&self, shared: Arc<Shared<C>>) {
        *self.current.write() = Some(shared);
    }

    /// The connection calls go to, dialled first if there is none or it failed or
    /// drains (calls in flight on a draining connection finish there).
    pub(super) async fn ready(
        self: &Arc<Self>,
        config: &ClientConfig,
    ) -> Result<Arc<Shared<C>>, Status> {
        if let Some(current) = self.current().filter(|c| c.usable()) {
            return Ok(current);
        }
        loop {
            // Held by whoever dials (the dial task below), so callers that find a dial
            // under way wait for its outcome here.
            let one_at_a_time = self.lock.clone().lock_owned().await;
            let current = self.current();
            if let Some(current) = current.as_ref().filter(|c| c.usable()) {
                return Ok(current.clone()); // someone else (re)connected meanwhile
            }
            let failed = self.last_failure.lock().clone();
            if let Some(failure) = &failed {
                let left = failure.retry_at.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    if !config.wait_for_ready {
                        return Err(failure.status.clone());
                    }
                    drop(one_at_a_time);
                    tokio::time::sleep(left).await;
                    continue;
                }
            }
            match &current {
                Some(current) => tracing::info!(peer = %current.conn.peer(), "reconnecting"),
                None => tracing::debug!("connecting (first call of a lazy channel)"),
            }
            // The dial runs in a task of its own, which records its outcome: a caller
            // whose deadline passes (or that is cancelled) mid-dial does not abort it, so
            // a dial slower than every call's deadline still connects, and a failure
            // still starts the back-off.
            let (redial, config_of_dial) = (self.clone(), config.clone());
            let reconnect = current.is_some();
            let dial = tokio::spawn(async move {
                let _one_at_a_time = one_at_a_time;
                redial
                    .dial_and_record(&config_of_dial, failed, reconnect)
                    .await
            });
            match dial.await {
                Ok(Ok(fresh)) => return Ok(fresh),
                Ok(Err(status)) if !config.wait_for_ready => return Err(status),
                Ok(Err(_)) => {} // the next turn waits out the back-off
                Err(e) => return Err(Status::internal(format!("the dial task failed: {e}"))),
            }
        }
    }

    /// Dials (within the connect timeout) and records the outcome: the new connection as
    /// the current one, or the failure and the next back-off (after `failed`, the
    /// previous failure, if any).
    async fn dial_and_record(
        &self,
        config: &ClientConfig,
        failed: Option<DialFailure>,
        reconnect: bool,
    ) -> Result<Arc<Shared<C>>, Status> {
        let dialed = dial_within(config.connect_timeout, (self.dial)()).await;
        match dialed {
            Ok(conn) => {
                let fresh = start(conn, config, None);
                self.replace(fresh.clone());
                *self.last_failure.lock() = None;
                Ok(fresh)
            }
            Err(e) => {
                let status = if reconnect {
                    Status::unavailable(format!("reconnecting failed: {e}"))
                } else {
                    Status::unavailable(format!("connecting failed: {e}"))
                };
                let backoff = failed.map_or(REDIAL_BACKOFF, |f| next_backoff(f.backoff));
                tracing::debug!(?backoff, "dial failed: {e}");
                *self.last_failure.lock() = Some(DialFailure {
                    retry_at: Instant::now() + jitter(backoff),
                    backoff,
                    status: status.clone(),
                });
                Err(status)
            }
        }
    }
}
