//! [`Channel`]: concurrent calls multiplexed over one [`Connection`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::sync::Weak;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use tracing::Instrument;

use futures_util::future::{AbortHandle, Abortable};
use futures_util::StreamExt;

use super::balance::{Balancer, DialFn, Discovery, EndpointState};
use super::calls::{CallTable, NotAdmitted, Waiter};
use super::target::{EndpointStatus, Target};
use crate::control::ControlQueue;
use crate::interceptor::{intercept, Chain, Interceptor};
use crate::layer::{to_status, BoxError, ClientCall, ClientStack, Encoded};
use crate::outbound::{send_control_credits, send_frame, send_split};
use crate::payload::{self, Inbound};
use crate::service::{MethodDescriptor, MethodKind, SplitLarge};
use crate::stream::{CallHandle, Inbox, Outbox};
use crate::transport::{Connection, Dial, FrameSink, TransportError};
use crate::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN};
use crate::{
    ClientConfig, Code, Endpoint, IntoStreamingRequest, Metadata, Payload, Request, Response,
    Status, Streaming,
};

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

/// A future that dials a new connection.
pub(super) type Dialing<C> = Pin<Box<dyn Future<Output = Result<C, TransportError>> + Send>>;

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

/// The most attempts a retry policy makes, whatever it asks (as gRPC).
const MAX_ATTEMPTS: u32 = 5;

/// gRPC's retry throttling ([`RetryPolicy::max_tokens`](crate::RetryPolicy::max_tokens)):
/// one token taken by each failed call the policy covers, a tenth given back by each
/// success; retries are made only while more than half are left.
struct RetryThrottle {
    /// Thousandths of a token.
    tokens: std::sync::atomic::AtomicU64,
    /// The most, in thousandths; 0 when throttling is off.
    max: u64,
}

impl RetryThrottle {
    fn new(config: &ClientConfig) -> RetryThrottle {
        let max = config
            .retry
            .as_ref()
            .map_or(0, |p| u64::from(p.max_tokens) * 1000);
        RetryThrottle {
            tokens: std::sync::atomic::AtomicU64::new(max),
            max,
        }
    }

    fn success(&self) {
        let max = self.max;
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < max).then(|| (t + 100).min(max))
            });
    }

    /// A failed call: whether it may be retried.
    fn failure(&self) -> bool {
        if self.max == 0 {
            return true;
        }
        let before = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(1000))
            })
            .unwrap_or(0);
        before.saturating_sub(1000) > self.max / 2
    }
}

struct Redial<C> {
    dial: Box<dyn Fn() -> Dialing<C> + Send + Sync>,
    /// One dial at a time, held by the dial's task; callers that find it under way wait
    /// for its result.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The last dial failure: until its `retry_at`, calls fail with its status (or wait,
    /// with [`ClientConfig::wait_for_ready`]) instead of dialing again, so that many
    /// callers make no connect storm.
    last_failure: Mutex<Option<DialFailure>>,
}

#[derive(Clone)]
struct DialFailure {
    retry_at: Instant,
    backoff: std::time::Duration,
    status: Status,
}

/// The back-off after a first failed dial; it grows 1.6 times per further failure, up to
/// [`MAX_REDIAL_BACKOFF`], with ±20 % jitter (gRPC's connection back-off, scaled down).
pub const REDIAL_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest back-off between dials.
pub const MAX_REDIAL_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

pub(super) fn next_backoff(previous: std::time::Duration) -> std::time::Duration {
    previous.mul_f64(1.6).min(MAX_REDIAL_BACKOFF)
}

/// `backoff` ±20 %, so that many clients of one restarted server do not dial in step.
pub(super) fn jitter(backoff: std::time::Duration) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(backoff.as_nanos() as u64);
    let unit = (hasher.finish() % 1000) as f64 / 1000.0; // [0, 1)
    backoff.mul_f64(0.8 + 0.4 * unit)
}

/// One connection's state, shared by the channel, the call guards and the receive task.
pub(super) struct Shared<C: Connection> {
    /// Also held by the receive task, which must not keep `Shared` alive.
    pub(super) conn: Arc<C>,
    /// Waiting calls. Locked briefly by callers (insert/remove) and by the receive task
    /// (complete); never held across an await.
    pub(super) calls: Mutex<CallTable<C::RecvBuf>>,
    /// Control frames (cancel, pong, ping, goaway) to send from contexts that cannot
    /// await (Drop, the receive loop). Bounded.
    control: Arc<ControlQueue>,
    /// When the last frame arrived from the server (keepalive).
    /// Set by every received frame, cleared by the keepalive task (a store per frame, not
    /// a clock read).
    heard: AtomicBool,
    /// The endpoint of a balanced channel this connection belongs to: told when the
    /// connection ends or drains, and of each call's outcome (passive ejection).
    pub(super) endpoint: Option<Arc<EndpointState>>,
}

impl<C: Connection> Shared<C> {
    /// Whether new calls may go here (not closed, not draining after a GOAWAY).
    pub(super) fn usable(&self) -> bool {
        let calls = self.calls.lock();
        !calls.is_closed() && !calls.is_draining()
    }

    /// Tells the balanced endpoint, if any, that the connection ended or drains.
    fn changed(&self) {
        if let Some(endpoint) = &self.endpoint {
            endpoint.connection_changed();
        }
    }
}

impl<C: Connection> Drop for Shared<C> {
    fn drop(&mut self) {
        self.control.close();
        self.conn.close();
    }
}

/// Dials with `inner`'s redial (within the connect timeout) and records the outcome: the
/// new connection as the current one, or the failure and the next back-off (after
/// `failed`, the previous failure, if any).
async fn dial_and_record<C: Connection>(
    inner: &Inner<C>,
    failed: Option<DialFailure>,
    reconnect: bool,
) -> Result<Arc<Shared<C>>, Status> {
    let Some(redial) = &inner.redial else {
        return Err(Status::internal("a channel without a dialer dialled"));
    };
    let dialed = dial_within(inner.config.connect_timeout, (redial.dial)()).await;
    match dialed {
        Ok(conn) => {
            let fresh = start(conn, &inner.config, None);
            *inner.current.write() = Some(fresh.clone());
            *redial.last_failure.lock() = None;
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
            *redial.last_failure.lock() = Some(DialFailure {
                retry_at: Instant::now() + jitter(backoff),
                backoff,
                status: status.clone(),
            });
            Err(status)
        }
    }
}

/// `dial`, failed when it takes longer than `timeout` (a channel's connect timeout).
pub(super) async fn dial_within<C>(
    timeout: std::time::Duration,
    dial: impl Future<Output = Result<C, TransportError>>,
) -> Result<C, TransportError> {
    tokio::time::timeout(timeout, dial)
        .await
        .unwrap_or_else(|_| {
            Err(TransportError::Other(format!(
                "not connected within {timeout:?}"
            )))
        })
}

/// Dials `endpoint` with the connection type's own dialer ([`Dial`]).
fn dial_with<C: Dial>(
    endpoint: &Endpoint,
) -> impl Future<Output = Result<C, TransportError>> + Send + 'static {
    let endpoint = endpoint.clone();
    async move { C::dial(&endpoint).await }
}

/// `dial` of `endpoint` as a reconnecting channel's dialer.
fn dialer<C, F, Fut>(endpoint: Endpoint, dial: F) -> impl Fn() -> Fut + Send + Sync + 'static
where
    F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
{
    move || dial(&endpoint)
}

/// Starts the tasks of one connection.
pub(super) fn start<C: Connection>(
    conn: C,
    config: &ClientConfig,
    endpoint: Option<Arc<EndpointState>>,
) -> Arc<Shared<C>> {
    let control = Arc::new(ControlQueue::default());
    let conn = Arc::new(conn);
    let shared = Arc::new(Shared {
        conn: conn.clone(),
        calls: Mutex::new(CallTable::new()),
        control: control.clone(),
        heard: AtomicBool::new(false),
        endpoint,
    });
    // A first frame at once, as HTTP/2's preface: servers close sockets that stay
    // silent past their first-frame timeout, and a channel may make its first call late.
    control.ping(0);
    let weak = Arc::downgrade(&shared);
    let sink = Arc::new(Dispatch {
        shared: weak.clone(),
        ended: AtomicBool::new(false),
    });
    if !conn.push_to(sink) {
        tokio::spawn(
            receive_loop(conn, weak.clone()).instrument(tracing::debug_span!("channel-recv")),
        );
    }
    tokio::spawn(control_loop(weak.clone(), control));
    if let Some(interval) = config.keepalive_interval {
        tokio::spawn(keepalive_loop(weak, interval, config.keepalive_timeout));
    }
    shared
}

impl<C: Connection> Channel<C> {
    /// A channel over `conn` with default settings.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(conn: C) -> Channel<C> {
        Channel::with_config(conn, ClientConfig::default())
    }

    /// A channel over `conn` with `config`.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn with_config(conn: C, config: ClientConfig) -> Channel<C> {
        let current = RwLock::new(Some(start(conn, &config, None)));
        Channel {
            stack: None,
            interceptor: None,
            inner: Arc::new(Inner {
                current,
                redial: None,
                balancer: None,
                throttle: RetryThrottle::new(&config),
                config,
            }),
        }
    }

    /// A channel that connects with `dial` now, and again whenever a call finds the
    /// connection failed (e.g. after the server restarted).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), rpc_core::TransportError> {
    /// use rpc_core::memory::MemoryConnection;
    /// # let connector: rpc_core::memory::MemoryConnector = unimplemented!();
    /// let channel = rpc_core::Channel::with_reconnect(Default::default(), move || {
    ///     let connector = connector.clone();
    ///     async move { connector.connect().await }
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The first dial's error, or a timeout after [`ClientConfig::connect_timeout`].
    pub async fn with_reconnect<F, Fut>(
        config: ClientConfig,
        dial: F,
    ) -> Result<Channel<C>, TransportError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        let conn = dial_within(config.connect_timeout, dial()).await?;
        let channel = Channel::lazy(config, dial);
        *channel.inner.current.write() = Some(start(conn, &channel.inner.config, None));
        Ok(channel)
    }

    /// A channel that dials with `dial` only when its first call is made (so creating it
    /// never fails and never waits: a service may start before the ones it calls), and
    /// again whenever a call finds the connection failed, as
    /// [`Channel::with_reconnect`]. Until the first connection, [`Channel::connection`]
    /// is `None`. A failed dial fails the call that made it with `UNAVAILABLE` (or, with
    /// [`ClientConfig::wait_for_ready`], the call waits and dials again after the
    /// back-off).
    pub fn lazy<F, Fut>(config: ClientConfig, dial: F) -> Channel<C>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        Channel {
            stack: None,
            interceptor: None,
            inner: Arc::new(Inner {
                current: RwLock::new(None),
                redial: Some(Redial {
                    dial: Box::new(move || Box::pin(dial()) as Dialing<C>),
                    lock: Arc::new(tokio::sync::Mutex::new(())),
                    last_failure: Mutex::new(None),
                }),
                balancer: None,
                throttle: RetryThrottle::new(&config),
                config,
            }),
        }
    }

    /// A channel to `url` (`tcp://host:port`, `auto://...`, `grpc://...`, as the
    /// connection type understands it), connected now and again whenever a call finds
    /// the connection failed ([`Channel::with_reconnect`]), with the connection type's
    /// settings ([`Dial::client_config`]).
    ///
    /// ```no_run
    /// # async fn f<AnyConnection: rpc_core::Dial>() -> Result<(), rpc_core::TransportError> {
    /// // AnyConnection: rpc_transport's, which dials every scheme.
    /// let channel = rpc_core::Channel::<AnyConnection>::connect("tcp://127.0.0.1:50051").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A URL that is not an endpoint; the first dial's error.
    ///
    /// A target naming several endpoints makes a balanced channel (see
    /// [`Channel::balanced`]): a list, `tcp://h1:p1,h2:p2` (the scheme is every
    /// endpoint's transport), or a DNS name, `dns:///name:port` (A/AAAA records, resolved
    /// again every [`BalanceConfig::dns_refresh`](crate::BalanceConfig::dns_refresh)),
    /// `dns:///_grpc._tcp.name` (SRV records), `dns://DNS-SERVER-IP/name:port` (asking that
    /// server), whose endpoints use the transport
    /// [`BalanceConfig::dns_scheme`](crate::BalanceConfig::dns_scheme). `connect` then
    /// returns once one endpoint is usable.
    pub async fn connect(url: &str) -> Result<Channel<C>, TransportError>
    where
        C: Dial,
    {
        Channel::connect_with(url, C::client_config()?).await
    }

    /// [`Channel::connect`] with `config` instead of the connection type's settings.
    ///
    /// # Errors
    /// As [`Channel::connect`].
    pub async fn connect_with(url: &str, config: ClientConfig) -> Result<Channel<C>, TransportError>
    where
        C: Dial,
    {
        Channel::connect_dialing(url, config, dial_with::<C>).await
    }

    /// [`Channel::connect_with`] for any connection type, dialling each endpoint with
    /// `dial`.
    ///
    /// # Errors
    /// As [`Channel::connect`].
    pub async fn connect_dialing<F, Fut>(
        url: &str,
        config: ClientConfig,
        dial: F,
    ) -> Result<Channel<C>, TransportError>
    where
        F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        match Target::parse(url)? {
            Target::One(endpoint) => Channel::with_reconnect(config, dialer(endpoint, dial)).await,
            target => {
                let timeout = config.connect_timeout;
                let channel = Channel::from_target(config, target, dial);
                let balancer = channel.inner.balancer.as_ref().expect("balanced");
                match tokio::time::timeout(timeout, balancer.pick(None)).await {
                    Ok(Ok(_)) => Ok(channel),
                    Ok(Err(status)) => Err(TransportError::Other(status.message().to_owned())),
                    Err(_) => Err(TransportError::Other(format!(
                        "no endpoint of {url} connected within {timeout:?}"
                    ))),
                }
            }
        }
    }

    fn from_target<F, Fut>(config: ClientConfig, target: Target, dial: F) -> Channel<C>
    where
        F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        let discovery = match target {
            Target::One(endpoint) => Discovery::Static(vec![endpoint]),
            Target::List(endpoints) => Discovery::Static(endpoints),
            Target::Dns(target) => Discovery::Dns(target),
        };
        let dial: DialFn<C> =
            Arc::new(move |endpoint: &Endpoint| Box::pin(dial(endpoint)) as Dialing<C>);
        Channel::from_discovery(config, discovery, dial)
    }

    fn from_discovery(config: ClientConfig, discovery: Discovery, dial: DialFn<C>) -> Channel<C> {
        Channel {
            stack: None,
            interceptor: None,
            inner: Arc::new(Inner {
                current: RwLock::new(None),
                redial: None,
                balancer: Some(Arc::new(Balancer::new(config.clone(), discovery, dial))),
                throttle: RetryThrottle::new(&config),
                config,
            }),
        }
    }

    /// A balanced channel over the endpoints that `endpoints` yields, each item the whole
    /// set from then on (a service registry's or an orchestrator's view, say): endpoints
    /// new to a set are connected, those that left it get no new calls while their calls
    /// in flight finish.
    ///
    /// Each call goes to a usable endpoint (connected, not draining after a GOAWAY,
    /// `SERVING` if [`BalanceConfig::health_check_service`](crate::BalanceConfig::health_check_service)
    /// is set, not ejected after failing calls), picked by
    /// [`BalanceConfig::strategy`](crate::BalanceConfig::strategy). Nothing is dialled
    /// before the first call; from then on every endpoint is kept connected, with
    /// exponential back-off and jitter between failed dials. A call that finds no endpoint
    /// usable waits while one is being dialled (within its deadline), else fails with
    /// `UNAVAILABLE` (or waits, with [`ClientConfig::wait_for_ready`]).
    ///
    /// ```no_run
    /// # fn f<AnyConnection: rpc_core::Dial>() {
    /// use rpc_core::{Channel, ClientConfig, Endpoint};
    /// let (tx, rx) = tokio::sync::watch::channel(vec!["tcp://10.0.0.1:50051".parse::<Endpoint>().unwrap()]);
    /// let updates = tokio_stream_like(rx); // any Stream<Item = Vec<Endpoint>>
    /// # fn tokio_stream_like<T>(_: T) -> futures_util::stream::Empty<Vec<Endpoint>> { futures_util::stream::empty() }
    /// let channel = Channel::<AnyConnection>::balanced(ClientConfig::default(), updates);
    /// # }
    /// ```
    pub fn balanced<S>(config: ClientConfig, endpoints: S) -> Channel<C>
    where
        C: Dial,
        S: futures_util::Stream<Item = Vec<Endpoint>> + Send + 'static,
    {
        Channel::balanced_with(config, endpoints, |endpoint| {
            let endpoint = endpoint.clone();
            async move { C::dial(&endpoint).await }
        })
    }

    /// [`Channel::balanced`], dialling each endpoint with `dial`.
    pub fn balanced_with<S, F, Fut>(config: ClientConfig, endpoints: S, dial: F) -> Channel<C>
    where
        S: futures_util::Stream<Item = Vec<Endpoint>> + Send + 'static,
        F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        let dial: DialFn<C> =
            Arc::new(move |endpoint: &Endpoint| Box::pin(dial(endpoint)) as Dialing<C>);
        Channel::from_discovery(config, Discovery::Stream(Box::pin(endpoints)), dial)
    }

    /// A channel over the connection `shared` alone (a balanced endpoint's health watch).
    pub(super) fn over(shared: Arc<Shared<C>>, config: ClientConfig) -> Channel<C> {
        Channel {
            stack: None,
            interceptor: None,
            inner: Arc::new(Inner {
                current: RwLock::new(Some(shared)),
                redial: None,
                balancer: None,
                throttle: RetryThrottle::new(&config),
                config,
            }),
        }
    }

    /// The endpoints of a balanced channel and their state (empty for a channel over one
    /// connection, and before a balanced channel's first call).
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.inner
            .balancer
            .as_ref()
            .map_or_else(Vec::new, |balancer| balancer.endpoints())
    }

    /// A channel to `url` that connects on its first call ([`Channel::lazy`]): creating
    /// it never waits, and fails only for a URL that is not an endpoint.
    ///
    /// # Errors
    /// A URL that is not an endpoint; unusable settings ([`Dial::client_config`]).
    /// A target naming several endpoints makes a balanced channel, as for
    /// [`Channel::connect`].
    pub fn connect_lazy(url: &str) -> Result<Channel<C>, TransportError>
    where
        C: Dial,
    {
        Channel::connect_lazy_with(url, C::client_config()?)
    }

    /// [`Channel::connect_lazy`] with `config` instead of the connection type's settings.
    ///
    /// # Errors
    /// A URL that is not an endpoint or a target.
    pub fn connect_lazy_with(url: &str, config: ClientConfig) -> Result<Channel<C>, TransportError>
    where
        C: Dial,
    {
        Channel::connect_lazy_dialing(url, config, dial_with::<C>)
    }

    /// [`Channel::connect_lazy_with`] for any connection type, dialling each endpoint
    /// with `dial`.
    ///
    /// # Errors
    /// A URL that is not an endpoint or a target.
    pub fn connect_lazy_dialing<F, Fut>(
        url: &str,
        config: ClientConfig,
        dial: F,
    ) -> Result<Channel<C>, TransportError>
    where
        F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
    {
        Ok(match Target::parse(url)? {
            Target::One(endpoint) => Channel::lazy(config, dialer(endpoint, dial)),
            target => Channel::from_target(config, target, dial),
        })
    }

    /// This channel (sharing its connection with every clone) with `interceptor` run on
    /// every call's request head before it is sent: it may add metadata (a token, a
    /// trace context) or refuse the call with a status, which the call then returns
    /// without reaching the network. Interceptors added one after another run in that
    /// order; clones made before keep theirs.
    ///
    /// ```
    /// # fn f(channel: rpc_core::Channel<rpc_core::memory::MemoryConnection>) {
    /// let authed = channel.with_interceptor(|mut request: rpc_core::Request<()>| {
    ///     request.metadata_mut().insert("authorization", "Bearer s3cret");
    ///     Ok(request)
    /// });
    /// # }
    /// ```
    pub fn with_interceptor(&self, interceptor: impl Interceptor) -> Channel<C> {
        let interceptor: Arc<dyn Interceptor> = match &self.interceptor {
            Some(first) => Arc::new(Chain(vec![first.clone(), Arc::new(interceptor)])),
            None => Arc::new(interceptor),
        };
        Channel {
            stack: self.stack.clone(),
            inner: self.inner.clone(),
            interceptor: Some(interceptor),
        }
    }

    /// This channel (sharing its connection with every clone) with its unary calls run
    /// through `layer`, a tower layer: a timeout, a rate or concurrency limit, a retry
    /// policy, load shedding. The layered service takes a [`Request`] of
    /// [`ClientCall`](crate::layer::ClientCall) (the method and the encoded message) and
    /// answers a [`Response`] of the encoded response; its errors become statuses
    /// ([`layer::to_status`](crate::layer::to_status)). Layers added later wrap those
    /// added before; interceptors run before every layer. Streaming calls do not go
    /// through layers. Generated clients over the returned channel use the layers.
    ///
    /// ```
    /// # fn f(channel: rpc_core::Channel<rpc_core::memory::MemoryConnection>) {
    /// let limited = channel.layer(tower::limit::ConcurrencyLimitLayer::new(8));
    /// # }
    /// ```
    pub fn layer<L>(&self, layer: L) -> Channel<C>
    where
        L: tower::Layer<ClientStack>,
        L::Service: tower::Service<Request<ClientCall>, Response = Response<bytes::Bytes>>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<Request<ClientCall>>>::Error: Into<BoxError>,
        <L::Service as tower::Service<Request<ClientCall>>>::Future: Send + 'static,
    {
        use tower::ServiceExt;
        let inner = self.stack.clone().unwrap_or_else(|| {
            // The bottom: this channel without layers or interceptors (those run first).
            let bottom = Channel {
                inner: self.inner.clone(),
                interceptor: None,
                stack: None,
            };
            tower::util::BoxCloneSyncService::new(bottom.map_err(BoxError::from))
        });
        Channel {
            inner: self.inner.clone(),
            interceptor: self.interceptor.clone(),
            stack: Some(tower::util::BoxCloneSyncService::new(
                layer.layer(inner).map_err(Into::into),
            )),
        }
    }

    /// Sends `request` through the layers `stack`, within the request's timeout (or the
    /// channel's default): time spent waiting in a layer (for a concurrency permit, a
    /// rate limit) counts against the call's deadline.
    async fn through_layers(
        &self,
        stack: &ClientStack,
        request: Request<ClientCall>,
    ) -> Result<Response<bytes::Bytes>, Status> {
        use tower::ServiceExt;
        let mut request = request;
        let timeout = request.timeout().or(self.inner.config.timeout);
        if let Some(deadline) = timeout.and_then(|t| Instant::now().checked_add(t)) {
            // The bottom of the stack tells the server the time left, not the timeout.
            request.extensions_mut().insert(LayerDeadline(deadline));
        }
        let call = stack.clone().oneshot(request);
        match timeout {
            Some(t) => tokio::time::timeout(t, call)
                .await
                .map_err(|_| Status::deadline_exceeded(format!("deadline of {t:?} exceeded")))?
                .map_err(to_status),
            None => call.await.map_err(to_status),
        }
    }

    /// The request after this channel's interceptor, if it has one.
    fn intercepted<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        match &self.interceptor {
            Some(interceptor) => intercept(&**interceptor, request),
            None => Ok(request),
        }
    }

    /// Whether a call that finds its connection gone or draining can go to another one.
    fn reconnects(&self) -> bool {
        self.inner.redial.is_some() || self.inner.balancer.is_some()
    }

    fn current(&self) -> Option<Arc<Shared<C>>> {
        self.inner.current.read().clone()
    }

    /// The connection calls go to, replacing a failed or draining one first if this
    /// channel reconnects. Calls in flight on a draining connection finish there. A
    /// balanced channel picks another connection than `avoid` if it has one usable.
    async fn ready(&self, avoid: Option<&Shared<C>>) -> Result<Arc<Shared<C>>, Status> {
        let usable = |shared: &Shared<C>| {
            let calls = shared.calls.lock();
            !calls.is_closed() && !calls.is_draining()
        };
        if let Some(balancer) = &self.inner.balancer {
            return balancer.pick(avoid).await;
        }
        let current = self.current();
        let Some(redial) = &self.inner.redial else {
            // A channel without redial was made with its connection.
            return current.ok_or_else(|| Status::unavailable("no connection"));
        };
        if let Some(current) = current.filter(|c| usable(c)) {
            return Ok(current);
        }
        let wait_for_ready = self.inner.config.wait_for_ready;
        loop {
            // Held by whoever dials (the dial task below), so callers that find a dial
            // under way wait for its outcome here.
            let one_at_a_time = redial.lock.clone().lock_owned().await;
            let current = self.current();
            if let Some(current) = current.as_ref().filter(|c| usable(c)) {
                return Ok(current.clone()); // someone else (re)connected meanwhile
            }
            let failed = redial.last_failure.lock().clone();
            if let Some(failure) = &failed {
                let left = failure.retry_at.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    if !wait_for_ready {
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
            let inner = self.inner.clone();
            let reconnect = current.is_some();
            let dial = tokio::spawn(async move {
                let _one_at_a_time = one_at_a_time;
                dial_and_record(&inner, failed, reconnect).await
            });
            match dial.await {
                Ok(Ok(fresh)) => return Ok(fresh),
                Ok(Err(status)) if !wait_for_ready => return Err(status),
                Ok(Err(_)) => {} // the next turn waits out the back-off
                Err(e) => return Err(Status::internal(format!("the dial task failed: {e}"))),
            }
        }
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

    /// Makes one unary call of `method`.
    ///
    /// The request is encoded straight into a buffer of the transport. Dropping the
    /// returned future cancels the call: the server is told and drops its handler.
    ///
    /// # Errors
    /// The server's status; `DEADLINE_EXCEEDED` when the request's (or the channel's
    /// default) timeout passes; `RESOURCE_EXHAUSTED` for a request over the configured
    /// maximum; `UNAVAILABLE` when the connection fails; `INTERNAL` for an undecodable
    /// response.
    pub async fn unary<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.unary_with(request, method, |payload| payload.decode::<Resp>())
            .await
    }

    /// Like [`Channel::unary`], with the response decoded by `decode` instead of
    /// `Resp::decode`: for messages whose type is only known at run time (e.g.
    /// `prost_reflect::DynamicMessage` in a load generator).
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn unary_with<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
    {
        self.call(request, method, None, decode).await
    }

    /// Like [`Channel::unary`], for a request type whose large `bytes` fields are sent
    /// from where they lie (a gathered write, on transports that have one) instead of
    /// being copied into the frame; generated clients use it for such requests.
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn unary_gathered<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
    ) -> Result<Response<Resp>, Status>
    where
        Req: SplitLarge,
        Resp: prost::Message + Default,
    {
        self.unary_gathered_with(request, method, |payload| payload.decode::<Resp>())
            .await
    }

    /// [`Channel::unary_gathered`] with the response decoded by `decode`, as
    /// [`Channel::unary_with`].
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn unary_gathered_with<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: SplitLarge,
    {
        self.call(request, method, Some(Req::split_large), decode)
            .await
    }

    /// Makes a server-streaming call of `method`: one request, a stream of responses.
    ///
    /// Resolves once the server answered with its response headers (or failed the
    /// call); the messages then come from the returned [`Streaming`]. The request's (or
    /// the channel's default) timeout covers the whole stream. Dropping the
    /// [`Streaming`] (or this future) cancels the call on the server.
    ///
    /// # Errors
    /// As [`Channel::unary`], for the call's start.
    pub async fn server_streaming<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default + 'static,
    {
        self.server_streaming_with(request, method, |b| Payload::Shared(b).decode::<Resp>())
            .await
    }

    /// Like [`Channel::server_streaming`], with each response decoded by `decode` (for
    /// messages whose type is only known at run time, as [`Channel::unary_with`]).
    ///
    /// # Errors
    /// As [`Channel::server_streaming`].
    pub async fn server_streaming_with<Req, Resp: 'static>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        decode: impl Fn(bytes::Bytes) -> Result<Resp, prost::DecodeError> + Send + Sync + 'static,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
    {
        let (metadata, message, timeout) = self.intercepted(request)?.into_parts();
        let open = self
            .open(
                &metadata,
                Some(&message),
                method,
                timeout,
                MethodKind::ServerStreaming,
            )
            .await?;
        open.streaming(decode).await
    }

    /// Makes a client-streaming call of `method`: the messages of `request`'s stream,
    /// sent as the server's window allows, then its one response.
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn client_streaming<S, Resp>(
        &self,
        request: S,
        method: &MethodDescriptor,
    ) -> Result<Response<Resp>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
        Resp: prost::Message + Default,
    {
        self.client_streaming_with(request, method, |payload| payload.decode::<Resp>())
            .await
    }

    /// Like [`Channel::client_streaming`], with the response decoded by `decode` (as
    /// [`Channel::unary_with`]).
    ///
    /// # Errors
    /// As [`Channel::client_streaming`].
    pub async fn client_streaming_with<S, Resp>(
        &self,
        request: S,
        method: &MethodDescriptor,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
    {
        let request = self.intercepted(request.into_streaming_request())?;
        let (metadata, stream, timeout) = request.into_parts();
        let open = self
            .open::<S::Message>(
                &metadata,
                None,
                method,
                timeout,
                MethodKind::ClientStreaming,
            )
            .await?;
        let mut open = open.pump(stream, self.inner.config.max_message_size);
        let result = open.response().await?;
        decode_response(&result, decode)
    }

    /// Makes a bidirectional streaming call of `method`: `request`'s stream is sent as
    /// the server's window allows, while the responses come from the returned
    /// [`Streaming`] (once the server sent its response headers).
    ///
    /// # Errors
    /// As [`Channel::server_streaming`].
    pub async fn streaming<S, Resp>(
        &self,
        request: S,
        method: &MethodDescriptor,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
        Resp: prost::Message + Default + 'static,
    {
        self.streaming_with(request, method, |b| Payload::Shared(b).decode::<Resp>())
            .await
    }

    /// Like [`Channel::streaming`], with each response decoded by `decode`.
    ///
    /// # Errors
    /// As [`Channel::streaming`].
    pub async fn streaming_with<S, Resp: 'static>(
        &self,
        request: S,
        method: &MethodDescriptor,
        decode: impl Fn(bytes::Bytes) -> Result<Resp, prost::DecodeError> + Send + Sync + 'static,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
    {
        let request = self.intercepted(request.into_streaming_request())?;
        let (metadata, stream, timeout) = request.into_parts();
        let open = self
            .open::<S::Message>(&metadata, None, method, timeout, MethodKind::Streaming)
            .await?;
        open.pump(stream, self.inner.config.max_message_size)
            .streaming(decode)
            .await
    }

    /// Registers a streaming call and sends its opening request (with `message`, for a
    /// server-streaming call).
    async fn open<Req: prost::Message>(
        &self,
        metadata: &Metadata,
        message: Option<&Req>,
        method: &MethodDescriptor,
        timeout: Option<std::time::Duration>,
        kind: MethodKind,
    ) -> Result<OpenStream<C>, Status> {
        let config = &self.inner.config;
        let timeout = timeout.or(config.timeout);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let payload_len = message.map_or(0, |m| m.encoded_len());
        let max = config.max_message_size.min(u32::MAX as usize);
        if payload_len > max {
            return Err(Status::resource_exhausted(format!(
                "request message of {payload_len} bytes exceeds the maximum of {max}"
            )));
        }
        metadata
            .check()
            .map_err(|e| Status::resource_exhausted(e.to_string()))?;
        let window = config
            .stream_window
            .clamp(1, crate::wire::MAX_STREAM_WINDOW as u32);
        let open = async {
            let mut inbox = None;
            let mut outbox = None;
            let mut response = None;
            let mut picks = 0;
            let (shared, call_id) = loop {
                let shared = self.ready(None).await?;
                let inserted = shared.calls.lock().insert_with(|call_id| {
                    // The server grants the request stream's window when the call starts.
                    let outgoing = kind
                        .client_streams()
                        .then(|| Arc::new(Outbox::closed_window()));
                    outbox.clone_from(&outgoing);
                    if kind.server_streams() {
                        let incoming =
                            Arc::new(Inbox::new(call_id, shared.control.clone(), window, window));
                        inbox = Some(incoming.clone());
                        Waiter::Stream(incoming, outgoing)
                    } else {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        response = Some(rx);
                        Waiter::Upload(tx, outgoing.expect("client-streaming"))
                    }
                });
                match inserted {
                    Ok(call_id) => break (shared, call_id),
                    // Nothing was sent: a channel with other connections picks again.
                    Err(_) if self.reconnects() && picks < 3 => picks += 1,
                    Err(NotAdmitted::Closed(status)) => return Err(status),
                    Err(NotAdmitted::Draining) => {
                        return Err(Status::unavailable("server is shutting down (GOAWAY)"))
                    }
                }
            };
            let mut guard = StreamGuard {
                shared: shared.clone(),
                call_id,
                sent: false,
                pump: None,
            };
            let mut header = Header::new(FrameKind::Request, call_id);
            header.method_id = method.id;
            // The time left after connecting, as a retried unary call tells it.
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            header.timeout_us = left.map_or(0, |t| t.as_micros().clamp(1, u64::MAX as u128) as u64);
            if kind.server_streams() {
                header.credits = window;
            }
            if message.is_some() {
                header.flags = Flags::END_STREAM;
                header.payload_len = payload_len as u32;
            }
            shared.conn.calling(method);
            let sent = send_frame(&*shared.conn, header, metadata, |buf| {
                if let Some(message) = message {
                    message.encode_raw(buf);
                }
            })
            .await;
            guard.mark_sent();
            sent?;
            Ok(OpenStream {
                guard,
                inbox,
                outbox,
                response,
                deadline,
            })
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, open).await.unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "deadline of {t:?} exceeded"
                )))
            }),
            None => open.await,
        }
    }

    async fn call<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        split: Option<SplitFn<Req>>,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
    {
        let request = self.intercepted(request)?;
        if let Some(stack) = &self.stack {
            let request = request.map(|message| ClientCall::encode(*method, &message));
            let response = self.through_layers(stack, request).await?;
            let (metadata, message, trailers) = response.into_all_parts();
            let message = decode(Payload::Shared(message))
                .map_err(|e| Status::internal(format!("failed to decode response: {e}")))?;
            let mut response = Response::from_parts(metadata, message);
            *response.trailers_mut() = trailers;
            return Ok(response);
        }
        let span = tracing::debug_span!(
            "rpc-call",
            method = method.path,
            call_id = tracing::field::Empty
        );
        let frame = self
            .exchange(request, method, split, &span)
            .instrument(span.clone())
            .await?;
        decode_response(&frame, decode)
    }

    /// Sends the request and waits for its response frame.
    async fn exchange<Req: prost::Message>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        split: Option<SplitFn<Req>>,
        span: &tracing::Span,
    ) -> Result<Inbound<C::RecvBuf>, Status> {
        let (metadata, message, timeout) = request.into_parts();
        let config = &self.inner.config;
        let timeout = timeout.or(config.timeout);
        let payload_len = message.encoded_len();
        let max = config.max_message_size.min(u32::MAX as usize);
        if payload_len > max {
            return Err(Status::resource_exhausted(format!(
                "request message of {payload_len} bytes exceeds the maximum of {max}"
            )));
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        metadata
            .check()
            .map_err(|e| Status::resource_exhausted(e.to_string()))?;

        let exchange = async {
            let mut retries = 0;
            let mut attempts = 1;
            // The connection of the attempt before: a retry goes elsewhere if it can.
            let mut last = None;
            loop {
                // A retry tells the server the time that is left, not the original timeout.
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                let result = self
                    .attempt(
                        &metadata,
                        &message,
                        split,
                        method,
                        payload_len,
                        left,
                        span,
                        &mut last,
                    )
                    .await;
                // A call the server refused without starting it (it was draining) goes
                // once more on a fresh connection, if this channel makes them.
                if let Ok(frame) = &result {
                    if retries < config.max_transparent_retries
                        && self.reconnects()
                        && is_refused(frame.bytes())
                    {
                        retries += 1;
                        tracing::debug!(
                            retries,
                            "call refused by a draining server; sending it again"
                        );
                        continue;
                    }
                }
                // A failure the retry policy covers goes again, after a back-off, to a
                // usable connection (another endpoint, on a balanced channel), unless
                // failures are so frequent that retries are throttled.
                if let Some(policy) = &config.retry {
                    let code = match &result {
                        Ok(frame) => response_code(frame.bytes()),
                        Err(status) => status.code(),
                    };
                    if code == Code::Ok {
                        self.inner.throttle.success();
                    } else if policy.retries(method, code) {
                        let allowed = self.inner.throttle.failure();
                        let backoff = jitter(policy.backoff(attempts));
                        let in_time = deadline.is_none_or(|d| Instant::now() + backoff < d);
                        if allowed && in_time && attempts < policy.max_attempts.min(MAX_ATTEMPTS) {
                            tracing::debug!(attempts, ?code, "retrying the call (retry policy)");
                            tokio::time::sleep(backoff).await;
                            attempts += 1;
                            continue;
                        }
                    }
                }
                return result;
            }
        };
        match timeout {
            Some(t) => match tokio::time::timeout(t, exchange).await {
                Ok(result) => result,
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "deadline of {t:?} exceeded"
                ))),
            },
            None => exchange.await,
        }
    }

    /// Sends the request once, on the current connection (on a balanced channel, one
    /// other than `last`'s if it can, then kept in `last`), and waits for its response.
    #[allow(clippy::too_many_arguments)]
    async fn attempt<Req: prost::Message>(
        &self,
        metadata: &Metadata,
        message: &Req,
        split: Option<SplitFn<Req>>,
        method: &MethodDescriptor,
        payload_len: usize,
        timeout: Option<std::time::Duration>,
        span: &tracing::Span,
        last: &mut Option<Arc<Shared<C>>>,
    ) -> Result<Inbound<C::RecvBuf>, Status> {
        let mut unsent = 0;
        loop {
            let (shared, call_id, response) = self.admitted(last).await?;
            let sent = self
                .send_and_wait(
                    &shared,
                    call_id,
                    response,
                    metadata,
                    message,
                    split,
                    method,
                    payload_len,
                    timeout,
                    span,
                )
                .await;
            match sent {
                Sent::Answered(result) => return result,
                // The transport did not take the request: it never left, so a channel
                // that has other connections (or makes new ones) sends it on another.
                Sent::NotTaken(e) if self.reconnects() && unsent < MAX_UNSENT => {
                    tracing::debug!("request not taken by the transport ({e}); picking again");
                    unsent += 1;
                    // Not picked again: it takes no more calls, though its reader may
                    // not have seen the end yet (calls in flight on it still end there).
                    let first = {
                        let mut calls = shared.calls.lock();
                        let first = !calls.is_draining();
                        let _ = calls.drain(); // (no acknowledgement: it is gone)
                        first
                    };
                    if first {
                        shared.changed();
                    }
                }
                Sent::NotTaken(e) => return Err(e.into()),
            }
        }
    }

    /// A connection (on a balanced channel, one other than `last`'s if it can, then kept
    /// in `last`) and the call's place in its table.
    async fn admitted(
        &self,
        last: &mut Option<Arc<Shared<C>>>,
    ) -> Result<(Arc<Shared<C>>, u64, CallResponse<C>), Status> {
        let mut draining_seen = 0;
        loop {
            let shared = self.ready(last.as_deref()).await?;
            *last = Some(shared.clone());
            let inserted = shared.calls.lock().insert();
            match inserted {
                Ok((call_id, response)) => return Ok((shared, call_id, response)),
                // The connection closed between the pick and now: nothing was sent, so a
                // channel that has others (or makes new ones) picks again.
                Err(NotAdmitted::Closed(status)) if !self.reconnects() || draining_seen > 2 => {
                    return Err(status)
                }
                Err(NotAdmitted::Closed(_)) => draining_seen += 1,
                // Without reconnecting there is no other connection; with it, `ready`
                // replaces the draining one (a race with another caller: try again).
                Err(NotAdmitted::Draining) if !self.reconnects() || draining_seen > 2 => {
                    return Err(Status::unavailable("server is shutting down (GOAWAY)"))
                }
                Err(NotAdmitted::Draining) => draining_seen += 1,
            }
        }
    }

    /// Sends the request of call `call_id` on `shared` and waits for its `response`.
    #[allow(clippy::too_many_arguments)]
    async fn send_and_wait<Req: prost::Message>(
        &self,
        shared: &Shared<C>,
        call_id: u64,
        response: CallResponse<C>,
        metadata: &Metadata,
        message: &Req,
        split: Option<SplitFn<Req>>,
        method: &MethodDescriptor,
        payload_len: usize,
        timeout: Option<std::time::Duration>,
        span: &tracing::Span,
    ) -> Sent<C> {
        span.record("call_id", call_id);
        let mut guard = CallGuard {
            shared,
            call_id,
            sent: false,
        };
        let mut header = Header::new(FrameKind::Request, call_id);
        header.flags = Flags::END_STREAM;
        header.method_id = method.id;
        header.timeout_us = timeout.map_or(0, |t| t.as_micros().clamp(1, u64::MAX as u128) as u64);
        header.payload_len = payload_len as u32;
        shared.conn.calling(method);
        // Large `bytes` fields go by gathered write where the transport has one.
        let split = split
            .zip(shared.conn.gather_min())
            .and_then(|(split, min)| split(message, min));
        let sent = match split {
            Some((rest, fields)) => {
                let rest_len = rest.encoded_len();
                let encode = |buf: &mut C::SendBuf| rest.encode_raw(buf);
                send_split(&*shared.conn, header, metadata, rest_len, encode, fields).await
            }
            None => {
                send_frame(&*shared.conn, header, metadata, |buf| {
                    message.encode_raw(buf)
                })
                .await
            }
        };
        guard.mark_sent();
        match sent {
            Ok(()) => {}
            Err(e @ (TransportError::Closed | TransportError::Io(_))) => return Sent::NotTaken(e),
            Err(e) => return Sent::Answered(Err(e.into())),
        }
        let frame = match response.await {
            Ok(outcome) => outcome,
            Err(_) => Err(Status::unavailable("connection closed")),
        };
        if let Some(endpoint) = &shared.endpoint {
            // A refusal by a draining server says nothing of the endpoint's health.
            match &frame {
                Ok(frame) if is_refused(&frame[..]) => {}
                Ok(frame) => endpoint.record(response_code(&frame[..])),
                Err(status) => endpoint.record(status.code()),
            }
        }
        // Answered calls left the table when their response arrived; a call that is still
        // there (deadline, failed send) is cancelled on the server by the guard.
        drop(guard);
        Sent::Answered(frame.map(|frame| {
            // A successful response with a payload is offered to the caller: kept, its
            // `bytes` fields are slices of the frame (the transport decides).
            let keep = Frame::parse(&frame[..]).is_ok_and(|f| {
                f.header.status == Code::Ok as u8 && f.header.payload_len > 0 && !f.is_discarded()
            });
            if keep {
                payload::keep(&*shared.conn, frame)
            } else {
                Inbound::Held(frame)
            }
        }))
    }
}

/// Times a request the transport did not take is sent again on another connection.
const MAX_UNSENT: u32 = 2;

/// Where a call's response comes from.
type CallResponse<C> =
    tokio::sync::oneshot::Receiver<super::calls::Outcome<<C as Connection>::RecvBuf>>;

/// How sending a request on a connection ended.
enum Sent<C: Connection> {
    /// The transport took it; the call's outcome.
    Answered(Result<Inbound<C::RecvBuf>, Status>),
    /// The transport did not take it (its connection is gone): it never left.
    NotTaken(TransportError),
}

/// A streaming call whose opening request was sent.
struct OpenStream<C: Connection> {
    guard: StreamGuard<C>,
    inbox: Option<Arc<Inbox>>,
    outbox: Option<Arc<Outbox>>,
    response: Option<tokio::sync::oneshot::Receiver<super::calls::Outcome<C::RecvBuf>>>,
    deadline: Option<Instant>,
}

impl<C: Connection> OpenStream<C> {
    /// Starts sending `stream`'s messages on a task of their own, as the window allows,
    /// then the half-close. The task ends with the call.
    fn pump<S>(mut self, stream: S, max_message_size: usize) -> Self
    where
        S: futures_util::Stream + Send + 'static,
        S::Item: prost::Message + 'static,
    {
        let outbox = self.outbox.clone().expect("a client-streaming call");
        let shared = self.guard.shared.clone();
        let call_id = self.guard.call_id;
        let (handle, registration) = AbortHandle::new_pair();
        self.guard.pump = Some(handle);
        let task = async move {
            let max = max_message_size.min(u32::MAX as usize);
            let mut stream = std::pin::pin!(stream);
            while let Some(message) = stream.next().await {
                let len = prost::Message::encoded_len(&message);
                if len > max {
                    // The call fails here; the server is told.
                    let status = Status::resource_exhausted(format!(
                        "request message of {len} bytes exceeds the maximum of {max}"
                    ));
                    let waiter = shared.calls.lock().take(call_id);
                    if let Some(waiter) = waiter {
                        waiter.fail(status);
                        shared.control.cancel_stream(call_id);
                    }
                    return;
                }
                if outbox.reserve(HEADER_LEN + len).await.is_err() {
                    return; // the call is over
                }
                let mut header = Header::new(FrameKind::Message, call_id);
                header.payload_len = len as u32;
                let sent = send_frame(&*shared.conn, header, &Metadata::new(), |buf| {
                    prost::Message::encode_raw(&message, buf)
                })
                .await;
                match sent {
                    Ok(()) => {}
                    // The connection failed: the receive side fails the call.
                    Err(TransportError::Closed) => return,
                    // This frame only (e.g. over the transport's frame limit): the call
                    // fails here and the server is told.
                    Err(e) => {
                        let status = match e {
                            TransportError::TooLarge { .. } => {
                                Status::resource_exhausted(e.to_string())
                            }
                            e => Status::unavailable(e.to_string()),
                        };
                        let waiter = shared.calls.lock().take(call_id);
                        if let Some(waiter) = waiter {
                            waiter.fail(status);
                            shared.control.cancel_stream(call_id);
                        }
                        return;
                    }
                }
            }
            let mut header = Header::new(FrameKind::Message, call_id);
            header.flags = Flags::END_STREAM;
            let _ = send_frame(&*shared.conn, header, &Metadata::new(), |_| {}).await;
        };
        tokio::spawn(
            Abortable::new(task, registration)
                .instrument(tracing::debug_span!("rpc-stream-send", call_id)),
        );
        self
    }

    /// Waits for the response headers and hands out the response stream.
    async fn streaming<Resp: 'static>(
        self,
        decode: impl Fn(bytes::Bytes) -> Result<Resp, prost::DecodeError> + Send + Sync + 'static,
    ) -> Result<Response<Streaming<Resp>>, Status> {
        let inbox = self.inbox.clone().expect("a server-streaming call");
        let headers = std::future::poll_fn(|cx| inbox.poll_headers(cx));
        let headers = match self.deadline {
            Some(d) => tokio::time::timeout_at(d.into(), headers)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("deadline exceeded"))),
            None => headers.await,
        }?;
        let mut stream = Streaming::raw(inbox, Code::Internal).with_decoder(decode);
        stream.attach(Box::new(self.guard), self.deadline);
        Ok(Response::from_parts(headers, stream))
    }

    /// Waits for a client-streaming call's response frame.
    async fn response(&mut self) -> Result<Inbound<C::RecvBuf>, Status> {
        let rx = self.response.take().expect("a client-streaming call");
        let frame = async {
            match rx.await {
                Ok(outcome) => outcome,
                Err(_) => Err(Status::unavailable("connection closed")),
            }
        };
        let frame = match self.deadline {
            Some(d) => tokio::time::timeout_at(d.into(), frame)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("deadline exceeded"))),
            None => frame.await,
        }?;
        let shared = &self.guard.shared;
        let keep = Frame::parse(&frame[..]).is_ok_and(|f| {
            f.header.status == Code::Ok as u8 && f.header.payload_len > 0 && !f.is_discarded()
        });
        Ok(if keep {
            payload::keep(&*shared.conn, frame)
        } else {
            Inbound::Held(frame)
        })
    }
}

/// Cancels a streaming call on the server when dropped while the call still runs, and
/// stops its request stream's task.
struct StreamGuard<C: Connection> {
    shared: Arc<Shared<C>>,
    call_id: u64,
    sent: bool,
    pump: Option<AbortHandle>,
}

impl<C: Connection> StreamGuard<C> {
    fn mark_sent(&mut self) {
        if !std::mem::replace(&mut self.sent, true) && self.shared.calls.lock().sent() {
            self.shared.control.goaway();
        }
    }
}

impl<C: Connection> CallHandle for StreamGuard<C> {}

impl<C: Connection> Drop for StreamGuard<C> {
    fn drop(&mut self) {
        self.mark_sent();
        if let Some(pump) = self.pump.take() {
            pump.abort();
        }
        let was_running = self.shared.calls.lock().remove(self.call_id);
        if was_running {
            tracing::debug!(
                call_id = self.call_id,
                "stream abandoned; cancelling on the server"
            );
            self.shared.control.cancel_stream(self.call_id);
        }
    }
}

/// [`SplitLarge::split_large`] of a request type.
type SplitFn<Req> = fn(&Req, usize) -> Option<(Req, Vec<(u32, bytes::Bytes)>)>;

/// Whether `frame` is a response the server flagged as not started and `UNAVAILABLE`.
/// The status code of a response frame (`INTERNAL` for one that does not parse).
fn response_code(frame: &[u8]) -> Code {
    Frame::parse(frame).map_or(Code::Internal, |f| Code::from_u8(f.header.status))
}

fn is_refused(frame: &[u8]) -> bool {
    Frame::parse(frame).is_ok_and(|f| {
        f.header.flags.contains(Flags::REFUSED)
            && Code::from_u8(f.header.status) == Code::Unavailable
    })
}

/// Removes an abandoned call from the table and tells the server to drop its handler.
///
/// Runs on every exit of a call, including when the caller drops the call's future: that
/// is how dropping a future cancels the call.
struct CallGuard<'a, C: Connection> {
    shared: &'a Shared<C>,
    call_id: u64,
    /// Whether the request was handed to the transport (or failed to be).
    sent: bool,
}

impl<C: Connection> CallGuard<'_, C> {
    /// The request left the caller's hands: no longer counted as unsent.
    fn mark_sent(&mut self) {
        if !std::mem::replace(&mut self.sent, true) && self.shared.calls.lock().sent() {
            self.shared.control.goaway();
        }
    }
}

impl<C: Connection> Drop for CallGuard<'_, C> {
    fn drop(&mut self) {
        self.mark_sent();
        let was_waiting = self.shared.calls.lock().remove(self.call_id);
        if was_waiting {
            tracing::debug!(
                call_id = self.call_id,
                "call abandoned; cancelling on the server"
            );
            self.shared.control.cancel(self.call_id);
        }
    }
}

fn decode_response<B: std::ops::Deref<Target = [u8]>, Resp>(
    inbound: &Inbound<B>,
    decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
) -> Result<Response<Resp>, Status> {
    let frame = Frame::parse(inbound.bytes())
        .map_err(|e| Status::internal(format!("bad response frame: {e}")))?;
    if frame.is_discarded() {
        return Err(Status::resource_exhausted(format!(
            "response message of {} bytes exceeds the maximum",
            frame.header.payload_len
        )));
    }
    let code = Code::from_u8(frame.header.status);
    if code != Code::Ok {
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        let message = String::from_utf8_lossy(frame.payload);
        return Err(Status::from_metadata(code, message, metadata));
    }
    let metadata = Metadata::decode(frame.metadata).map_err(|e| Status::internal(e.to_string()))?;
    let (metadata, trailers) = metadata.split_trailers();
    let message = decode(inbound.payload(frame.payload))
        .map_err(|e| Status::internal(format!("failed to decode response: {e}")))?;
    let mut response = Response::from_parts(metadata, message);
    *response.trailers_mut() = trailers;
    Ok(response)
}

/// Receives frames and hands responses to their callers until the connection ends
/// (transports that do not run to completion; see [`Dispatch`] for those that do).
///
/// It holds the connection but only a weak reference to the channel's state, so dropping
/// the last [`Channel`] closes the connection, which ends this loop.
async fn receive_loop<C: Connection>(conn: Arc<C>, shared: std::sync::Weak<Shared<C>>) {
    let mut run = Vec::new();
    let reason = loop {
        let received = conn.recv().await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        match received {
            Ok(Some(buf)) => {
                // The frames that arrived with it are handled as one run.
                run.push(buf);
                conn.recv_ready(&mut run, MAX_RUN);
                if let Err(reason) = dispatch_run(&strong, &mut run) {
                    break reason;
                }
            }
            Ok(None) => break Status::unavailable("connection closed by peer"),
            Err(e) => break Status::unavailable(e.to_string()),
        }
    };
    if let Some(strong) = shared.upgrade() {
        ended(&strong, reason);
    }
    conn.close();
}

/// Most frames the receive loop handles as one run.
const MAX_RUN: usize = 256;

/// The header of a frame that is a stream message with a payload to queue.
fn stream_message(buf: &[u8]) -> Option<Header> {
    let header = Frame::parse(buf).ok()?.header;
    (header.kind == FrameKind::Message
        && !header.flags.contains(Flags::DISCARDED)
        && !header.flags.contains(Flags::END_STREAM))
    .then_some(header)
}

/// Hands a run of received frames to their callers: consecutive messages of one stream
/// go to its inbox together (one lookup, one lock, one wake-up, one allocation for
/// their copies), anything else frame by frame as [`dispatch`] does.
fn dispatch_run<C: Connection>(
    shared: &Shared<C>,
    run: &mut Vec<C::RecvBuf>,
) -> Result<(), Status> {
    if run.len() == 1 {
        return dispatch(shared, run.pop().expect("one"));
    }
    let mut frames = run.drain(..).peekable();
    let mut group = Vec::new();
    while let Some(buf) = frames.next() {
        let Some(header) = stream_message(&buf) else {
            dispatch(shared, buf)?;
            continue;
        };
        let call_id = header.call_id;
        group.push((buf, header));
        while let Some(header) = frames
            .peek()
            .and_then(|next| stream_message(next))
            .filter(|h| h.call_id == call_id)
        {
            group.push((frames.next().expect("peeked"), header));
        }
        if group.len() == 1 {
            let (buf, _) = group.pop().expect("one");
            dispatch(shared, buf)?;
            continue;
        }
        shared.heard.store(true, Ordering::Relaxed);
        let inbox = match shared.calls.lock().get(call_id) {
            Some(Waiter::Stream(inbox, _)) => inbox.clone(),
            _ => {
                tracing::trace!(call_id, "messages for a stream no longer open");
                group.clear();
                continue;
            }
        };
        let payloads = crate::stream::take_payloads(&*shared.conn, group.drain(..));
        inbox
            .push_run(payloads)
            .map_err(|e| Status::unavailable(format!("protocol violation by the server: {e}")))?;
    }
    Ok(())
}

/// Hands one received frame to its caller, or to the control queue. An error ends the
/// connection (a malformed frame).
fn dispatch<C: Connection>(shared: &Shared<C>, buf: C::RecvBuf) -> Result<(), Status> {
    shared.heard.store(true, Ordering::Relaxed);
    let header = match Frame::parse(&buf) {
        Ok(frame) => frame.header,
        Err(e) => {
            tracing::warn!(peer = %shared.conn.peer(), "closing connection: malformed frame: {e}");
            return Err(Status::unavailable(format!(
                "malformed frame from server: {e}"
            )));
        }
    };
    let call_id = header.call_id;
    match header.kind {
        FrameKind::Response => {
            let mut calls = shared.calls.lock();
            if let Some(Waiter::Stream(inbox, _)) = calls.get(call_id) {
                let inbox = inbox.clone();
                let end = header.flags.contains(Flags::END_STREAM);
                if end {
                    if let Some(Waiter::Stream(_, Some(outbox))) = calls.take(call_id) {
                        outbox.close(Status::cancelled("the call ended"));
                    }
                }
                drop(calls);
                return stream_response(&inbox, &buf, end);
            }
            if !header.flags.contains(Flags::END_STREAM) {
                // Response headers for a call that expects one response: the server
                // streams this method (client and server disagree on its kind).
                if let Some(waiter) = calls.take(call_id) {
                    drop(calls);
                    let status = Status::internal(
                        "the server answered with a stream: the client and the server \
                         disagree on the method's kind",
                    );
                    waiter.fail(status);
                    shared.control.cancel_stream(call_id);
                }
                return Ok(());
            }
            if !calls.complete(call_id, Ok(buf)) {
                tracing::trace!(call_id, "response to a call no longer waiting");
            }
        }
        FrameKind::Message => {
            let calls = shared.calls.lock();
            let Some(Waiter::Stream(inbox, _)) = calls.get(call_id) else {
                tracing::trace!(call_id, "message for a stream no longer open");
                return Ok(());
            };
            let inbox = inbox.clone();
            drop(calls);
            if header.flags.contains(Flags::DISCARDED) {
                inbox.fail(too_large(header.payload_len as usize), true);
                if shared.calls.lock().take(call_id).is_some() {
                    shared.control.cancel_stream(call_id);
                }
                return Ok(());
            }
            if header.flags.contains(Flags::END_STREAM) {
                return Err(Status::unavailable(format!(
                    "protocol violation by the server: stream {call_id:#x} ended by a message frame"
                )));
            }
            let payload = crate::stream::take_payload(&*shared.conn, buf, &header);
            inbox.push(header.frame_len(), payload).map_err(|e| {
                Status::unavailable(format!("protocol violation by the server: {e}"))
            })?;
        }
        FrameKind::WindowUpdate => {
            let calls = shared.calls.lock();
            let outbox = match calls.get(call_id) {
                Some(Waiter::Upload(_, outbox) | Waiter::Stream(_, Some(outbox))) => outbox.clone(),
                _ => return Ok(()),
            };
            drop(calls);
            outbox.grant(header.credits).map_err(|e| {
                Status::unavailable(format!("protocol violation by the server: {e}"))
            })?;
        }
        FrameKind::Ping => shared.control.pong(header.call_id),
        FrameKind::GoAway => {
            tracing::debug!(peer = %shared.conn.peer(), "server is going away (GOAWAY)");
            let mut calls = shared.calls.lock();
            let first = !calls.is_draining();
            let acknowledge = calls.drain();
            drop(calls);
            if acknowledge {
                shared.control.goaway();
            }
            // Once: a server repeating GOAWAY does not wake every waiting pick again.
            if first {
                shared.changed();
            }
        }
        kind => tracing::trace!(?kind, "ignoring frame"),
    }
    Ok(())
}

/// A response frame of a server-streaming or bidirectional call: its headers, or (`end`)
/// its status and trailers.
fn stream_response(inbox: &Inbox, buf: &[u8], end: bool) -> Result<(), Status> {
    let frame = Frame::parse(buf).map_err(|e| Status::unavailable(e.to_string()))?;
    let metadata = Metadata::decode(frame.metadata)
        .map_err(|e| Status::unavailable(format!("malformed metadata from server: {e}")));
    if !end {
        inbox.set_headers(metadata?);
        return Ok(());
    }
    let code = Code::from_u8(frame.header.status);
    if code != Code::Ok {
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        let message = String::from_utf8_lossy(frame.payload);
        inbox.fail(Status::from_metadata(code, message, metadata), false);
        return Ok(());
    }
    match metadata {
        Ok(trailers) => inbox
            .close(Some(trailers))
            .map_err(|e| Status::unavailable(format!("protocol violation by the server: {e}"))),
        Err(status) => {
            inbox.fail(Status::internal(status.message()), false);
            Ok(())
        }
    }
}

fn too_large(len: usize) -> Status {
    Status::resource_exhausted(format!("stream message of {len} bytes exceeds the maximum"))
}

/// The connection is gone: every call on it fails with `reason`.
fn ended<C: Connection>(shared: &Shared<C>, reason: Status) {
    tracing::debug!(peer = %shared.conn.peer(), "channel closed: {}", reason.message());
    shared.calls.lock().close(reason);
    shared.conn.close();
    shared.changed();
}

/// The receive path for a transport that runs to completion ([`Connection::push_to`]):
/// the transport's completion path hands each response straight to its caller, with no
/// receive task in between.
struct Dispatch<C: Connection> {
    shared: std::sync::Weak<Shared<C>>,
    /// Set once the connection ended (frames after that are dropped).
    ended: AtomicBool,
}

impl<C: Connection> FrameSink<C::RecvBuf> for Dispatch<C> {
    fn frame(&self, buf: C::RecvBuf) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Err(reason) = dispatch(&shared, buf) {
            self.ended.store(true, Ordering::Release);
            ended(&shared, reason);
        }
    }

    fn frames(&self, frames: &mut Vec<C::RecvBuf>) {
        if self.ended.load(Ordering::Acquire) {
            frames.clear();
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            frames.clear();
            return;
        };
        if let Err(reason) = dispatch_run(&shared, frames) {
            frames.clear();
            self.ended.store(true, Ordering::Release);
            ended(&shared, reason);
        }
    }

    fn closed(&self, result: Result<(), TransportError>) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            let reason = match result {
                Ok(()) => Status::unavailable("connection closed by peer"),
                Err(e) => Status::unavailable(e.to_string()),
            };
            ended(&shared, reason);
        }
    }
}

/// Sends control frames queued from synchronous contexts, until the channel's state is
/// dropped.
async fn control_loop<C: Connection>(shared: Weak<Shared<C>>, queue: Arc<ControlQueue>) {
    while let Some(batch) = queue.next_batch().await {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        for control in batch {
            if let Err(e) = send_control_credits(&*strong.conn, control).await {
                tracing::debug!("control frame not sent: {e}");
            }
        }
    }
}

/// Pings the server while calls are in flight and it has been silent for `interval`;
/// fails the connection when nothing arrives within `timeout` of a ping.
async fn keepalive_loop<C: Connection>(
    shared: Weak<Shared<C>>,
    interval: std::time::Duration,
    timeout: std::time::Duration,
) {
    let mut sequence = 0u64;
    let mut wait = interval;
    // When a frame was last seen; sampled every wake-up (a quarter interval at least).
    let mut last_heard = Instant::now();
    loop {
        tokio::time::sleep(wait).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if strong.calls.lock().is_closed() {
            return;
        }
        if strong.heard.swap(false, Ordering::Relaxed) {
            last_heard = Instant::now();
        }
        let silent = last_heard.elapsed();
        if strong.calls.lock().len() == 0 || silent < interval {
            wait = interval.saturating_sub(silent).max(interval / 4);
            continue;
        }
        sequence += 1;
        strong.control.ping(sequence);
        drop(strong);
        tokio::time::sleep(timeout).await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if !strong.heard.swap(false, Ordering::Relaxed) {
            let status = Status::unavailable(format!(
                "the server did not answer a ping within {timeout:?}"
            ));
            tracing::warn!(peer = %strong.conn.peer(), "closing connection: {}", status.message());
            ended(&strong, status);
            return;
        }
        last_heard = Instant::now();
        wait = interval;
    }
}

/// A channel is a tower service of unary calls, its message encoded: with
/// `tower::ServiceBuilder` (or [`Channel::layer`]) any tower middleware goes around it.
/// A channel with layers sends the call through them.
/// The deadline of a call sent through a channel's layers (a request extension), so that
/// the time spent in the layers is not told to the server as time it has.
#[derive(Debug, Clone, Copy)]
struct LayerDeadline(Instant);

impl<C: Connection> tower::Service<Request<ClientCall>> for Channel<C> {
    type Response = Response<bytes::Bytes>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Response<bytes::Bytes>, Status>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Status>> {
        // The channel bounds its calls itself (connection limits, deadlines).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ClientCall>) -> Self::Future {
        let channel = self.clone();
        Box::pin(async move {
            if let Some(stack) = &channel.stack {
                let request = channel.intercepted(request)?;
                return channel.through_layers(stack, request).await;
            }
            let method = *request.get_ref().method();
            let mut request = request.map(|call| Encoded(call.message().clone()));
            if let Some(LayerDeadline(deadline)) = request.extensions_mut().remove() {
                request.set_timeout(deadline.saturating_duration_since(Instant::now()));
            }
            channel
                .unary_with(request, &method, |payload| {
                    Ok(match payload {
                        Payload::Borrowed(slice) => bytes::Bytes::copy_from_slice(slice),
                        Payload::Shared(bytes) => bytes,
                    })
                })
                .await
        })
    }
}
