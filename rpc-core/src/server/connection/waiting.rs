//! Calls waiting for a call permit (unary) or a stream slot (streaming), in two queues
//! so that neither waits behind the other.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::account::{Account, Charge, Resource};
use crate::server::admission::{Admission, Admitted};
use crate::service::{MethodKind, ServiceFuture};
use crate::stream::Inbox;

/// A decoded call waiting for its permit (unary) or slot (streaming).
pub(super) struct Pending {
    pub(super) call: ServiceFuture,
    pub(super) span: tracing::Span,
    /// A request stream whose window is granted when the call starts.
    pub(super) inbox: Option<Arc<Inbox>>,
    /// For a streaming call, the serial of its [`StreamEnds`].
    pub(super) stream: Option<u64>,
    /// The request's bytes, charged at its arrival, held until the call's response is
    /// handed to the transport.
    pub(super) bytes: Charge,
    /// The request's frame length: what the request's charge (the server's, or the
    /// transport's) stands for, and so what its response may hold without more.
    pub(super) covered: usize,
}

/// A call permit or a stream slot of the connection's account (narrowest first, in
/// arrival order at each level: the accounts' pools serve waiters in turn).
pub(super) type Acquire = Pin<Box<dyn Future<Output = Charge> + Send>>;

pub(super) fn acquire(account: &Account, resource: Resource) -> Acquire {
    let account = account.clone();
    Box::pin(async move { account.charge(resource, 1).await })
}

/// What a call of `kind` holds while it runs: a unary call a call permit, a streaming
/// call a stream slot for as long as it is open.
pub(super) fn slot_of(kind: MethodKind) -> Resource {
    match kind {
        MethodKind::Unary => Resource::Calls,
        _ => Resource::Streams,
    }
}

/// The calls waiting for a permit and the streams waiting for a slot, in two queues so
/// that neither waits behind the other.
pub(super) struct Waiting {
    pub(super) calls: Admission<Pending>,
    pub(super) streams: Admission<Pending>,
}

impl Waiting {
    /// Empty queues bounded by the server's per-connection settings.
    pub(super) fn new(config: &crate::ServerConfig) -> Waiting {
        let queue = || {
            Admission::new(
                config.max_queued_calls_per_connection,
                config.max_queued_bytes_per_connection,
            )
        };
        Waiting {
            calls: queue(),
            streams: queue(),
        }
    }

    pub(super) fn queue(&mut self, resource: Resource) -> &mut Admission<Pending> {
        match resource {
            Resource::Calls => &mut self.calls,
            _ => &mut self.streams,
        }
    }

    pub(super) fn contains(&self, call_id: u64) -> bool {
        self.calls.contains(call_id) || self.streams.contains(call_id)
    }

    pub(super) fn cancel(&mut self, call_id: u64) -> bool {
        self.calls.cancel(call_id) || self.streams.cancel(call_id)
    }

    pub(super) fn expire(&mut self, now: Instant) -> Vec<Admitted<Pending>> {
        let mut expired = self.calls.expire(now);
        expired.extend(self.streams.expire(now));
        expired
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match (self.calls.next_deadline(), self.streams.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(super) fn drain(&mut self) -> Vec<Admitted<Pending>> {
        let mut all = self.calls.drain();
        all.extend(self.streams.drain());
        all
    }
}
