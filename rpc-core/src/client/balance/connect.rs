//! Keeping an endpoint connected: dials with back-off and jitter, and watches the
//! connection it made.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{AbortHandle, Abortable};

use super::endpoint::{Health, Phase};
use super::health::watch_health;
use super::{DialFn, Sub};
use crate::client::connection::start;
use crate::client::dial::{dial_within, jitter, next_backoff, REDIAL_BACKOFF};
use crate::transport::Connection;
use crate::{ClientConfig, Status};

/// Keeps `sub` connected until it is stopped: dials, watches health if asked, waits for
/// the connection to end or drain, and dials again, with back-off after failures.
pub(super) async fn keep_connected<C: Connection>(
    sub: Arc<Sub<C>>,
    dial: DialFn<C>,
    config: ClientConfig,
) {
    let state = &sub.state;
    let mut backoff: Option<Duration> = None;
    loop {
        state.set_phase(Phase::Connecting);
        let dialed = dial_within(config.connect_timeout, dial(&sub.endpoint)).await;
        let conn = match dialed {
            Ok(conn) => conn,
            Err(e) => {
                let wait = backoff.map_or(REDIAL_BACKOFF, next_backoff);
                backoff = Some(wait);
                tracing::debug!(endpoint = %sub.endpoint, ?wait, "dial failed: {e}");
                *state.last_error.lock() = Some(Status::unavailable(format!(
                    "connecting to {} failed: {e}",
                    sub.endpoint
                )));
                state.set_phase(Phase::Failed);
                tokio::time::sleep(jitter(wait)).await;
                continue;
            }
        };
        let shared = start(conn, &config, Some(state.clone()));
        let connected_at = Instant::now();
        *sub.current.write() = Some(shared.clone());
        *state.last_error.lock() = None;
        *state.health_since.lock() = Some(connected_at);
        let health = config.balance.health_check_service.clone().map(|service| {
            let (abort, registration) = AbortHandle::new_pair();
            let watch = watch_health(
                Arc::downgrade(&shared),
                state.clone(),
                service,
                config.clone(),
            );
            tokio::spawn(Abortable::new(watch, registration));
            AbortOnDrop(abort)
        });
        state.set_phase(Phase::Ready);
        tracing::debug!(endpoint = %sub.endpoint, "endpoint connected");
        while shared.usable() {
            let event = state.conn_event.notified();
            tokio::pin!(event);
            event.as_mut().enable();
            if !shared.usable() {
                break;
            }
            event.await;
        }
        drop(health);
        drop(shared);
        // Calls in flight keep the connection they hold; no new one goes there.
        *sub.current.write() = None;
        state.set_health(if config.balance.health_check_service.is_some() {
            Health::Unknown
        } else {
            Health::Serving
        });
        // A connection that lived dials again at once; one that ended quickly counts as a
        // failed dial (a server that accepts and closes gets no dial storm).
        if connected_at.elapsed() >= Duration::from_secs(1) {
            backoff = None;
        } else {
            let wait = backoff.map_or(REDIAL_BACKOFF, next_backoff);
            backoff = Some(wait);
            *state.last_error.lock() = Some(Status::unavailable(format!(
                "the connection to {} ended at once",
                sub.endpoint
            )));
            state.set_phase(Phase::Failed);
            tokio::time::sleep(jitter(wait)).await;
        }
    }
}

pub(super) struct AbortOnDrop(pub(super) AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
