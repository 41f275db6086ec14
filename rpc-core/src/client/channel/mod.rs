//! [`Channel`]: concurrent calls multiplexed over one [`Connection`], over a connection it
//! redials, or balanced over several endpoints.

use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::client::balance::Balancer;
use crate::client::target::EndpointStatus;
use crate::interceptor::Interceptor;
use crate::layer::ClientStack;
use crate::transport::Connection;
use crate::ClientConfig;

mod api;
mod build;
mod demux;
mod layers;
mod redial;
mod retry;
mod shared;
mod streams;
mod tasks;
mod unary;

use self::redial::Redial;
use self::retry::RetryThrottle;

pub(super) use self::redial::{dial_within, jitter, next_backoff, Dialing};
pub use self::redial::{MAX_REDIAL_BACKOFF, REDIAL_BACKOFF};
pub(super) use self::shared::{start, Shared};

/// A client's handle on one connection. Cheap to clone; every clone shares the
/// connection, and calls from all of them run concurrently over it, matched to their
/// responses by call id.
///
/// Creating a channel spawns its receive task on the current tokio runtime. The
/// connection closes when the last clone is dropped. A channel made with
/// [`Channel::with_reconnect`] dials a new connection for the first call after the old
/// one failed; calls that were in flight on the failed one end with `UNAVAILABLE` (they
/// are not retried: the server may have run them). After a failed dial, calls fail at
/// once (or wait, with [`ClientConfig::wait_for_ready`]) until the next dial, after an
/// exponential back-off from [`REDIAL_BACKOFF`] to [`MAX_REDIAL_BACKOFF`].
pub struct Channel<C: Connection> {
    inner: Arc<Inner<C>>,
    /// Runs on every request's head before it is sent ([`Channel::with_interceptor`]).
    interceptor: Option<Arc<dyn Interceptor>>,
    /// tower layers around unary calls ([`Channel::layer`]).
    stack: Option<ClientStack>,
}

impl<C: Connection> Clone for Channel<C> {
    fn clone(&self) -> Self {
        Channel {
            stack: self.stack.clone(),
            inner: self.inner.clone(),
            interceptor: self.interceptor.clone(),
        }
    }
}

impl<C: Connection> fmt::Debug for Channel<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.current();
        let in_flight = current.as_ref().map_or(0, |c| c.calls.lock().len());
        f.debug_struct("Channel")
            .field("peer", &self.peer())
            .field("in_flight", &in_flight)
            .field("reconnects", &self.inner.redial.is_some())
            .finish()
    }
}

/// What every clone shares: the current connection and how to replace it.
struct Inner<C: Connection> {
    /// The connection calls go to (`None` until a lazy channel's first dial). Read-locked
    /// for a pointer copy per call; written only when a (re)connect replaces it.
    current: RwLock<Option<Arc<Shared<C>>>>,
    redial: Option<Redial<C>>,
    /// A channel over several endpoints picks a connection per call here instead
    /// (`current` and `redial` are then unused).
    balancer: Option<Arc<Balancer<C>>>,
    /// Retries stop while calls fail too often ([`ClientConfig::retry`]).
    throttle: RetryThrottle,
    config: ClientConfig,
}

impl<C: Connection> Channel<C> {
    /// The endpoints of a balanced channel and their state (empty for a channel over one
    /// connection, and before a balanced channel's first call).
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.inner
            .balancer
            .as_ref()
            .map_or_else(Vec::new, |balancer| balancer.endpoints())
    }

    /// Whether a call that finds its connection gone or draining can go to another one.
    fn reconnects(&self) -> bool {
        self.inner.redial.is_some() || self.inner.balancer.is_some()
    }

    fn current(&self) -> Option<Arc<Shared<C>>> {
        self.inner.current.read().clone()
    }

    /// The connection's peer, for logs (`not connected` before a lazy channel's first
    /// call).
    pub fn peer(&self) -> String {
        if let Some(balancer) = &self.inner.balancer {
            return format!("balanced over {} endpoints", balancer.endpoints().len());
        }
        self.current()
            .map_or_else(|| "not connected".to_owned(), |c| c.conn.peer())
    }

    /// The current connection (e.g. to read transport counters): `None` before a
    /// [lazy](Channel::lazy) channel's first connection, and for a balanced channel.
    pub fn connection(&self) -> Option<Arc<C>> {
        self.current().map(|c| c.conn.clone())
    }

    /// Whether the current connection is gone (calls fail with `UNAVAILABLE`, unless the
    /// channel reconnects). `false` before a lazy channel's first connection.
    pub fn is_closed(&self) -> bool {
        self.current().is_some_and(|c| c.calls.lock().is_closed())
    }
}
