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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::{AbortHandle, Abortable};
use futures_util::{Stream, StreamExt};
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use super::channel::{dial_within, jitter, next_backoff, start, Dialing, Shared, REDIAL_BACKOFF};
use super::dns::DnsTarget;
use crate::service::{MethodDescriptor, MethodKind};
use crate::transport::Connection;
use crate::{ClientConfig, Code, Endpoint, LbStrategy, Request, Status};

/// Where a balanced channel's endpoints come from.
pub(super) enum Discovery {
    /// A fixed list (`tcp://h1:p1,h2:p2`).
    Static(Vec<Endpoint>),
    /// A name resolved again every [`BalanceConfig::dns_refresh`](crate::BalanceConfig::dns_refresh).
    Dns(DnsTarget),
    /// Each item the whole set of endpoints from then on.
    Stream(Pin<Box<dyn Stream<Item = Vec<Endpoint>> + Send>>),
}

/// Dials one endpoint.
pub(super) type DialFn<C> = Arc<dyn Fn(&Endpoint) -> Dialing<C> + Send + Sync>;

/// The state every clone of a balanced channel shares.
pub(super) struct Balancer<C: Connection> {
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
        if self.state.health.load(Ordering::Acquire) != SERVING {
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

/// The shortest interval between two resolutions of a DNS target.
const MIN_DNS_REFRESH: Duration = Duration::from_millis(100);

/// Two different indices below `n` (at least 2) from the random `r`.
fn distinct_pair(r: u64, n: usize) -> (usize, usize) {
    let i = (r % n as u64) as usize;
    let j = ((r >> 32) % (n as u64 - 1)) as usize;
    (i, if j >= i { j + 1 } else { j })
}

const CONNECTING: u8 = 0;
const READY: u8 = 1;
const FAILED: u8 = 2;

/// Health not yet known (a watch was started, no answer yet).
const UNKNOWN: u8 = 0;
const SERVING: u8 = 1;
const NOT_SERVING: u8 = 2;

/// What a balanced endpoint's connection reports to it (held by [`Shared`]).
pub(crate) struct EndpointState {
    /// The connection ended or began draining: wakes the endpoint's connector.
    conn_event: Notify,
    /// The balancer's.
    changed: Arc<Notify>,
    phase: AtomicU8,
    health: AtomicU8,
    /// Why the last dial (or connection) failed; cleared when a connection is up. While
    /// set, a dial under way does not make picks wait (the endpoint is failing).
    last_error: Mutex<Option<Status>>,
    /// When the connection came up with health unknown (a watch's first answer is due
    /// within the connect timeout, or the endpoint counts as not serving).
    health_since: Mutex<Option<Instant>>,
    /// Calls in a row that failed.
    failures: AtomicU32,
    /// Ejections in a row, none of them followed by a success: each lasts longer.
    streak: AtomicU32,
    ejection: Mutex<Ejection>,
    budget: Arc<EjectionBudget>,
    eject_after: u32,
    ejection_time: Duration,
}

#[derive(Default)]
struct Ejection {
    until: Option<Instant>,
    /// The endpoint left the set: never ejected again (its calls in flight still end).
    removed: bool,
}

/// How many endpoints are ejected, of how many: at most half may be.
#[derive(Default)]
struct EjectionBudget {
    ejected: AtomicUsize,
    endpoints: AtomicUsize,
}

impl EjectionBudget {
    /// Takes a place for one more ejection, if that leaves at most half ejected.
    fn take(&self) -> bool {
        let endpoints = self.endpoints.load(Ordering::Relaxed);
        self.ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |ejected| {
                ((ejected + 1) * 2 <= endpoints).then_some(ejected + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        let _ = self
            .ejected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| e.checked_sub(1));
    }
}

impl EndpointState {
    pub(super) fn connection_changed(&self) {
        self.conn_event.notify_one();
        self.changed.notify_waiters();
    }

    /// A call on this endpoint ended with `code`.
    pub(super) fn record(&self, code: Code) {
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

    fn is_ejected(&self, now: Instant) -> bool {
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
    fn remove(&self) {
        let mut ejection = self.ejection.lock();
        ejection.removed = true;
        if ejection.until.take().is_some() {
            self.budget.give_back();
        }
    }

    fn set_phase(&self, phase: u8) {
        self.phase.store(phase, Ordering::Release);
        self.changed.notify_waiters();
    }

    fn set_health(&self, health: u8) {
        if self.health.swap(health, Ordering::AcqRel) != health {
            self.changed.notify_waiters();
        }
    }
}

/// What one pick found.
enum Pick<C: Connection> {
    Ready(Arc<Shared<C>>),
    /// Nothing usable yet, but something is under way (a dial, a first health answer,
    /// the first resolution).
    Wait,
    Fail(Status),
}

impl<C: Connection> Balancer<C> {
    pub(super) fn new(config: ClientConfig, discovery: Discovery, dial: DialFn<C>) -> Self {
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
    pub(super) fn start(self: &Arc<Self>) {
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
    pub(super) async fn pick(
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

    fn random(&self) -> u64 {
        // SplitMix64 over a shared counter: cheap, and different for concurrent picks.
        let mut z = self
            .next
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn try_pick(&self, avoid: Option<&Shared<C>>) -> Pick<C> {
        let subs = self.endpoints.read().clone();
        let n = subs.len();
        let now = Instant::now();
        let mut ejected = None;
        if n > 0 {
            // The others first, when one is to be avoided; then all.
            let others: Option<Vec<Arc<Sub<C>>>> = avoid.filter(|_| n > 1).map(|avoid| {
                subs.iter()
                    .filter(|sub| !sub.holds(avoid))
                    .cloned()
                    .collect()
            });
            let picked = others
                .filter(|others| !others.is_empty())
                .and_then(|others| self.choose(&others, now, &mut ejected))
                .or_else(|| self.choose(&subs, now, &mut ejected));
            if let Some(shared) = picked {
                return Pick::Ready(shared);
            }
        }
        // Only ejected endpoints are usable: they are used rather than none.
        if let Some((shared, _)) = ejected {
            return Pick::Ready(shared);
        }
        match &*self.resolution.lock() {
            Resolution::Pending(since) if since.elapsed() < self.config.connect_timeout => {
                return Pick::Wait
            }
            Resolution::Pending(_) => {
                return Pick::Fail(Status::unavailable(format!(
                    "no endpoints found within {:?}",
                    self.config.connect_timeout
                )))
            }
            Resolution::Failed(status) if n == 0 => return Pick::Fail(status.clone()),
            _ => {}
        }
        if n == 0 {
            return Pick::Fail(Status::unavailable("no endpoints (discovery found none)"));
        }
        let mut not_serving = 0;
        let mut error = None;
        for sub in subs.iter() {
            let state = &sub.state;
            let last_error = state.last_error.lock().clone();
            match state.phase.load(Ordering::Acquire) {
                // A first dial: worth waiting for. A dial after failures is not (the
                // endpoint is failing until it connects), as gRPC's TRANSIENT_FAILURE.
                CONNECTING if last_error.is_none() => return Pick::Wait,
                READY => match state.health.load(Ordering::Acquire) {
                    UNKNOWN => {
                        let since = *state.health_since.lock();
                        if since.is_none_or(|t| t.elapsed() < self.config.connect_timeout) {
                            return Pick::Wait;
                        }
                        not_serving += 1;
                    }
                    NOT_SERVING => not_serving += 1,
                    _ => {}
                },
                _ => {}
            }
            if error.is_none() {
                error = last_error;
            }
        }
        Pick::Fail(match error {
            Some(error) => Status::unavailable(format!(
                "no endpoint of {n} is usable ({not_serving} not serving); last error: {}",
                error.message()
            )),
            None => Status::unavailable(format!(
                "no endpoint of {n} is usable ({not_serving} not serving)"
            )),
        })
    }

    /// A usable endpoint of `subs` by the configured strategy.
    fn choose(
        &self,
        subs: &[Arc<Sub<C>>],
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<Arc<Shared<C>>> {
        match self.config.balance.strategy {
            LbStrategy::PowerOfTwoChoices => self.two_choices(subs, now, ejected),
            LbStrategy::RoundRobin => self.round_robin(subs, now, ejected),
        }
    }

    /// Power of two choices: two endpoints drawn at random, the one with fewer calls in
    /// flight; when either is not usable, two drawn among the usable ones.
    fn two_choices(
        &self,
        subs: &[Arc<Sub<C>>],
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<Arc<Shared<C>>> {
        let n = subs.len();
        if n == 1 {
            return subs[0].usable(now, ejected).map(|(shared, _)| shared);
        }
        let r = self.random();
        let (i, j) = distinct_pair(r, n);
        let a = subs[i].usable(now, ejected);
        let b = subs[j].usable(now, ejected);
        if let (Some(a), Some(b)) = (&a, &b) {
            return Some(if b.1 < a.1 { b.0.clone() } else { a.0.clone() });
        }
        // Some are not usable: choose among those that are, so that none is favoured
        // for being next to one that is down.
        let mut usable: Vec<(Arc<Shared<C>>, usize)> = subs
            .iter()
            .filter_map(|sub| sub.usable(now, ejected))
            .collect();
        match usable.len() {
            0 => None,
            1 => usable.pop().map(|(shared, _)| shared),
            m => {
                let (i, j) = distinct_pair(r.rotate_left(17), m);
                let (a, b) = (&usable[i], &usable[j]);
                Some(if b.1 < a.1 { b.0.clone() } else { a.0.clone() })
            }
        }
    }

    /// Each usable endpoint in turn.
    fn round_robin(
        &self,
        subs: &[Arc<Sub<C>>],
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<Arc<Shared<C>>> {
        let mut usable: Vec<Arc<Shared<C>>> = subs
            .iter()
            .filter_map(|sub| sub.usable(now, ejected).map(|(shared, _)| shared))
            .collect();
        if usable.is_empty() {
            return None;
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) as usize % usable.len();
        Some(usable.swap_remove(turn))
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
                phase: AtomicU8::new(CONNECTING),
                health: AtomicU8::new(if health_check.is_some() {
                    UNKNOWN
                } else {
                    SERVING
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
    pub(super) fn endpoints(&self) -> Vec<crate::EndpointStatus> {
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
                crate::EndpointStatus {
                    endpoint: sub.endpoint.clone(),
                    connected,
                    serving: match sub.state.health.load(Ordering::Acquire) {
                        SERVING => Some(true),
                        NOT_SERVING => Some(false),
                        _ => None,
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

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// Keeps `sub` connected until it is stopped: dials, watches health if asked, waits for
/// the connection to end or drain, and dials again, with back-off after failures.
async fn keep_connected<C: Connection>(sub: Arc<Sub<C>>, dial: DialFn<C>, config: ClientConfig) {
    let state = &sub.state;
    let mut backoff: Option<Duration> = None;
    loop {
        state.set_phase(CONNECTING);
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
                state.set_phase(FAILED);
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
        state.set_phase(READY);
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
            UNKNOWN
        } else {
            SERVING
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
            state.set_phase(FAILED);
            tokio::time::sleep(jitter(wait)).await;
        }
    }
}

struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

static HEALTH_WATCH: MethodDescriptor =
    MethodDescriptor::with_kind("/grpc.health.v1.Health/Watch", MethodKind::ServerStreaming);

/// Follows the endpoint's health over its connection (`Health/Watch`) until the
/// connection ends; a server without the health service counts as serving.
async fn watch_health<C: Connection>(
    shared: Weak<Shared<C>>,
    state: Arc<EndpointState>,
    service: String,
    config: ClientConfig,
) {
    // The watch lives as long as the connection: no call timeout, no retries.
    let mut watch_config = config;
    watch_config.timeout = None;
    watch_config.retry = None;
    let mut backoff: Option<Duration> = None;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let channel = super::Channel::over(strong, watch_config.clone());
        let request = Request::new(HealthCheckRequest {
            service: service.clone(),
        });
        let ended = match channel
            .server_streaming_with(request, &HEALTH_WATCH, |bytes| {
                <HealthCheckResponse as prost::Message>::decode(bytes)
            })
            .await
        {
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match stream.next().await {
                        Some(Ok(answer)) => {
                            backoff = None;
                            state.set_health(if answer.status == 1 {
                                SERVING
                            } else {
                                NOT_SERVING
                            });
                        }
                        Some(Err(status)) => break status,
                        None => break Status::unavailable("the health watch ended"),
                    }
                }
            }
            Err(status) => status,
        };
        drop(channel);
        if ended.code() == Code::Unimplemented {
            tracing::info!("endpoint has no health service; counted as serving");
            state.set_health(SERVING);
            return;
        }
        tracing::debug!("health watch failed: {}", ended.message());
        state.set_health(NOT_SERVING);
        let wait = backoff.map_or(REDIAL_BACKOFF, next_backoff);
        backoff = Some(wait);
        tokio::time::sleep(jitter(wait)).await;
    }
}

async fn follow_stream<C: Connection>(
    balancer: Weak<Balancer<C>>,
    mut stream: Pin<Box<dyn Stream<Item = Vec<Endpoint>> + Send>>,
) {
    while let Some(endpoints) = stream.next().await {
        let Some(balancer) = balancer.upgrade() else {
            return;
        };
        balancer.update(endpoints);
    }
    if let Some(balancer) = balancer.upgrade() {
        balancer.failed(Status::unavailable(
            "the stream of endpoints ended before it gave any",
        ));
    }
}

/// Cuts `items` to at most `max` (at least 1): a subset that stays the same across
/// updates of one channel (its `seed`) and differs between channels, so that many
/// clients cover every server.
pub(super) fn subset<T: std::hash::Hash>(items: &mut Vec<T>, seed: u64, max: usize) {
    let max = max.max(1);
    if items.len() <= max {
        return;
    }
    items.sort_by_cached_key(|item| {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (seed, item).hash(&mut hasher);
        hasher.finish()
    });
    tracing::warn!(
        found = items.len(),
        max,
        "more endpoints than max_endpoints: using a subset"
    );
    items.truncate(max);
}

async fn follow_dns<C: Connection>(
    balancer: Weak<Balancer<C>>,
    target: DnsTarget,
    scheme: String,
    refresh: Duration,
) {
    let resolver = match target.resolver() {
        Ok(resolver) => resolver,
        Err(status) => {
            if let Some(balancer) = balancer.upgrade() {
                balancer.failed(status);
            }
            return;
        }
    };
    let refresh = refresh.max(MIN_DNS_REFRESH);
    let mut backoff: Option<Duration> = None;
    // Answers are cut to the channel's subset before they become endpoints.
    let Some((max, seed)) = balancer
        .upgrade()
        .map(|b| (b.config.balance.max_endpoints, b.subset_seed))
    else {
        return;
    };
    loop {
        let resolved = target.resolve(&resolver, &scheme, max, seed).await;
        let Some(strong) = balancer.upgrade() else {
            return;
        };
        let wait = match resolved {
            Ok(endpoints) => {
                strong.update(endpoints);
                backoff = None;
                refresh
            }
            Err(status) => {
                tracing::warn!("resolving {target} failed: {}", status.message());
                strong.failed(status);
                // Tried again soon (a failed first resolution fails every call).
                let wait = backoff.map_or(REDIAL_BACKOFF, next_backoff);
                backoff = Some(wait);
                jitter(wait).min(refresh)
            }
        };
        drop(strong);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
#[path = "balance_tests.rs"]
mod tests;
