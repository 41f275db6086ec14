//! A channel over several endpoints: where they come from (a list, DNS, a stream the
//! application supplies), one connection per endpoint kept up by a task of its own, and a
//! pick per call among the usable ones.
//!
//! An endpoint is usable while its connection is open and not draining (a GOAWAY), its
//! health (when the channel watches it, `grpc.health.v1.Health/Watch`) is `SERVING`, and
//! it is not ejected after a run of failed calls. Calls go to one of them by power of two
//! choices on calls in flight, or round robin. Nothing is dialled before the first call;
//! from then on every endpoint is kept connected, with exponential back-off and jitter
//! between failed dials, so a pick never waits for a dial while another endpoint is up.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{AbortHandle, Abortable};
use futures_util::Stream;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::client::balance::dns::DnsTarget;
use crate::client::connection::Shared;
use crate::client::dial::Dialing;
use crate::transport::Connection;
use crate::{ClientConfig, Endpoint, Status};
mod connect;
mod discovery;
pub(super) mod dns;
mod endpoint;
mod health;
mod pick;

use self::connect::keep_connected;
use self::discovery::{follow_dns, follow_stream, subset};
pub(in crate::client) use self::endpoint::EndpointState;
pub use self::endpoint::EndpointStatus;
use self::endpoint::{AtomicState, Ejection, EjectionBudget, Health, Phase};
use self::pick::{seed, Pick};

/// Where a balanced channel's endpoints come from.
pub(in crate::client) enum Discovery {
    /// A fixed list (`tcp://h1:p1,h2:p2`).
    Static(Vec<Endpoint>),
    /// A name resolved again every [`BalanceConfig::dns_refresh`](crate::BalanceConfig::dns_refresh).
    Dns(DnsTarget),
    /// Each item the whole set of endpoints from then on.
    Stream(Pin<Box<dyn Stream<Item = Vec<Endpoint>> + Send>>),
}

/// Dials one endpoint.
pub(in crate::client) type DialFn<C> = Arc<dyn Fn(&Endpoint) -> Dialing<C> + Send + Sync>;

/// The state every clone of a balanced channel shares.
pub(in crate::client) struct Balancer<C: Connection> {
    config: ClientConfig,
    dial: DialFn<C>,
    /// The endpoints in use, replaced whole when discovery changes them.
    endpoints: RwLock<Arc<Vec<Arc<Sub<C>>>>>,
    /// Taken when the first call starts the balancer.
    discovery: Mutex<Option<Discovery>>,
    started: AtomicBool,
    /// Whether discovery has produced a set yet, or why it failed.
    resolution: Mutex<Resolution>,
    /// Notified whenever something a waiting pick may use changed.
    changed: Arc<Notify>,
    /// Random state for picks (power of two choices).
    next: AtomicU64,
    /// Round robin's counter.
    turn: AtomicU64,
    budget: Arc<EjectionBudget>,
    /// Chooses this channel's subset when discovery finds more than `max_endpoints`.
    subset_seed: u64,
    /// The discovery task.
    task: Mutex<Option<AbortHandle>>,
}

enum Resolution {
    /// Since when (the balancer's start): calls wait up to the connect timeout.
    Pending(Instant),
    Done,
    /// Discovery failed (and has no earlier set to keep using).
    Failed(Status),
}

impl<C: Connection> Drop for Balancer<C> {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        for sub in self.endpoints.read().iter() {
            sub.stop();
        }
    }
}

/// One endpoint: its connection and the task that keeps it up.
struct Sub<C: Connection> {
    endpoint: Endpoint,
    current: RwLock<Option<Arc<Shared<C>>>>,
    state: Arc<EndpointState>,
    connector: Mutex<Option<AbortHandle>>,
}

impl<C: Connection> Sub<C> {
    /// Whether `shared` is this endpoint's connection.
    fn holds(&self, shared: &Shared<C>) -> bool {
        self.current
            .read()
            .as_ref()
            .is_some_and(|current| std::ptr::eq(Arc::as_ptr(current), shared))
    }

    fn stop(&self) {
        if let Some(task) = self.connector.lock().take() {
            task.abort();
        }
        self.state.remove();
    }

    /// The connection if the endpoint is usable now, with its calls in flight; `ejected`
    /// is set when it would be usable but for an ejection.
    fn usable(
        &self,
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<(Arc<Shared<C>>, usize)> {
        // First, so that an ejection that is over gives its place back whatever else
        // holds the endpoint back.
        let is_ejected = self.state.is_ejected(now);
        if self.state.health.load() != Health::Serving {
            return None;
        }
        let shared = self.current.read().clone()?;
        let load = {
            let calls = shared.calls.lock();
            if calls.is_closed() || calls.is_draining() {
                return None;
            }
            calls.len()
        };
        if is_ejected {
            if ejected.is_none() {
                *ejected = Some((shared, load));
            }
            return None;
        }
        Some((shared, load))
    }
}

/// How often a waiting pick looks again even when nothing notified it.
const REPICK: Duration = Duration::from_millis(100);

impl<C: Connection> Balancer<C> {
    pub(in crate::client) fn new(
        config: ClientConfig,
        discovery: Discovery,
        dial: DialFn<C>,
    ) -> Self {
        Balancer {
            config,
            dial,
            endpoints: RwLock::new(Arc::new(Vec::new())),
            discovery: Mutex::new(Some(discovery)),
            started: AtomicBool::new(false),
            resolution: Mutex::new(Resolution::Pending(Instant::now())),
            changed: Arc::new(Notify::new()),
            next: AtomicU64::new(seed()),
            turn: AtomicU64::new(0),
            budget: Arc::default(),
            subset_seed: seed(),
            task: Mutex::new(None),
        }
    }

    /// Starts discovery and the endpoints' connections (once, on the first call).
    pub(in crate::client) fn start(self: &Arc<Self>) {
        if self.started.load(Ordering::Acquire) || self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(discovery) = self.discovery.lock().take() else {
            return;
        };
        *self.resolution.lock() = Resolution::Pending(Instant::now());
        let weak = Arc::downgrade(self);
        let task = match discovery {
            Discovery::Static(endpoints) => {
                self.update(endpoints);
                return;
            }
            Discovery::Stream(stream) => {
                futures_util::future::Either::Left(follow_stream(weak, stream))
            }
            Discovery::Dns(target) => futures_util::future::Either::Right(follow_dns(
                weak,
                target,
                self.config.balance.dns_scheme.clone(),
                self.config.balance.dns_refresh,
            )),
        };
        let (abort, registration) = AbortHandle::new_pair();
        *self.task.lock() = Some(abort);
        tokio::spawn(Abortable::new(task, registration));
    }

    /// A connection for the next call: waits while endpoints are being found or dialled
    /// (the caller's deadline bounds it), fails with `UNAVAILABLE` when none can be used
    /// (or, with [`ClientConfig::wait_for_ready`], waits for one).
    ///
    /// A retry passes the connection that failed the attempt before as `avoid`: another
    /// endpoint is picked if one is usable, that one only if none is.
    pub(in crate::client) async fn pick(
        self: &Arc<Self>,
        avoid: Option<&Shared<C>>,
    ) -> Result<Arc<Shared<C>>, Status> {
        self.start();
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.try_pick(avoid) {
                Pick::Ready(shared) => return Ok(shared),
                Pick::Fail(status) if !self.config.wait_for_ready => return Err(status),
                Pick::Fail(_) | Pick::Wait => {}
            }
            // Woken by any change; and now and then regardless, for what ends by time
            // alone (a first resolution or health answer overdue, an ejection over).
            let _ = tokio::time::timeout(REPICK, changed).await;
        }
    }

    /// Discovery produced `endpoints`: endpoints new to the set are connected, those that
    /// left it get no new calls (calls in flight on them finish).
    fn update(&self, mut endpoints: Vec<Endpoint>) {
        let mut seen = std::collections::HashSet::new();
        endpoints.retain(|endpoint| seen.insert(endpoint.clone()));
        subset(
            &mut endpoints,
            self.subset_seed,
            self.config.balance.max_endpoints,
        );
        let old_index: std::collections::HashMap<Endpoint, Arc<Sub<C>>> = self
            .endpoints
            .read()
            .iter()
            .map(|sub| (sub.endpoint.clone(), sub.clone()))
            .collect();
        let mut next = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            match old_index.get(&endpoint) {
                Some(sub) => next.push(sub.clone()),
                None => next.push(self.add(endpoint)),
            }
        }
        let kept: std::collections::HashSet<&Endpoint> =
            next.iter().map(|sub| &sub.endpoint).collect();
        for (endpoint, sub) in &old_index {
            if !kept.contains(endpoint) {
                tracing::info!(%endpoint, "endpoint removed");
                sub.stop();
            }
        }
        self.budget.endpoints.store(next.len(), Ordering::Relaxed);
        *self.endpoints.write() = Arc::new(next);
        *self.resolution.lock() = Resolution::Done;
        self.changed.notify_waiters();
    }

    /// Discovery failed: the endpoints found before stay in use.
    fn failed(&self, status: Status) {
        let mut resolution = self.resolution.lock();
        if !matches!(*resolution, Resolution::Done) {
            *resolution = Resolution::Failed(status);
        }
        drop(resolution);
        self.changed.notify_waiters();
    }

    fn add(&self, endpoint: Endpoint) -> Arc<Sub<C>> {
        tracing::info!(%endpoint, "endpoint added");
        let health_check = self.config.balance.health_check_service.clone();
        let sub = Arc::new(Sub {
            endpoint,
            current: RwLock::new(None),
            state: Arc::new(EndpointState {
                conn_event: Notify::new(),
                changed: self.changed.clone(),
                phase: AtomicState::new(Phase::Connecting),
                health: AtomicState::new(if health_check.is_some() {
                    Health::Unknown
                } else {
                    Health::Serving
                }),
                last_error: Mutex::new(None),
                health_since: Mutex::new(None),
                failures: AtomicU32::new(0),
                streak: AtomicU32::new(0),
                ejection: Mutex::new(Ejection::default()),
                budget: self.budget.clone(),
                eject_after: self.config.balance.eject_after_failures,
                ejection_time: self.config.balance.ejection_time,
            }),
            connector: Mutex::new(None),
        });
        let (abort, registration) = AbortHandle::new_pair();
        *sub.connector.lock() = Some(abort);
        let connect = keep_connected(sub.clone(), self.dial.clone(), self.config.clone());
        tokio::spawn(Abortable::new(connect, registration));
        sub
    }

    /// Each endpoint and its state, for introspection and tests.
    pub(in crate::client) fn endpoints(&self) -> Vec<EndpointStatus> {
        let now = Instant::now();
        self.endpoints
            .read()
            .iter()
            .map(|sub| {
                let shared = sub.current.read().clone();
                let (connected, in_flight) = shared.map_or((false, 0), |shared| {
                    let calls = shared.calls.lock();
                    (!calls.is_closed() && !calls.is_draining(), calls.len())
                });
                EndpointStatus {
                    endpoint: sub.endpoint.clone(),
                    connected,
                    serving: match sub.state.health.load() {
                        Health::Serving => Some(true),
                        Health::NotServing => Some(false),
                        Health::Unknown => None,
                    },
                    ejected: sub
                        .state
                        .ejection
                        .lock()
                        .until
                        .is_some_and(|until| until > now),
                    in_flight,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
