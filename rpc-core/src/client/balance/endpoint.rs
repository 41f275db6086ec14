//! One endpoint's state as calls and connections see it: its connection's phase, its
//! health, and its ejection after a run of failed calls.

use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::marker::PhantomData;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::client::connection::Watcher;
use crate::{Code, Endpoint, Status};

/// Where an endpoint's connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Being dialled (a first dial, or one after a failure).
    Connecting,
    /// Connected.
    Ready,
    /// The last dial failed, or the connection ended; the next dial waits its back-off.
    Failed,
}

/// An endpoint's health, as its `grpc.health.v1` watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Health {
    /// Not yet known (a watch was started, no answer yet).
    Unknown,
    /// `SERVING`, or the channel does not watch health.
    Serving,
    /// Anything else, or the watch failed.
    NotServing,
}

/// A state kept in one byte, so that it can live in an atomic.
pub(super) trait ByteState: Copy + Eq {
    fn to_byte(self) -> u8;
    fn from_byte(byte: u8) -> Self;
}

impl ByteState for Phase {
    fn to_byte(self) -> u8 {
        self as u8
    }

    fn from_byte(byte: u8) -> Phase {
        match byte {
            0 => Phase::Connecting,
            1 => Phase::Ready,
            _ => Phase::Failed,
        }
    }
}

impl ByteState for Health {
    fn to_byte(self) -> u8 {
        self as u8
    }

    fn from_byte(byte: u8) -> Health {
        match byte {
            0 => Health::Unknown,
            1 => Health::Serving,
            _ => Health::NotServing,
        }
    }
}

/// A [`Phase`] or [`Health`] read by picks while the endpoint's tasks change it.
pub(super) struct AtomicState<T> {
    byte: AtomicU8,
    of: PhantomData<T>,
}

impl<T: ByteState> AtomicState<T> {
    pub(super) fn new(state: T) -> AtomicState<T> {
        AtomicState {
            byte: AtomicU8::new(state.to_byte()),
            of: PhantomData,
        }
    }

    pub(super) fn load(&self) -> T {
        T::from_byte(self.byte.load(Ordering::Acquire))
    }

    fn store(&self, state: T) {
        self.byte.store(state.to_byte(), Ordering::Release);
    }

    /// Sets `state`, answering the one before.
    fn swap(&self, state: T) -> T {
        T::from_byte(self.byte.swap(state.to_byte(), Ordering::AcqRel))
    }
}

/// What a balanced endpoint's connection reports to it (held by [`Shared`]).
pub(crate) struct EndpointState {
    /// The connection ended or began draining: wakes the endpoint's connector.
    pub(super) conn_event: Notify,
    /// The balancer's.
    pub(super) changed: Arc<Notify>,
    pub(super) phase: AtomicState<Phase>,
    pub(super) health: AtomicState<Health>,
    /// Why the last dial (or connection) failed; cleared when a connection is up. While
    /// set, a dial under way does not make picks wait (the endpoint is failing).
    pub(super) last_error: Mutex<Option<Status>>,
    /// When the connection came up with health unknown (a watch's first answer is due
    /// within the connect timeout, or the endpoint counts as not serving).
    pub(super) health_since: Mutex<Option<Instant>>,
    /// Calls in a row that failed.
    pub(super) failures: AtomicU32,
    /// Ejections in a row, none of them followed by a success: each lasts longer.
    pub(super) streak: AtomicU32,
    pub(super) ejection: Mutex<Ejection>,
    pub(super) budget: Arc<EjectionBudget>,
    pub(super) eject_after: u32,
    pub(super) ejection_time: Duration,
}

#[derive(Default)]
pub(super) struct Ejection {
    pub(super) until: Option<Instant>,
    /// The endpoint left the set: never ejected again (its calls in flight still end).
    pub(super) removed: bool,
}

/// How many endpoints are ejected, of how many: at most half may be.
#[derive(Default)]
pub(super) struct EjectionBudget {
    pub(super) ejected: AtomicUsize,
    pub(super) endpoints: AtomicUsize,
}

impl EjectionBudget {
    /// Takes a place for one more ejection, if that leaves at most half ejected.
    pub(super) fn take(&self) -> bool {
        let endpoints = self.endpoints.load(Ordering::Relaxed);
        self.ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |ejected| {
                ((ejected + 1) * 2 <= endpoints).then_some(ejected + 1)
            })
            .is_ok()
    }

    pub(super) fn give_back(&self) {
        let _ = self
            .ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| e.checked_sub(1));
    }
}

impl EndpointState {
    pub(super) fn is_ejected(&self, now: Instant) -> bool {
        let mut ejection = self.ejection.lock();
        match ejection.until {
            Some(until) if until > now => true,
            Some(_) => {
                ejection.until = None;
                self.budget.give_back();
                false
            }
            None => false,
        }
    }

    /// The endpoint left the set: its ejection (if any) ends and none follows.
    pub(super) fn remove(&self) {
        let mut ejection = self.ejection.lock();
        ejection.removed = true;
        if ejection.until.take().is_some() {
            self.budget.give_back();
        }
    }

    pub(super) fn set_phase(&self, phase: Phase) {
        self.phase.store(phase);
        self.changed.notify_waiters();
    }

    pub(super) fn set_health(&self, health: Health) {
        if self.health.swap(health) != health {
            self.changed.notify_waiters();
        }
    }
}

/// One endpoint of a balanced channel and its state
/// ([`Channel::endpoints`](crate::Channel::endpoints)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EndpointStatus {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Whether it has a connection that takes new calls (open, not draining).
    pub connected: bool,
    /// Its health as last reported by its `grpc.health.v1` watch: `None` while unknown
    /// (no answer yet, or not connected).
    pub serving: Option<bool>,
    /// Whether it is resting after calls failed in a row (passive ejection).
    pub ejected: bool,
    /// Calls in flight on its connection.
    pub in_flight: usize,
}

#[cfg(test)]
impl EndpointState {
    /// A state in `phase` and `health`, counted in `budget`, ejected after two failures
    /// for ten seconds (unit tests).
    pub(super) fn for_test(
        phase: Phase,
        health: Health,
        budget: Arc<EjectionBudget>,
    ) -> EndpointState {
        EndpointState {
            conn_event: Notify::new(),
            changed: Arc::default(),
            phase: AtomicState::new(phase),
            health: AtomicState::new(health),
            last_error: Mutex::new(None),
            health_since: Mutex::new(None),
            failures: AtomicU32::new(0),
            streak: AtomicU32::new(0),
            ejection: Mutex::new(Ejection::default()),
            budget,
            eject_after: 2,
            ejection_time: Duration::from_secs(10),
        }
    }
}

impl Watcher for EndpointState {
    fn connection_changed(&self) {
        self.conn_event.notify_one();
        self.changed.notify_waiters();
    }

    /// A call on this endpoint ended with `code`.
    fn record(&self, code: Code) {
        if self.eject_after == 0 {
            return;
        }
        let failed = matches!(
            code,
            Code::Unavailable | Code::Internal | Code::Unknown | Code::DataLoss
        );
        if !failed {
            self.failures.store(0, Ordering::Relaxed);
            // A success after an ejection ended: the next one starts short again.
            if self.streak.load(Ordering::Relaxed) != 0 && self.ejection.lock().until.is_none() {
                self.streak.store(0, Ordering::Relaxed);
            }
            return;
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < self.eject_after {
            return;
        }
        let mut ejection = self.ejection.lock();
        if ejection.until.is_some() || ejection.removed || !self.budget.take() {
            return; // never more than half of them
        }
        let streak = (self.streak.load(Ordering::Relaxed) + 1).min(10);
        self.streak.store(streak, Ordering::Relaxed);
        let rest = self.ejection_time * streak;
        ejection.until = Some(Instant::now() + rest);
        self.failures.store(0, Ordering::Relaxed);
        tracing::info!(
            failures,
            ?rest,
            "endpoint ejected after calls failed in a row"
        );
    }
}
