//! The ways to make a [`Channel`]: over a connection, dialled now or on the first call,
//! reconnecting, or balanced over several endpoints.

use std::future::Future;
use std::sync::Arc;

use super::redial::Redial;
use super::retry::RetryThrottle;
use super::{Channel, Inner, Mode};
use crate::client::balance::{Balancer, DialFn, Discovery};
use crate::client::connection::start;
use crate::client::connection::Shared;
use crate::client::dial::{dial_within, Dialing};
use crate::client::target::Target;
use crate::transport::{Connection, Dial, TransportError};
use crate::{ClientConfig, Endpoint};

/// Dials `endpoint` with the connection type's own dialer ([`Dial`]).
pub(super) fn dial_with<C: Dial>(
    endpoint: &Endpoint,
) -> impl Future<Output = Result<C, TransportError>> + Send + 'static {
    let endpoint = endpoint.clone();
    async move { C::dial(&endpoint).await }
}

/// `dial` of `endpoint` as a reconnecting channel's dialer.
pub(super) fn dialer<C, F, Fut>(
    endpoint: Endpoint,
    dial: F,
) -> impl Fn() -> Fut + Send + Sync + 'static
where
    F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
{
    move || dial(&endpoint)
}

/// `dial` as a balancer's dialer of endpoints.
fn dial_fn<C, F, Fut>(dial: F) -> DialFn<C>
where
    C: Connection,
    F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
{
    Arc::new(move |endpoint: &Endpoint| Box::pin(dial(endpoint)) as Dialing<C>)
}

/// A balancer over the endpoints of `target`, dialling each with `dial`.
fn balancer_of<C, F, Fut>(config: &ClientConfig, target: Target, dial: F) -> Arc<Balancer<C>>
where
    C: Connection,
    F: Fn(&Endpoint) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<C, TransportError>> + Send + 'static,
{
    let discovery = match target {
        Target::One(endpoint) => Discovery::Static(vec![endpoint]),
        Target::List(endpoints) => Discovery::Static(endpoints),
        Target::Dns(target) => Discovery::Dns(target),
    };
    Arc::new(Balancer::new(config.clone(), discovery, dial_fn(dial)))
}

impl<C: Connection> Channel<C> {
    /// A channel of `mode`, with no interceptor or layer.
    fn from_mode(config: ClientConfig, mode: Mode<C>) -> Channel<C> {
        Channel {
            stack: None,
            interceptor: None,
            inner: Arc::new(Inner {
                mode,
                throttle: RetryThrottle::new(&config),
                config,
            }),
        }
    }

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
        let shared = start(conn, &config, None);
        Channel::from_mode(config, Mode::Single(shared))
    }

    /// A channel that connects with `dial` now, and again whenever a call finds the
    /// connection failed (e.g. after the server restarted).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), rdmarpc_core::TransportError> {
    /// use rdmarpc_core::memory::MemoryConnection;
    /// # let connector: rdmarpc_core::memory::MemoryConnector = unimplemented!();
    /// let channel = rdmarpc_core::Channel::with_reconnect(Default::default(), move || {
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
        let redial = Redial::new(dial);
        redial.replace(start(conn, &config, None));
        Ok(Channel::from_mode(
            config,
            Mode::Reconnecting(Arc::new(redial)),
        ))
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
        Channel::from_mode(config, Mode::Reconnecting(Arc::new(Redial::new(dial))))
    }

    /// A channel to `url` (`tcp://host:port`, `auto://...`, `grpc://...`, as the
    /// connection type understands it), connected now and again whenever a call finds
    /// the connection failed ([`Channel::with_reconnect`]), with the connection type's
    /// settings ([`Dial::client_config`]).
    ///
    /// ```no_run
    /// # async fn f<AnyConnection: rdmarpc_core::Dial>() -> Result<(), rdmarpc_core::TransportError> {
    /// // AnyConnection: rdmarpc_transport's, which dials every scheme.
    /// let channel = rdmarpc_core::Channel::<AnyConnection>::connect("tcp://127.0.0.1:50051").await?;
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
                let balancer = balancer_of(&config, target, dial);
                let channel = Channel::from_mode(config, Mode::Balanced(balancer.clone()));
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
    /// # fn f<AnyConnection: rdmarpc_core::Dial>() {
    /// use rdmarpc_core::{Channel, ClientConfig, Endpoint};
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
        let discovery = Discovery::Stream(Box::pin(endpoints));
        let balancer = Arc::new(Balancer::new(config.clone(), discovery, dial_fn(dial)));
        Channel::from_mode(config, Mode::Balanced(balancer))
    }

    /// A channel over the connection `shared` alone (a balanced endpoint's health watch).
    pub(in crate::client) fn over(shared: Arc<Shared<C>>, config: ClientConfig) -> Channel<C> {
        Channel::from_mode(config, Mode::Single(shared))
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
            target => {
                let balancer = balancer_of(&config, target, dial);
                Channel::from_mode(config, Mode::Balanced(balancer))
            }
        })
    }
}
