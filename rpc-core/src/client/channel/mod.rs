//! [`Channel`]: concurrent calls multiplexed over one [`Connection`], over a connection it
//! redials, or balanced over several endpoints.

use std::fmt;
use std::sync::Arc;

use crate::client::balance::Balancer;
use crate::client::balance::EndpointStatus;
use crate::client::connection::Shared;
use crate::interceptor::Interceptor;
use crate::layer::ClientStack;
use crate::transport::Connection;
use crate::{ClientConfig, Status};

mod api;
mod build;
mod layers;
mod redial;
mod retry;
mod streams;
mod unary;

use self::redial::Redial;
use self::retry::RetryThrottle;

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
/// exponential back-off from [`REDIAL_BACKOFF`](crate::REDIAL_BACKOFF) to
/// [`MAX_REDIAL_BACKOFF`](crate::MAX_REDIAL_BACKOFF).
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
            .field("reconnects", &self.reconnects())
            .finish()
    }
}

/// What every clone shares: where calls go, and the settings.
struct Inner<C: Connection> {
    mode: Mode<C>,
    /// Retries stop while calls fail too often ([`ClientConfig::retry`]).
    throttle: RetryThrottle,
    config: ClientConfig,
}

/// Where a channel's calls go.
enum Mode<C: Connection> {
    /// One connection, the channel's for its life (calls fail once it is gone).
    Single(Arc<Shared<C>>),
    /// A connection dialled on the first call and again whenever a call finds it failed
    /// or draining.
    Reconnecting(Arc<Redial<C>>),
    /// A connection per call, picked among several endpoints' connections.
    Balanced(Arc<Balancer<C>>),
}

impl<C: Connection> Channel<C> {
    /// The endpoints of a balanced channel and their state (empty for a channel over one
    /// connection, and before a balanced channel's first call).
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        match &self.inner.mode {
            Mode::Balanced(balancer) => balancer.endpoints(),
            Mode::Single(_) | Mode::Reconnecting(_) => Vec::new(),
        }
    }

    /// Whether a call that finds its connection gone or draining can go to another one.
    fn reconnects(&self) -> bool {
        !matches!(self.inner.mode, Mode::Single(_))
    }

    /// The connection of a channel over one connection (none before a lazy channel's
    /// first dial, nor on a balanced channel).
    fn current(&self) -> Option<Arc<Shared<C>>> {
        match &self.inner.mode {
            Mode::Single(shared) => Some(shared.clone()),
            Mode::Reconnecting(redial) => redial.current(),
            Mode::Balanced(_) => None,
        }
    }

    /// The connection calls go to, replacing a failed or draining one first if this
    /// channel reconnects. A balanced channel picks another connection than `avoid` if
    /// it has one usable.
    async fn ready(&self, avoid: Option<&Shared<C>>) -> Result<Arc<Shared<C>>, Status> {
        match &self.inner.mode {
            // Its failure shows when the call is inserted in its table.
            Mode::Single(shared) => Ok(shared.clone()),
            Mode::Reconnecting(redial) => redial.ready(&self.inner.config).await,
            Mode::Balanced(balancer) => balancer.pick(avoid).await,
        }
    }

    /// The connection's peer, for logs (`not connected` before a lazy channel's first
    /// call).
    pub fn peer(&self) -> String {
        if let Mode::Balanced(balancer) = &self.inner.mode {
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

/// Refuses a request whose message or metadata is over the channel's limits before
/// anything is sent.
fn check_request(
    config: &ClientConfig,
    payload_len: usize,
    metadata: &crate::Metadata,
) -> Result<(), Status> {
    let max = config.max_message_size.min(u32::MAX as usize);
    if payload_len > max {
        return Err(Status::resource_exhausted(format!(
            "request message of {payload_len} bytes exceeds the maximum of {max}"
        )));
    }
    metadata
        .check()
        .map_err(|e| Status::resource_exhausted(e.to_string()))
}
