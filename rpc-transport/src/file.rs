//! [`FileConfig`]: the transport choice and its tunables from a TOML file, so switching
//! transport is a configuration change.
//!
//! ```toml
//! address = "auto://10.77.0.2:7000"   # tcp:// | rdma:// | auto://, +tls  (a --addr flag wins)
//! max_message_size = 16777216
//!
//! [rdma]
//! device = "rxe1"             # default: the device owning the socket's local address
//! port = 1                    # default: the port owning it (docs/fabrics.md)
//! gid_index = 1               # default: its RoCE v2 GID (InfiniBand: 0)
//! ring_slots = 64            # the most slots a ring grows to
//! initial_ring_slots = 4      # slots a ring starts with
//! slot_size = 8192
//! eager_threshold = 4096      # frames above go by RDMA READ
//! poll_spin_us = 50
//! await_spin_us = 1000
//! ping_interval_ms = 1000
//! ping_timeout_ms = 5000
//! read_chunk = 1048576
//! lend_budget = 33554432      # bytes lent to the peer at once; large sends wait beyond
//! loan_timeout_ms = 60000     # a lent buffer unread this long closes the connection
//! max_loans = 128             # rendezvous frames lent at once at most
//! max_inline = 256            # bytes a SEND carries inline
//! pool_keep_bytes = 67108864  # idle rendezvous buffers kept registered per direction
//! keep_bytes = 16777216       # received rendezvous frames the application may keep
//!
//! [tcp]
//! send_queue_bytes = 8388608  # bytes queued for a peer before senders wait
//! write_timeout_ms = 30000    # a write without progress closes the connection
//! frame_timeout_ms = 30000    # a frame must complete within this from its first byte
//! first_frame_timeout_ms = 10000
//!
//! [server]                    # rdmarpc_core::ServerConfig
//! max_concurrent_calls = 4096
//! max_concurrent_calls_per_connection = 256
//! max_concurrent_calls_per_peer = 1024
//! max_queued_calls_per_connection = 1024
//! max_queued_bytes_per_connection = 33554432
//! max_queued_replies = 64
//! max_open_streams = 8192     # streaming calls open at once (they hold no call permit)
//! max_open_streams_per_peer = 1024
//! max_open_streams_per_connection = 256
//! max_held_bytes = 134217728  # request bytes held at their decoded size
//! max_held_bytes_per_peer = 33554432
//! max_held_bytes_per_connection = 33554432
//! max_sending_bytes = 67108864  # bytes queued for peers and not yet written
//! max_sending_bytes_per_peer = 16777216
//! max_sending_bytes_per_connection = 8388608
//! shutdown_grace_ms = 30000
//! drain_timeout_ms = 2000
//! max_connection_idle_ms = 0  # 0: idle connections stay open
//! max_connection_age_ms = 0   # 0: no age limit (else ±10 %, then GOAWAY)
//! max_connection_age_grace_ms = 0 # 0: draining calls may finish
//!
//! [tls]                       # for +tls addresses (tcp+tls://, rdma+tls://, auto+tls://)
//! cert = "server.pem"         # this side's certificate chain
//! key = "server.key"
//! ca = "ca.pem"               # whom to trust: servers (client), clients (mTLS server)
//! client_auth = "required"    # none | optional | required (servers)
//! server_name = "echo.internal"   # clients: the name to verify instead of the host
//!
//! [client]                    # rdmarpc_core::ClientConfig
//! keepalive_interval_ms = 10000   # 0 turns keepalive off
//! keepalive_timeout_ms = 10000
//! max_transparent_retries = 3
//! connect_timeout_ms = 20000
//! ```
//! and, at the top level, `handshake_timeout_ms`, `max_handshakes` and
//! `max_handshakes_per_peer` (listeners).
//!
//! The same settings can come from environment variables: see [`FileConfig::from_env`].

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::{ConfigError, TransportSettings};

/// The contents of a transport configuration file. Every field is optional; unknown
/// fields are an error (a typo must not be silently ignored).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FileConfig {
    /// The address URL.
    pub address: Option<String>,
    /// Largest message, both transports.
    pub max_message_size: Option<usize>,
    /// [`TransportSettings::handshake_timeout`] in milliseconds.
    pub handshake_timeout_ms: Option<u64>,
    /// See [`TransportSettings::max_handshakes`].
    pub max_handshakes: Option<usize>,
    /// See [`TransportSettings::max_handshakes_per_peer`].
    pub max_handshakes_per_peer: Option<usize>,
    /// RDMA tunables.
    #[serde(default)]
    pub rdma: RdmaSection,
    /// TCP tunables.
    #[serde(default)]
    pub tcp: TcpSection,
    /// Server limits and timeouts.
    #[serde(default)]
    pub server: ServerSection,
    /// Client keepalive and retries.
    #[serde(default)]
    pub client: ClientSection,
    /// gRPC (HTTP/2) clients of a server.
    #[serde(default)]
    pub grpc: GrpcSection,
    /// TLS certificates and keys, for `+tls` addresses.
    #[serde(default)]
    pub tls: TlsSection,
}

/// Reads variable `name`, if it is set, as a `T`.
fn var<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<T>, ConfigError> {
    match get(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::Variable {
                name: name.to_owned(),
                expected: std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("value"),
                value: v,
            }),
    }
}

/// The one table behind a section's settings: each field is declared once, with its type
/// and what it sets, and becomes the TOML key `field`, the variable `<PREFIX><FIELD>` and
/// one line of the section's `apply_to`.
macro_rules! section {
    ($(#[$meta:meta])* $name:ident, $prefix:literal, $target:ty $(, if $feature:literal)? {
        $($(#[$fmeta:meta])* $field:ident: $ty:ty => |$c:ident, $v:ident| $apply:expr,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, Deserialize, PartialEq)]
        #[serde(deny_unknown_fields)]
        #[non_exhaustive]
        pub struct $name {
            $($(#[$fmeta])* pub $field: Option<$ty>,)*
        }

        impl $name {
            /// The section's environment variables, in declaration order.
            pub fn variables() -> Vec<String> {
                vec![$(format!("{}{}", $prefix, stringify!($field).to_uppercase()),)*]
            }

            fn from_vars(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
                Ok($name {
                    $($field: var(get, &format!("{}{}", $prefix, stringify!($field).to_uppercase()))?,)*
                })
            }

            /// Sets every field that is set here on `target`.
            $(#[cfg(feature = $feature)])?
            pub fn apply_to(&self, target: &mut $target) {
                $(if let Some($v) = self.$field.clone() {
                    let $c = &mut *target;
                    $apply;
                })*
            }
        }
    };
}

section! {
    /// The `[tcp]` table (variables `RPC_TCP_<FIELD>`).
    TcpSection, "RPC_TCP_", rdmarpc_transport_tcp::TcpConfig {
        /// See [`TcpConfig::send_queue_bytes`](rdmarpc_transport_tcp::TcpConfig::send_queue_bytes).
        send_queue_bytes: usize => |c, v| c.send_queue_bytes = v,
        /// [`TcpConfig::write_timeout`](rdmarpc_transport_tcp::TcpConfig::write_timeout) in ms.
        write_timeout_ms: u64 => |c, v| c.write_timeout = Duration::from_millis(v),
        /// [`TcpConfig::frame_timeout`](rdmarpc_transport_tcp::TcpConfig::frame_timeout) in ms.
        frame_timeout_ms: u64 => |c, v| c.frame_timeout = Duration::from_millis(v),
        /// [`TcpConfig::first_frame_timeout`](rdmarpc_transport_tcp::TcpConfig::first_frame_timeout) in ms.
        first_frame_timeout_ms: u64 => |c, v| c.first_frame_timeout = Duration::from_millis(v),
    }
}

section! {
    /// The `[server]` table (variables `RPC_SERVER_<FIELD>`): [`rdmarpc_core::ServerConfig`].
    ServerSection, "RPC_SERVER_", rdmarpc_core::ServerConfig {
        /// See [`ServerConfig::max_concurrent_calls`](rdmarpc_core::ServerConfig::max_concurrent_calls).
        max_concurrent_calls: usize => |c, v| c.max_concurrent_calls = v,
        /// See [`ServerConfig::max_concurrent_calls_per_connection`](rdmarpc_core::ServerConfig::max_concurrent_calls_per_connection).
        max_concurrent_calls_per_connection: usize => |c, v| c.max_concurrent_calls_per_connection = v,
        /// See [`ServerConfig::max_concurrent_calls_per_peer`](rdmarpc_core::ServerConfig::max_concurrent_calls_per_peer).
        max_concurrent_calls_per_peer: usize => |c, v| c.max_concurrent_calls_per_peer = v,
        /// See [`ServerConfig::max_stream_bytes_per_connection`](rdmarpc_core::ServerConfig::max_stream_bytes_per_connection).
        max_stream_bytes_per_connection: usize => |c, v| c.max_stream_bytes_per_connection = v,
        /// See [`ServerConfig::max_queued_calls_per_connection`](rdmarpc_core::ServerConfig::max_queued_calls_per_connection).
        max_queued_calls_per_connection: usize => |c, v| c.max_queued_calls_per_connection = v,
        /// See [`ServerConfig::max_queued_bytes_per_connection`](rdmarpc_core::ServerConfig::max_queued_bytes_per_connection).
        max_queued_bytes_per_connection: usize => |c, v| c.max_queued_bytes_per_connection = v,
        /// See [`ServerConfig::max_queued_replies`](rdmarpc_core::ServerConfig::max_queued_replies).
        max_queued_replies: usize => |c, v| c.max_queued_replies = v,
        /// [`ServerConfig::shutdown_grace`](rdmarpc_core::ServerConfig::shutdown_grace) in ms.
        shutdown_grace_ms: u64 => |c, v| c.shutdown_grace = Duration::from_millis(v),
        /// [`ServerConfig::drain_timeout`](rdmarpc_core::ServerConfig::drain_timeout) in ms.
        drain_timeout_ms: u64 => |c, v| c.drain_timeout = Duration::from_millis(v),
        /// See [`ServerConfig::stream_window`](rdmarpc_core::ServerConfig::stream_window).
        stream_window: u32 => |c, v| c.stream_window = v,
        /// See [`ServerConfig::max_open_streams`](rdmarpc_core::ServerConfig::max_open_streams).
        max_open_streams: usize => |c, v| c.max_open_streams = v,
        /// See [`ServerConfig::max_open_streams_per_peer`](rdmarpc_core::ServerConfig::max_open_streams_per_peer).
        max_open_streams_per_peer: usize => |c, v| c.max_open_streams_per_peer = v,
        /// See [`ServerConfig::max_open_streams_per_connection`](rdmarpc_core::ServerConfig::max_open_streams_per_connection).
        max_open_streams_per_connection: usize => |c, v| c.max_open_streams_per_connection = v,
        /// See [`ServerConfig::max_held_bytes`](rdmarpc_core::ServerConfig::max_held_bytes).
        max_held_bytes: usize => |c, v| c.max_held_bytes = v,
        /// See [`ServerConfig::max_held_bytes_per_peer`](rdmarpc_core::ServerConfig::max_held_bytes_per_peer).
        max_held_bytes_per_peer: usize => |c, v| c.max_held_bytes_per_peer = v,
        /// See [`ServerConfig::max_held_bytes_per_connection`](rdmarpc_core::ServerConfig::max_held_bytes_per_connection).
        max_held_bytes_per_connection: usize => |c, v| c.max_held_bytes_per_connection = v,
        /// See [`ServerConfig::max_sending_bytes`](rdmarpc_core::ServerConfig::max_sending_bytes).
        max_sending_bytes: usize => |c, v| c.max_sending_bytes = v,
        /// See [`ServerConfig::max_sending_bytes_per_peer`](rdmarpc_core::ServerConfig::max_sending_bytes_per_peer).
        max_sending_bytes_per_peer: usize => |c, v| c.max_sending_bytes_per_peer = v,
        /// See [`ServerConfig::max_sending_bytes_per_connection`](rdmarpc_core::ServerConfig::max_sending_bytes_per_connection).
        max_sending_bytes_per_connection: usize => |c, v| c.max_sending_bytes_per_connection = v,
        /// [`ServerConfig::max_connection_idle`](rdmarpc_core::ServerConfig::max_connection_idle) in ms; 0 = none.
        max_connection_idle_ms: u64 => |c, v| c.max_connection_idle = (v > 0).then(|| Duration::from_millis(v)),
        /// [`ServerConfig::max_connection_age`](rdmarpc_core::ServerConfig::max_connection_age) in ms; 0 = none.
        max_connection_age_ms: u64 => |c, v| c.max_connection_age = (v > 0).then(|| Duration::from_millis(v)),
        /// [`ServerConfig::max_connection_age_grace`](rdmarpc_core::ServerConfig::max_connection_age_grace) in ms; 0 = none.
        max_connection_age_grace_ms: u64 => |c, v| c.max_connection_age_grace = (v > 0).then(|| Duration::from_millis(v)),
    }
}

section! {
    /// The `[client]` table (variables `RPC_CLIENT_<FIELD>`): [`rdmarpc_core::ClientConfig`].
    ClientSection, "RPC_CLIENT_", rdmarpc_core::ClientConfig {
        /// [`ClientConfig::keepalive_interval`](rdmarpc_core::ClientConfig::keepalive_interval) in ms; 0 = off.
        keepalive_interval_ms: u64 => |c, v| c.keepalive_interval = (v > 0).then(|| Duration::from_millis(v)),
        /// [`ClientConfig::keepalive_timeout`](rdmarpc_core::ClientConfig::keepalive_timeout) in ms.
        keepalive_timeout_ms: u64 => |c, v| c.keepalive_timeout = Duration::from_millis(v),
        /// See [`ClientConfig::max_transparent_retries`](rdmarpc_core::ClientConfig::max_transparent_retries).
        max_transparent_retries: u32 => |c, v| c.max_transparent_retries = v,
        /// [`ClientConfig::connect_timeout`](rdmarpc_core::ClientConfig::connect_timeout) in ms.
        connect_timeout_ms: u64 => |c, v| c.connect_timeout = Duration::from_millis(v),
        /// See [`ClientConfig::stream_window`](rdmarpc_core::ClientConfig::stream_window).
        stream_window: u32 => |c, v| c.stream_window = v,
        /// See [`ClientConfig::wait_for_ready`](rdmarpc_core::ClientConfig::wait_for_ready).
        wait_for_ready: bool => |c, v| c.wait_for_ready = v,
        /// [`BalanceConfig::strategy`](rdmarpc_core::BalanceConfig::strategy): `p2c` or `round_robin`.
        lb_strategy: Parsed<rdmarpc_core::LbStrategy> => |c, v| c.balance.strategy = v.0,
        /// [`BalanceConfig::health_check_service`](rdmarpc_core::BalanceConfig::health_check_service)
        /// (`""`: the whole server).
        health_check_service: String => |c, v| c.balance.health_check_service = Some(v),
        /// [`BalanceConfig::dns_refresh`](rdmarpc_core::BalanceConfig::dns_refresh) in ms.
        dns_refresh_ms: u64 => |c, v| c.balance.dns_refresh = Duration::from_millis(v),
        /// [`BalanceConfig::dns_scheme`](rdmarpc_core::BalanceConfig::dns_scheme): the transport
        /// of the endpoints of `dns:` targets (`tcp`, `auto`, `rdma`, `tcp+tls`, ...).
        dns_scheme: String => |c, v| c.balance.dns_scheme = v,
        /// See [`BalanceConfig::eject_after_failures`](rdmarpc_core::BalanceConfig::eject_after_failures).
        eject_after_failures: u32 => |c, v| c.balance.eject_after_failures = v,
        /// [`BalanceConfig::ejection_time`](rdmarpc_core::BalanceConfig::ejection_time) in ms.
        ejection_time_ms: u64 => |c, v| c.balance.ejection_time = Duration::from_millis(v),
        /// See [`BalanceConfig::max_endpoints`](rdmarpc_core::BalanceConfig::max_endpoints).
        max_endpoints: usize => |c, v| c.balance.max_endpoints = v,
        /// [`RetryPolicy::max_attempts`](rdmarpc_core::RetryPolicy::max_attempts); 0 or 1 turns
        /// retries off, more turns the default [`RetryPolicy`](rdmarpc_core::RetryPolicy) on.
        retry_max_attempts: u32 => |c, v| c.retry = (v > 1).then(|| {
            let mut policy = c.retry.clone().unwrap_or_default();
            policy.max_attempts = v;
            policy
        }),
        /// [`RetryPolicy::methods`](rdmarpc_core::RetryPolicy::methods), separated by commas
        /// (`/kv.Kv/Get,kv.Admin`, `*`); turns the default policy on if it is off.
        retry_methods: String => |c, v| {
            let mut policy = c.retry.clone().unwrap_or_default();
            policy.methods = v.split(',').map(str::trim).filter(|m| !m.is_empty()).map(String::from).collect();
            c.retry = Some(policy);
        },
    }
}

/// A setting read from its text form (`FromStr`), in a file or a variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed<T>(pub T);

impl<T: std::str::FromStr> std::str::FromStr for Parsed<T> {
    type Err = T::Err;
    fn from_str(s: &str) -> Result<Self, T::Err> {
        s.parse().map(Parsed)
    }
}

impl<'de, T: std::str::FromStr> Deserialize<'de> for Parsed<T>
where
    T::Err: std::fmt::Display,
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map(Parsed).map_err(serde::de::Error::custom)
    }
}

section! {
    /// The `[grpc]` table (variables `RPC_GRPC_<FIELD>`): [`rdmarpc_grpc::GrpcConfig`].
    GrpcSection, "RPC_GRPC_", rdmarpc_grpc::GrpcConfig {
        /// See [`GrpcConfig::max_concurrent_streams`](rdmarpc_grpc::GrpcConfig::max_concurrent_streams).
        max_concurrent_streams: u32 => |c, v| c.max_concurrent_streams = v,
        /// See [`GrpcConfig::stream_window`](rdmarpc_grpc::GrpcConfig::stream_window).
        stream_window: u32 => |c, v| c.stream_window = v,
        /// See [`GrpcConfig::connection_window`](rdmarpc_grpc::GrpcConfig::connection_window).
        connection_window: u32 => |c, v| c.connection_window = v,
        /// [`GrpcConfig::body_timeout`](rdmarpc_grpc::GrpcConfig::body_timeout) in ms.
        body_timeout_ms: u64 => |c, v| c.body_timeout = Duration::from_millis(v),
        /// See [`GrpcConfig::send_compression`](rdmarpc_grpc::GrpcConfig::send_compression): `gzip` or `zstd`.
        send_compression: rdmarpc_grpc::Encoding => |c, v| c.send_compression = Some(v),
        /// [`GrpcConfig::stream_idle_timeout`](rdmarpc_grpc::GrpcConfig::stream_idle_timeout) in ms.
        stream_idle_timeout_ms: u64 => |c, v| c.stream_idle_timeout = Duration::from_millis(v),
        /// [`GrpcConfig::write_timeout`](rdmarpc_grpc::GrpcConfig::write_timeout) in ms.
        write_timeout_ms: u64 => |c, v| c.write_timeout = Duration::from_millis(v),
        /// [`GrpcConfig::keepalive_interval`](rdmarpc_grpc::GrpcConfig::keepalive_interval) in ms; 0 turns keepalives off.
        keepalive_interval_ms: u64 => |c, v| c.keepalive_interval = (v > 0).then(|| Duration::from_millis(v)),
        /// [`GrpcConfig::keepalive_timeout`](rdmarpc_grpc::GrpcConfig::keepalive_timeout) in ms.
        keepalive_timeout_ms: u64 => |c, v| c.keepalive_timeout = Duration::from_millis(v),
    }
}

section! {
    /// The `[tls]` table (variables `RPC_TLS_<FIELD>`): [`rdmarpc_transport_tcp::TlsConfig`],
    /// used by `+tls` addresses. Paths are as given (relative ones to the working
    /// directory).
    TlsSection, "RPC_TLS_", rdmarpc_transport_tcp::TlsConfig {
        /// See [`TlsConfig::cert`](rdmarpc_transport_tcp::TlsConfig::cert).
        cert: std::path::PathBuf => |c, v| c.cert = Some(v),
        /// See [`TlsConfig::key`](rdmarpc_transport_tcp::TlsConfig::key).
        key: std::path::PathBuf => |c, v| c.key = Some(v),
        /// See [`TlsConfig::ca`](rdmarpc_transport_tcp::TlsConfig::ca).
        ca: std::path::PathBuf => |c, v| c.ca = Some(v),
        /// See [`TlsConfig::client_auth`](rdmarpc_transport_tcp::TlsConfig::client_auth): `none`, `optional` or `required`.
        client_auth: rdmarpc_transport_tcp::ClientAuth => |c, v| c.client_auth = v,
        /// See [`TlsConfig::server_name`](rdmarpc_transport_tcp::TlsConfig::server_name).
        server_name: String => |c, v| c.server_name = Some(v),
    }
}

section! {
    /// The `[rdma]` table (variables `RPC_RDMA_<FIELD>`): `rdmarpc_transport_rdma::RdmaConfig`.
    /// Without the `rdma` feature it is read (so that one file serves both builds) and
    /// ignored with a warning.
    RdmaSection, "RPC_RDMA_", rdmarpc_transport_rdma::RdmaConfig, if "rdma" {
        /// See `RdmaConfig::device`.
        device: String => |c, v| c.device = Some(v),
        /// See `RdmaConfig::port`.
        port: u8 => |c, v| c.port = Some(v),
        /// See `RdmaConfig::gid_index`.
        gid_index: u8 => |c, v| c.gid_index = Some(v),
        /// See `RdmaConfig::ring_slots`.
        ring_slots: u32 => |c, v| c.ring_slots = v,
        /// See `RdmaConfig::initial_ring_slots`.
        initial_ring_slots: u32 => |c, v| c.initial_ring_slots = v,
        /// See `RdmaConfig::slot_size`.
        slot_size: u32 => |c, v| c.slot_size = v,
        /// See `RdmaConfig::eager_threshold`.
        eager_threshold: usize => |c, v| c.eager_threshold = Some(v),
        /// `RdmaConfig::poll_spin` in microseconds.
        poll_spin_us: u64 => |c, v| c.poll_spin = Duration::from_micros(v),
        /// `RdmaConfig::await_spin` in microseconds.
        await_spin_us: u64 => |c, v| c.await_spin = Duration::from_micros(v),
        /// `RdmaConfig::ping_interval` in milliseconds.
        ping_interval_ms: u64 => |c, v| c.ping_interval = Duration::from_millis(v),
        /// `RdmaConfig::ping_timeout` in milliseconds.
        ping_timeout_ms: u64 => |c, v| c.ping_timeout = Duration::from_millis(v),
        /// See `RdmaConfig::read_chunk`.
        read_chunk: usize => |c, v| c.read_chunk = v,
        /// See `RdmaConfig::lend_budget`.
        lend_budget: usize => |c, v| c.lend_budget = Some(v),
        /// `RdmaConfig::loan_timeout` in milliseconds.
        loan_timeout_ms: u64 => |c, v| c.loan_timeout = Duration::from_millis(v),
        /// See `RdmaConfig::max_loans`.
        max_loans: u16 => |c, v| c.max_loans = v,
        /// See `RdmaConfig::max_inline`.
        max_inline: u32 => |c, v| c.max_inline = v,
        /// See `RdmaConfig::pool_keep_bytes`.
        pool_keep_bytes: usize => |c, v| c.pool_keep_bytes = v,
        /// See `RdmaConfig::keep_bytes`.
        keep_bytes: usize => |c, v| c.keep_bytes = v,
    }
}

impl FileConfig {
    /// Parses TOML text.
    ///
    /// # Errors
    /// The parse error, naming the bad field.
    pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: None,
            message: e.to_string(),
        })
    }

    /// Reads and parses a file.
    ///
    /// # Errors
    /// The read or parse error, with the path.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: Some(path.to_owned()),
            message: e.to_string(),
        })
    }

    /// The same settings from environment variables, for deployments that configure by
    /// environment: `RPC_ADDRESS`, `RPC_MAX_MESSAGE_SIZE`, `RPC_HANDSHAKE_TIMEOUT_MS`,
    /// `RPC_MAX_HANDSHAKES`, `RPC_MAX_HANDSHAKES_PER_PEER`, and `RPC_TCP_<FIELD>`, `RPC_SERVER_<FIELD>`, `RPC_CLIENT_<FIELD>`,
    /// `RPC_GRPC_<FIELD>`, `RPC_TLS_<FIELD>` and `RPC_RDMA_<FIELD>` for every field of those tables, in upper case
    /// (`RPC_RDMA_RING_SLOTS`, `RPC_RDMA_POLL_SPIN_US`, ...: each section's `variables()`).
    ///
    /// # Errors
    /// A variable that is set but not a number where one is needed, naming it.
    pub fn from_env() -> Result<FileConfig, ConfigError> {
        FileConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// [`FileConfig::from_env`] over any source of variables (testable).
    ///
    /// # Errors
    /// As [`FileConfig::from_env`].
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<FileConfig, ConfigError> {
        Ok(FileConfig {
            address: get("RPC_ADDRESS"),
            max_message_size: var(&get, "RPC_MAX_MESSAGE_SIZE")?,
            handshake_timeout_ms: var(&get, "RPC_HANDSHAKE_TIMEOUT_MS")?,
            max_handshakes: var(&get, "RPC_MAX_HANDSHAKES")?,
            max_handshakes_per_peer: var(&get, "RPC_MAX_HANDSHAKES_PER_PEER")?,
            tcp: TcpSection::from_vars(&get)?,
            server: ServerSection::from_vars(&get)?,
            client: ClientSection::from_vars(&get)?,
            grpc: GrpcSection::from_vars(&get)?,
            tls: TlsSection::from_vars(&get)?,
            rdma: RdmaSection::from_vars(&get)?,
        })
    }

    /// Applies every field that is set to `settings`.
    ///
    /// # Errors
    /// If the resulting RDMA settings are inconsistent.
    pub fn apply(&self, settings: &mut TransportSettings) -> Result<(), ConfigError> {
        if let Some(max) = self.max_message_size {
            settings.max_message_size(max);
        }
        if let Some(v) = self.handshake_timeout_ms {
            settings.handshake_timeout = Duration::from_millis(v);
        }
        if let Some(v) = self.max_handshakes {
            settings.max_handshakes = v;
        }
        if let Some(v) = self.max_handshakes_per_peer {
            settings.max_handshakes_per_peer = v;
        }
        self.tcp.apply_to(&mut settings.tcp);
        self.grpc.apply_to(&mut settings.grpc);
        self.tls.apply_to(&mut settings.tls);
        #[cfg(feature = "rdma")]
        {
            self.rdma.apply_to(&mut settings.rdma);
            settings.rdma.validate().map_err(ConfigError::Invalid)
        }
        #[cfg(not(feature = "rdma"))]
        {
            if self.rdma != RdmaSection::default() {
                tracing::warn!("[rdma] settings ignored: built without the `rdma` feature");
            }
            Ok(())
        }
    }
}

impl FileConfig {
    /// Applies the `[server]` table (and `max_message_size`) to `config`.
    pub fn apply_server(&self, config: &mut rdmarpc_core::ServerConfig) {
        if let Some(v) = self.max_message_size {
            config.max_message_size = v;
        }
        self.server.apply_to(config);
    }

    /// Applies the `[client]` table (and `max_message_size`) to `config`.
    pub fn apply_client(&self, config: &mut rdmarpc_core::ClientConfig) {
        if let Some(v) = self.max_message_size {
            config.max_message_size = v;
        }
        self.client.apply_to(config);
    }
}

impl TransportSettings {
    /// The defaults with every `RPC_*` environment variable that is set applied
    /// ([`FileConfig::from_env`]): the settings of connections that
    /// [`Dial`](rdmarpc_core::Dial) opens (`FooClient::connect`, `Channel::connect`).
    ///
    /// # Errors
    /// A variable that is set to something unusable, naming it.
    pub fn from_env() -> Result<TransportSettings, ConfigError> {
        let mut settings = TransportSettings::default();
        FileConfig::from_env()?.apply(&mut settings)?;
        Ok(settings)
    }
}

/// `FooClient::connect(url)`, `Channel::connect(url)` and their lazy forms dial with
/// [`connect`](crate::connect), with the settings of the environment
/// ([`TransportSettings::from_env`]; `RPC_CLIENT_*` and `RPC_MAX_MESSAGE_SIZE` for the
/// channel).
impl rdmarpc_core::Dial for crate::AnyConnection {
    async fn dial(endpoint: &rdmarpc_core::Endpoint) -> Result<Self, rdmarpc_core::TransportError> {
        let settings = TransportSettings::from_env()
            .map_err(|e| rdmarpc_core::TransportError::Other(e.to_string()))?;
        crate::connect(endpoint, &settings).await
    }

    fn client_config() -> Result<rdmarpc_core::ClientConfig, rdmarpc_core::TransportError> {
        let mut config = rdmarpc_core::ClientConfig::default();
        FileConfig::from_env()
            .map_err(|e| rdmarpc_core::TransportError::Other(e.to_string()))?
            .apply_client(&mut config);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "rdma")]
    fn parses_and_applies_the_documented_example() {
        let text = "address = \"auto://10.77.0.2:7000\"\nmax_message_size = 1048576\n[rdma]\nring_slots = 32\nslot_size = 4096\neager_threshold = 1000\nping_interval_ms = 200\nping_timeout_ms = 900\n";
        let file = FileConfig::parse(text).unwrap();
        assert_eq!(file.address.as_deref(), Some("auto://10.77.0.2:7000"));
        let mut settings = TransportSettings::default();
        file.apply(&mut settings).unwrap();
        assert_eq!(settings.rdma.ring_slots, 32);
        assert_eq!(settings.rdma.eager_limit(), 1000);
        assert_eq!(settings.rdma.max_message_size, 1 << 20);
        assert_eq!(settings.tcp.max_message_size, 1 << 20);
        assert_eq!(settings.rdma.ping_timeout, Duration::from_millis(900));
    }

    #[test]
    fn grpc_compression_and_tls_tables_parse() {
        let file = FileConfig::parse(
            "[grpc]\nsend_compression = \"zstd\"\n[tls]\nca = \"ca.pem\"\nclient_auth = \"optional\"\n",
        )
        .unwrap();
        let mut settings = TransportSettings::default();
        file.apply(&mut settings).unwrap();
        assert_eq!(
            settings.grpc.send_compression,
            Some(rdmarpc_grpc::Encoding::Zstd)
        );
        assert_eq!(
            settings.tls.client_auth,
            rdmarpc_transport_tcp::ClientAuth::Optional
        );
        assert!(FileConfig::parse("[grpc]\nsend_compression = \"snappy\"\n").is_err());
        let env = FileConfig::from_vars(|name| {
            (name == "RPC_GRPC_SEND_COMPRESSION").then(|| "gzip".to_owned())
        })
        .unwrap();
        assert_eq!(
            env.grpc.send_compression,
            Some(rdmarpc_grpc::Encoding::Gzip)
        );
    }

    #[test]
    #[cfg(feature = "rdma")]
    fn environment_variables_map_to_the_same_fields() {
        let vars = [
            ("RPC_RDMA_POLL_SPIN_US", "500"),
            ("RPC_MAX_MESSAGE_SIZE", "2048"),
            ("RPC_RDMA_DEVICE", "rxe1"),
            ("RPC_RDMA_PORT", "2"),
            ("RPC_RDMA_GID_INDEX", "3"),
        ];
        let get = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        let env = FileConfig::from_vars(get).unwrap();
        let mut settings = TransportSettings::default();
        env.apply(&mut settings).unwrap();
        assert_eq!(settings.rdma.poll_spin, Duration::from_micros(500));
        assert_eq!(settings.tcp.max_message_size, 2048);
        assert_eq!(settings.rdma.device.as_deref(), Some("rxe1"));
        assert_eq!(
            (settings.rdma.port, settings.rdma.gid_index),
            (Some(2), Some(3))
        );
        assert!(
            FileConfig::from_vars(|n| (n == "RPC_RDMA_SLOT_SIZE").then(|| "big".into())).is_err()
        );
    }

    #[test]
    fn server_client_and_tcp_tables_from_file_and_environment() {
        let file = FileConfig::parse(
            "max_handshakes_per_peer = 3\n[server]\nmax_concurrent_calls_per_connection = 8\ndrain_timeout_ms = 50\n[client]\nkeepalive_interval_ms = 0\n[tcp]\nwrite_timeout_ms = 700\n",
        )
        .unwrap();
        let mut server = rdmarpc_core::ServerConfig::default();
        file.apply_server(&mut server);
        assert_eq!(server.max_concurrent_calls_per_connection, 8);
        assert_eq!(server.drain_timeout, Duration::from_millis(50));
        let mut client = rdmarpc_core::ClientConfig::default();
        file.apply_client(&mut client);
        assert_eq!(client.keepalive_interval, None);
        let mut settings = TransportSettings::default();
        file.apply(&mut settings).unwrap();
        assert_eq!(settings.tcp.write_timeout, Duration::from_millis(700));
        assert_eq!(settings.max_handshakes_per_peer, 3);
        let env = FileConfig::from_vars(|n| match n {
            "RPC_SERVER_MAX_QUEUED_REPLIES" => Some("3".into()),
            "RPC_TCP_FIRST_FRAME_TIMEOUT_MS" => Some("250".into()),
            "RPC_CLIENT_KEEPALIVE_TIMEOUT_MS" => Some("900".into()),
            "RPC_MAX_HANDSHAKES" => Some("5".into()),
            "RPC_MAX_HANDSHAKES_PER_PEER" => Some("2".into()),
            _ => None,
        })
        .unwrap();
        env.apply(&mut settings).unwrap();
        env.apply_server(&mut server);
        env.apply_client(&mut client);
        assert_eq!(server.max_queued_replies, 3);
        assert_eq!(settings.tcp.first_frame_timeout, Duration::from_millis(250));
        assert_eq!(settings.max_handshakes, 5);
        assert_eq!(settings.max_handshakes_per_peer, 2);
        assert_eq!(client.keepalive_timeout, Duration::from_millis(900));
    }

    #[test]
    #[cfg(feature = "rdma")]
    fn every_field_of_a_table_has_its_variable() {
        let mut names = RdmaSection::variables();
        names.extend(TcpSection::variables());
        names.extend(ServerSection::variables());
        names.extend(ClientSection::variables());
        names.extend(GrpcSection::variables());
        assert_eq!(names.len(), 18 + 4 + 22 + 15 + 9);
        // Every variable set: numbers to 7, the names to one they take.
        let file = FileConfig::from_vars(|n| {
            names.iter().any(|v| v == n).then(|| match n {
                "RPC_GRPC_SEND_COMPRESSION" => "gzip".into(),
                "RPC_CLIENT_LB_STRATEGY" => "round_robin".into(),
                "RPC_CLIENT_WAIT_FOR_READY" => "true".into(),
                _ => "7".into(),
            })
        })
        .unwrap();
        let mut server = rdmarpc_core::ServerConfig::default();
        file.apply_server(&mut server);
        assert_eq!(server.max_connection_idle, Some(Duration::from_millis(7)));
        assert_eq!(server.max_sending_bytes_per_peer, 7);
        assert_eq!(server.max_connection_age, Some(Duration::from_millis(7)));
        assert_eq!(
            server.max_connection_age_grace,
            Some(Duration::from_millis(7))
        );
        let off = FileConfig::from_vars(|n| {
            (n == "RPC_SERVER_MAX_CONNECTION_AGE_MS").then(|| "0".into())
        })
        .unwrap();
        off.apply_server(&mut server);
        assert_eq!(server.max_connection_age, None, "0 turns it off");
        let mut client = rdmarpc_core::ClientConfig::default();
        file.apply_client(&mut client);
        assert_eq!(
            client.balance.strategy,
            rdmarpc_core::LbStrategy::RoundRobin
        );
        assert_eq!(client.balance.dns_refresh, Duration::from_millis(7));
        assert_eq!(client.retry.as_ref().map(|r| r.max_attempts), Some(7));
        assert_eq!(
            client.retry.as_ref().map(|r| r.methods.clone()),
            Some(vec!["7".to_owned()])
        );
        assert!(
            FileConfig::from_vars(|n| (n == "RPC_CLIENT_LB_STRATEGY").then(|| "random".into()))
                .is_err()
        );
        let toml =
            FileConfig::parse("[client]\nlb_strategy = \"p2c\"\nretry_methods = \"*\"\n").unwrap();
        assert_eq!(
            toml.client.lb_strategy,
            Some(Parsed(rdmarpc_core::LbStrategy::PowerOfTwoChoices))
        );
        assert!(FileConfig::parse("[client]\nlb_strategy = \"random\"\n").is_err());
        assert_eq!(
            file.grpc.send_compression,
            Some(rdmarpc_grpc::Encoding::Gzip)
        );
        assert_eq!(
            file.rdma,
            RdmaSection {
                device: Some("7".into()),
                port: Some(7),
                gid_index: Some(7),
                ring_slots: Some(7),
                initial_ring_slots: Some(7),
                slot_size: Some(7),
                eager_threshold: Some(7),
                poll_spin_us: Some(7),
                await_spin_us: Some(7),
                ping_interval_ms: Some(7),
                ping_timeout_ms: Some(7),
                read_chunk: Some(7),
                lend_budget: Some(7),
                loan_timeout_ms: Some(7),
                max_loans: Some(7),
                max_inline: Some(7),
                pool_keep_bytes: Some(7),
                keep_bytes: Some(7),
            }
        );
        assert_eq!(file.server.drain_timeout_ms, Some(7));
        assert_eq!(file.client.connect_timeout_ms, Some(7));
        assert_eq!(file.tcp.first_frame_timeout_ms, Some(7));
        let mut settings = TransportSettings::default();
        file.rdma.apply_to(&mut settings.rdma);
        assert_eq!(settings.rdma.await_spin, Duration::from_micros(7));
        assert_eq!(settings.rdma.pool_keep_bytes, 7);
        assert_eq!(settings.rdma.keep_bytes, 7);
        let bad = FileConfig::from_vars(|n| (n == "RPC_RDMA_MAX_LOANS").then(|| "70000".into()));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("RPC_RDMA_MAX_LOANS=\"70000\" is not a valid u16"));
    }

    #[test]
    #[cfg(feature = "rdma")]
    fn typos_and_bad_values_are_errors() {
        assert!(FileConfig::parse("[rdma]\nring_slot = 3\n").is_err());
        let file = FileConfig::parse("[rdma]\nslot_size = 16\n").unwrap();
        assert!(file.apply(&mut TransportSettings::default()).is_err());
    }

    #[test]
    #[cfg(not(feature = "rdma"))]
    fn an_rdma_table_is_read_and_ignored_without_the_feature() {
        let file =
            FileConfig::parse("[rdma]\nring_slots = 32\n[tcp]\nwrite_timeout_ms = 5\n").unwrap();
        assert_eq!(file.rdma.ring_slots, Some(32));
        let mut settings = TransportSettings::default();
        file.apply(&mut settings).unwrap();
        assert_eq!(settings.tcp.write_timeout, Duration::from_millis(5));
        assert!(FileConfig::parse("[rdma]\nring_slot = 3\n").is_err());
    }

    #[test]
    fn errors_are_typed_and_name_what_is_wrong() {
        let err = FileConfig::parse("[tcp]\nwrite_timeout = 5\n").unwrap_err();
        assert!(
            matches!(err, ConfigError::Parse { path: None, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("write_timeout"), "{err}");
        let err = FileConfig::load(Path::new("/nonexistent/rpc.toml")).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
        assert!(
            err.to_string().starts_with("/nonexistent/rpc.toml: "),
            "{err}"
        );
        let err =
            FileConfig::from_vars(|n| (n == "RPC_TCP_WRITE_TIMEOUT_MS").then(|| "soon".into()))
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "RPC_TCP_WRITE_TIMEOUT_MS=\"soon\" is not a valid u64"
        );
        // Usable with `?` in a function returning anyhow::Result or Box<dyn Error>.
        let boxed: Box<dyn std::error::Error + Send + Sync> = err.into();
        assert!(boxed.to_string().contains("soon"));
    }
}
