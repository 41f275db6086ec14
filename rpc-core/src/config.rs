//! Client and server configuration of the runtime (transports have their own).

use std::time::Duration;

/// The default maximum message size: 4 MiB, as in gRPC.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;

/// The default window of each received stream: 1 MiB of frames.
pub const DEFAULT_STREAM_WINDOW: u32 = 1024 * 1024;

/// Client-side settings of a [`Channel`](crate::Channel).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Largest request message the channel sends; a larger one fails locally with
    /// `RESOURCE_EXHAUSTED` before touching the connection. Default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`]. Keep it at or below the server's limit.
    pub max_message_size: usize,
    /// Timeout applied to calls whose request sets none. Default: none (calls wait as
    /// long as the connection lives).
    pub timeout: Option<Duration>,
    /// While calls are in flight and nothing was received from the server for this long,
    /// the channel sends a PING. `None` disables keepalive. Default 10 s.
    pub keepalive_interval: Option<Duration>,
    /// How long after a PING the server must have sent something (its PONG, or any
    /// frame) before the connection is declared dead and its calls fail with
    /// `UNAVAILABLE`: a hung server (stopped process, blocked runtime) is found within
    /// interval + timeout. Default 10 s.
    pub keepalive_timeout: Duration,
    /// How many times a call that the server refused without starting it (it was
    /// draining after a GOAWAY) is sent again on a fresh connection, for channels that
    /// reconnect. Default 3.
    pub max_transparent_retries: u32,
    /// For channels that reconnect: while no connection can be made, calls wait for the
    /// next dial (until their deadline) instead of failing at once with `UNAVAILABLE`
    /// (gRPC's wait-for-ready). Default false (fail fast).
    pub wait_for_ready: bool,
    /// How long one dial of a reconnecting channel may take (connect and transport
    /// handshake) before it counts as failed. Default 20 s.
    pub connect_timeout: Duration,
    /// How many bytes of messages (counted as whole frames) the server may send on one
    /// response stream before the application reads them: what a stream buffers is at
    /// most this plus one message. Default [`DEFAULT_STREAM_WINDOW`].
    pub stream_window: u32,
    /// How a channel over several endpoints (a list, a DNS name, a stream of them)
    /// spreads its calls and finds the endpoints it may use.
    pub balance: BalanceConfig,
    /// Which failed unary calls are sent again (on another endpoint, if the channel has
    /// several), and how often. Default `None`: a call that may have reached the server
    /// is never sent twice, only those the server refused unstarted are
    /// ([`ClientConfig::max_transparent_retries`]).
    pub retry: Option<RetryPolicy>,
}

/// How a balanced channel picks among its endpoints ([`BalanceConfig::strategy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LbStrategy {
    /// Power of two choices: two ready endpoints drawn at random, the call goes to the one
    /// with fewer calls in flight (the default). Adapts to slow or loaded servers.
    #[default]
    PowerOfTwoChoices,
    /// Each ready endpoint in turn.
    RoundRobin,
}

impl std::str::FromStr for LbStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "p2c" | "power_of_two_choices" | "least_loaded" => Ok(LbStrategy::PowerOfTwoChoices),
            "round_robin" | "rr" => Ok(LbStrategy::RoundRobin),
            other => Err(format!(
                "unknown balancing strategy {other:?} (expected p2c or round_robin)"
            )),
        }
    }
}

impl std::fmt::Display for LbStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LbStrategy::PowerOfTwoChoices => "p2c",
            LbStrategy::RoundRobin => "round_robin",
        })
    }
}

/// Settings of a channel over several endpoints ([`ClientConfig::balance`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BalanceConfig {
    /// How calls are spread. Default [`LbStrategy::PowerOfTwoChoices`].
    pub strategy: LbStrategy,
    /// Watch each endpoint's health with `grpc.health.v1.Health/Watch` for this service
    /// name (`""`: the server as a whole): an endpoint is used only while it reports
    /// `SERVING`. A server without the health service (`UNIMPLEMENTED`) counts as
    /// serving. Default `None` (no health checks; as gRPC without a health-check config).
    pub health_check_service: Option<String>,
    /// How often a DNS target (`dns:///name:port`) is resolved again: an endpoint added
    /// to the name gets calls within this, one removed gets no new ones. Default 30 s.
    pub dns_refresh: Duration,
    /// The transport of the endpoints a DNS target resolves to, as a URL scheme (`tcp`,
    /// `auto`, `rdma`, `tcp+tls`, `grpc`, ...). Default `auto` (RDMA where both ends have
    /// a device).
    pub dns_scheme: String,
    /// After this many calls in a row end with `UNAVAILABLE`, `INTERNAL`, `UNKNOWN` or
    /// `DATA_LOSS`, an endpoint gets no calls for [`BalanceConfig::ejection_time`]
    /// (passive ejection: a server that fails fast would otherwise attract the most
    /// calls). At most half of the endpoints are ejected at once. 0 disables it.
    /// Default 5.
    pub eject_after_failures: u32,
    /// How long an ejected endpoint rests: this times the number of its ejections in a
    /// row, up to ten times. Default 10 s.
    pub ejection_time: Duration,
    /// Most endpoints the channel connects to: when discovery finds more, it uses a
    /// subset of this size, the same across updates (and different between channels, so
    /// that many clients cover every server). Default 256.
    pub max_endpoints: usize,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        BalanceConfig {
            strategy: LbStrategy::default(),
            health_check_service: None,
            dns_refresh: Duration::from_secs(30),
            dns_scheme: "auto".to_owned(),
            eject_after_failures: 5,
            ejection_time: Duration::from_secs(10),
            max_endpoints: 256,
        }
    }
}

/// Which failed unary calls a channel sends again ([`ClientConfig::retry`]), as gRPC's
/// retry policy: a call whose status is in [`RetryPolicy::codes`], of a method the policy
/// names, is sent again after a back-off with jitter, within its deadline, until
/// [`RetryPolicy::max_attempts`]. On a balanced channel the next attempt goes to a usable
/// endpoint, so a server that dies under load fails none of these calls. Streaming calls
/// are never retried.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included; at most 5 are made (as gRPC). Default 3.
    pub max_attempts: u32,
    /// The back-off before the first retry; it doubles for each further one, up to
    /// [`RetryPolicy::max_backoff`], with jitter. Default 10 ms.
    pub initial_backoff: Duration,
    /// The longest back-off. Default 1 s.
    pub max_backoff: Duration,
    /// The statuses that are retried. Default `[UNAVAILABLE]`.
    pub codes: Vec<crate::Code>,
    /// The methods that are retried, each `/package.Service/Method`, `package.Service`
    /// (all its methods) or `*`, besides those the proto marks idempotent (see
    /// [`RetryPolicy::idempotent`]). Default empty.
    pub methods: Vec<String>,
    /// Also retry every method whose `.proto` declares `option idempotency_level =
    /// IDEMPOTENT` (or `NO_SIDE_EFFECTS`). Default true.
    pub idempotent: bool,
    /// Retry throttling, as gRPC's `retryThrottling`: the channel holds this many tokens;
    /// each failed call the policy covers takes one, each success gives a tenth back, and
    /// calls are retried only while more than half are left. An outage then costs about
    /// one retry per success instead of `max_attempts` times the load. 0 turns
    /// throttling off. Default 100.
    pub max_tokens: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            codes: vec![crate::Code::Unavailable],
            methods: Vec::new(),
            idempotent: true,
            max_tokens: 100,
        }
    }
}

impl RetryPolicy {
    /// Sets [`RetryPolicy::methods`].
    ///
    /// ```
    /// let mut config = rpc_core::ClientConfig::default();
    /// let mut policy = rpc_core::RetryPolicy::default();
    /// policy.methods(["/kv.Kv/Get", "health.v1.Health"]);
    /// config.retry = Some(policy);
    /// ```
    pub fn methods<S: Into<String>>(&mut self, methods: impl IntoIterator<Item = S>) -> &mut Self {
        self.methods = methods.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`RetryPolicy::max_attempts`].
    pub fn max_attempts(&mut self, attempts: u32) -> &mut Self {
        self.max_attempts = attempts;
        self
    }

    /// Whether a call of `method` that ended with `code` may be sent again.
    pub fn retries(&self, method: &crate::codegen::MethodDescriptor, code: crate::Code) -> bool {
        if !self.codes.contains(&code) {
            return false;
        }
        if self.idempotent && method.idempotent {
            return true;
        }
        let service = method
            .path
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .map_or("", |(service, _)| service);
        self.methods
            .iter()
            .any(|m| m == "*" || m == method.path || m == service)
    }

    /// The back-off before retry number `retry` (1 for the first), before jitter.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let factor = 2f64.powi(retry.saturating_sub(1).min(30) as i32);
        self.initial_backoff.mul_f64(factor).min(self.max_backoff)
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            timeout: None,
            keepalive_interval: Some(Duration::from_secs(10)),
            keepalive_timeout: Duration::from_secs(10),
            max_transparent_retries: 3,
            wait_for_ready: false,
            connect_timeout: Duration::from_secs(20),
            stream_window: DEFAULT_STREAM_WINDOW,
            balance: BalanceConfig::default(),
            retry: None,
        }
    }
}

impl ClientConfig {
    /// Sets [`BalanceConfig::strategy`].
    pub fn lb_strategy(&mut self, strategy: LbStrategy) -> &mut Self {
        self.balance.strategy = strategy;
        self
    }

    /// Sets [`BalanceConfig::health_check_service`]: endpoints are used only while their
    /// `grpc.health.v1` status for `service` is `SERVING`.
    pub fn health_check(&mut self, service: impl Into<String>) -> &mut Self {
        self.balance.health_check_service = Some(service.into());
        self
    }

    /// Sets [`ClientConfig::retry`].
    pub fn retry(&mut self, policy: RetryPolicy) -> &mut Self {
        self.retry = Some(policy);
        self
    }

    /// Sets [`ClientConfig::stream_window`].
    pub fn stream_window(&mut self, bytes: u32) -> &mut Self {
        self.stream_window = bytes;
        self
    }

    /// Sets [`ClientConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rpc_core::ClientConfig::default();
    /// config.max_message_size(64 << 20).timeout(std::time::Duration::from_secs(5));
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`ClientConfig::timeout`].
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets [`ClientConfig::wait_for_ready`].
    pub fn wait_for_ready(&mut self, wait: bool) -> &mut Self {
        self.wait_for_ready = wait;
        self
    }

    /// Sets [`ClientConfig::keepalive_interval`] and
    /// [`ClientConfig::keepalive_timeout`]; `None` disables keepalive.
    pub fn keepalive(&mut self, interval: Option<Duration>, timeout: Duration) -> &mut Self {
        self.keepalive_interval = interval;
        self.keepalive_timeout = timeout;
        self
    }
}

/// Server-side settings of a [`Server`](crate::Server).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Largest request message accepted; a larger one is answered with
    /// `RESOURCE_EXHAUSTED` and the connection stays open. Default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`].
    pub max_message_size: usize,
    /// Most unary calls running at once across all connections (streaming calls count
    /// against [`ServerConfig::max_open_streams`]). A request that finds no permit
    /// waits in its connection's queue (see
    /// [`ServerConfig::max_queued_calls_per_connection`]); permits are granted in arrival
    /// order across connections. Default 4096.
    pub max_concurrent_calls: usize,
    /// Most unary calls running at once on one connection, so that one client cannot take
    /// every server-wide permit. Default 256.
    pub max_concurrent_calls_per_connection: usize,
    /// Most unary calls running at once from one peer (an IPv4 address or an IPv6 /64),
    /// over all its connections: a peer that opens many connections and holds a call on
    /// each (a slow handler, a call whose response it does not read) still leaves the
    /// rest of [`ServerConfig::max_concurrent_calls`] to others. (Streaming calls hold
    /// stream slots instead: [`ServerConfig::max_open_streams_per_peer`].) Default 1024, a quarter of
    /// the server's. Behind a proxy or a sidecar every call comes from one address:
    /// raise it to `max_concurrent_calls` there.
    pub max_concurrent_calls_per_peer: usize,
    /// Most requests of one connection waiting (decoded) for a permit. The connection
    /// keeps reading while calls wait, so it still sees CANCEL, PING and EOF; a request
    /// beyond this is answered at once with `RESOURCE_EXHAUSTED` (flagged as not started,
    /// see [`Flags::REFUSED`](crate::wire::Flags::REFUSED)). Default 1024.
    pub max_queued_calls_per_connection: usize,
    /// Most request payload bytes of one connection waiting for a permit (one request
    /// is always admitted to an empty queue). Default 32 MiB.
    pub max_queued_bytes_per_connection: usize,
    /// Replies (PONG, GOAWAY, error statuses) that the reader may queue for sending
    /// before it stops reading that connection: a peer that sends pings or bad requests
    /// and never reads holds at most this many small frames. Default 64.
    pub max_queued_replies: usize,
    /// How long a graceful shutdown waits for in-flight calls before dropping them.
    /// Default 30 s.
    pub shutdown_grace: Duration,
    /// After a GOAWAY, how long a connection whose calls are done waits for the client
    /// to acknowledge (its own GOAWAY, or closing): requests that crossed the GOAWAY are
    /// answered as refused meanwhile, so the client can send them elsewhere. Default 2 s.
    pub drain_timeout: Duration,
    /// How many bytes of messages (counted as whole frames) a client may send on one
    /// request stream before the handler reads them: what a stream buffers is at most
    /// this plus one message. Granted when the call starts (a call waiting for a permit
    /// is granted nothing). Default [`DEFAULT_STREAM_WINDOW`].
    pub stream_window: u32,
    /// Most bytes of window the server grants one connection's request streams together:
    /// each stream's window comes out of it when its call starts and goes back as its
    /// handler reads (or when the call ends); a stream that finds no room waits, its
    /// window spent, until another gives some back. The server keeps reading the
    /// connection meanwhile. What the request streams buffer is then at most this plus
    /// one message per stream granted a window. Default 32 MiB.
    pub max_stream_bytes_per_connection: usize,
    /// Most streaming calls open at once server-wide. An open stream holds a stream
    /// slot, not a call permit, however long it stays open (a `Watch` that waits for
    /// changes, a chat that waits for messages), so long-lived streams cannot starve
    /// unary work; a stream opened beyond a slot limit waits in its connection's queue
    /// as a call waits for a permit. Default 8192.
    pub max_open_streams: usize,
    /// Most streaming calls open at once from one peer (an IPv4 address or an IPv6 /64)
    /// over all its connections. Default 1024.
    pub max_open_streams_per_peer: usize,
    /// Most streaming calls open at once on one connection. Default 256.
    pub max_open_streams_per_connection: usize,
    /// Most bytes of requests the server holds at once (at their in-memory size:
    /// decompressed, decoded), from their arrival until their call's response is handed
    /// to the transport, and what the HTTP/2 bridge holds of requests not yet handed
    /// over; and what a unary response holds beyond its request (past 4 KiB) until the
    /// transport takes it. A request beyond it is answered `RESOURCE_EXHAUSTED` (over
    /// HTTP/2, a body beyond it is not read: flow control holds the client), and so is a
    /// response beyond it. Half of it is first come, first served; the other half is
    /// shared fairly among the peers that need it. Default 128 MiB.
    pub max_held_bytes: usize,
    /// The same per peer, over all its connections: what one address can make the
    /// server hold. Default 32 MiB.
    pub max_held_bytes_per_peer: usize,
    /// The same per connection (one request larger than it is accepted into a
    /// connection that holds nothing else). Default 32 MiB.
    pub max_held_bytes_per_connection: usize,
    /// Most bytes the server has handed to its transports for its peers and that are
    /// not written out yet (responses, stream messages, statuses: the TCP send queue,
    /// the HTTP/2 bridge's response buffer). A sender beyond it waits: a peer that does
    /// not read holds back its own calls. Half of it is first come, first served; the
    /// other half is shared fairly among the peers that need it. Default 64 MiB.
    pub max_sending_bytes: usize,
    /// The same per peer, over all its connections. Default 16 MiB.
    pub max_sending_bytes_per_peer: usize,
    /// The same per connection (one frame larger than it is taken by a connection that
    /// has nothing else queued). Default 8 MiB.
    pub max_sending_bytes_per_connection: usize,
    /// A connection with no call waiting, running or open for this long is closed
    /// gracefully (GOAWAY, then close; a client reconnects when it next calls). Checked
    /// at least each second while calls run, so the close comes within this plus a
    /// second of the last call's end. Pings do not count as calls. Default `None`
    /// (idle connections stay open, held by the listener's connection limits).
    pub max_connection_idle: Option<Duration>,
    /// A connection open this long (±10 % per connection, so that connections opened
    /// together do not all reconnect at once) is closed gracefully: GOAWAY, the calls in
    /// flight may finish, new calls go to a new connection. Spreads clients over
    /// servers added behind a balancer, and bounds how long one TLS session lives.
    /// Default `None`.
    pub max_connection_age: Option<Duration>,
    /// How long calls may still run on a connection that is draining (after its
    /// [`ServerConfig::max_connection_age`], its [`ServerConfig::max_connection_idle`],
    /// or a graceful shutdown) before it is closed and they end `UNAVAILABLE`. Default
    /// `None`: they may finish (a server shutdown still ends them after
    /// [`ServerConfig::shutdown_grace`]).
    pub max_connection_age_grace: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrent_calls: 4096,
            max_concurrent_calls_per_connection: 256,
            max_concurrent_calls_per_peer: 1024,
            max_queued_calls_per_connection: 1024,
            max_queued_bytes_per_connection: 32 << 20,
            max_queued_replies: 64,
            shutdown_grace: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(2),
            stream_window: DEFAULT_STREAM_WINDOW,
            max_stream_bytes_per_connection: 32 << 20,
            max_open_streams: 8192,
            max_open_streams_per_peer: 1024,
            max_open_streams_per_connection: 256,
            max_held_bytes: 128 << 20,
            max_held_bytes_per_peer: 32 << 20,
            max_held_bytes_per_connection: 32 << 20,
            max_sending_bytes: 64 << 20,
            max_sending_bytes_per_peer: 16 << 20,
            max_sending_bytes_per_connection: 8 << 20,
            max_connection_idle: None,
            max_connection_age: None,
            max_connection_age_grace: None,
        }
    }
}

impl ServerConfig {
    /// The limits of the server's accounts ([`crate::account`]), from these settings.
    pub fn limits(&self) -> crate::account::Limits {
        use crate::account::Limit;
        crate::account::Limits {
            calls: Limit {
                connection: self.max_concurrent_calls_per_connection,
                peer: self.max_concurrent_calls_per_peer,
                server: self.max_concurrent_calls,
            },
            streams: Limit {
                connection: self.max_open_streams_per_connection,
                peer: self.max_open_streams_per_peer,
                server: self.max_open_streams,
            },
            bytes: Limit {
                connection: self.max_held_bytes_per_connection,
                peer: self.max_held_bytes_per_peer,
                server: self.max_held_bytes,
            },
            sending: Limit {
                connection: self.max_sending_bytes_per_connection,
                peer: self.max_sending_bytes_per_peer,
                server: self.max_sending_bytes,
            },
        }
    }

    /// Sets [`ServerConfig::max_message_size`].
    ///
    /// ```
    /// let mut config = rpc_core::ServerConfig::default();
    /// config.max_message_size(64 << 20).max_concurrent_calls(128);
    /// ```
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`ServerConfig::max_concurrent_calls`].
    pub fn max_concurrent_calls(&mut self, calls: usize) -> &mut Self {
        self.max_concurrent_calls = calls;
        self
    }

    /// Sets [`ServerConfig::max_concurrent_calls_per_connection`].
    pub fn max_concurrent_calls_per_connection(&mut self, calls: usize) -> &mut Self {
        self.max_concurrent_calls_per_connection = calls;
        self
    }

    /// Sets [`ServerConfig::max_concurrent_calls_per_peer`].
    pub fn max_concurrent_calls_per_peer(&mut self, calls: usize) -> &mut Self {
        self.max_concurrent_calls_per_peer = calls;
        self
    }

    /// Sets [`ServerConfig::max_open_streams`].
    pub fn max_open_streams(&mut self, streams: usize) -> &mut Self {
        self.max_open_streams = streams;
        self
    }

    /// Sets [`ServerConfig::max_open_streams_per_peer`].
    pub fn max_open_streams_per_peer(&mut self, streams: usize) -> &mut Self {
        self.max_open_streams_per_peer = streams;
        self
    }

    /// Sets [`ServerConfig::max_open_streams_per_connection`].
    pub fn max_open_streams_per_connection(&mut self, streams: usize) -> &mut Self {
        self.max_open_streams_per_connection = streams;
        self
    }

    /// Sets [`ServerConfig::max_held_bytes`].
    pub fn max_held_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_held_bytes = bytes;
        self
    }

    /// Sets [`ServerConfig::max_held_bytes_per_peer`].
    pub fn max_held_bytes_per_peer(&mut self, bytes: usize) -> &mut Self {
        self.max_held_bytes_per_peer = bytes;
        self
    }

    /// Sets [`ServerConfig::max_held_bytes_per_connection`].
    pub fn max_held_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_held_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::max_sending_bytes`].
    pub fn max_sending_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_sending_bytes = bytes;
        self
    }

    /// Sets [`ServerConfig::max_sending_bytes_per_peer`].
    pub fn max_sending_bytes_per_peer(&mut self, bytes: usize) -> &mut Self {
        self.max_sending_bytes_per_peer = bytes;
        self
    }

    /// Sets [`ServerConfig::max_sending_bytes_per_connection`].
    pub fn max_sending_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_sending_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::max_queued_calls_per_connection`].
    pub fn max_queued_calls_per_connection(&mut self, calls: usize) -> &mut Self {
        self.max_queued_calls_per_connection = calls;
        self
    }

    /// Sets [`ServerConfig::max_queued_bytes_per_connection`].
    pub fn max_queued_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_queued_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::max_queued_replies`].
    pub fn max_queued_replies(&mut self, replies: usize) -> &mut Self {
        self.max_queued_replies = replies;
        self
    }

    /// Sets [`ServerConfig::max_connection_idle`]; `None` keeps idle connections open.
    pub fn max_connection_idle(&mut self, idle: Option<Duration>) -> &mut Self {
        self.max_connection_idle = idle;
        self
    }

    /// Sets [`ServerConfig::max_connection_age`] and
    /// [`ServerConfig::max_connection_age_grace`]; `None` for no limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut config = rpc_core::ServerConfig::default();
    /// config.max_connection_age(Some(Duration::from_secs(1800)), Some(Duration::from_secs(30)));
    /// ```
    pub fn max_connection_age(
        &mut self,
        age: Option<Duration>,
        grace: Option<Duration>,
    ) -> &mut Self {
        self.max_connection_age = age;
        self.max_connection_age_grace = grace;
        self
    }

    /// Sets [`ServerConfig::drain_timeout`].
    pub fn drain_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.drain_timeout = timeout;
        self
    }

    /// Sets [`ServerConfig::stream_window`].
    pub fn stream_window(&mut self, bytes: u32) -> &mut Self {
        self.stream_window = bytes;
        self
    }

    /// Sets [`ServerConfig::max_stream_bytes_per_connection`].
    pub fn max_stream_bytes_per_connection(&mut self, bytes: usize) -> &mut Self {
        self.max_stream_bytes_per_connection = bytes;
        self
    }

    /// Sets [`ServerConfig::shutdown_grace`].
    pub fn shutdown_grace(&mut self, grace: Duration) -> &mut Self {
        self.shutdown_grace = grace;
        self
    }
}
