//! Flags that say what to call and how to reach it: the method and its descriptors
//! (ghz's "Proto" flags), TLS (ghz's "Security" flags) and the connections.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args as ClapArgs, ValueEnum};

use super::values::{parse_bool, parse_bytes, parse_duration};

/// The method and where its descriptors come from: `--proto`, `--protoset`, or the
/// server's reflection service when neither is given.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct ProtoFlags {
    /// The Protocol Buffer .proto file. Without --proto and --protoset the descriptors are
    /// fetched from the server's reflection service.
    #[arg(long, value_name = "FILE")]
    pub proto: Option<PathBuf>,
    /// The compiled protoset file (a FileDescriptorSet, `protoc --descriptor_set_out`).
    /// Alternative to --proto, which takes precedence.
    #[arg(long, value_name = "FILE")]
    pub protoset: Option<PathBuf>,
    /// A fully-qualified method name in 'package.Service/Method' or
    /// 'package.Service.Method' format.
    #[arg(long, value_name = "METHOD")]
    pub call: Option<String>,
    /// Comma separated list of proto import paths (also repeatable). The current working
    /// directory and the directory of the .proto are searched too.
    #[arg(
        short = 'i',
        long = "import-paths",
        short_alias = 'I',
        value_name = "DIRS",
        value_delimiter = ','
    )]
    pub import_paths: Vec<PathBuf>,
    /// Reflect metadata as stringified JSON used only for reflection requests.
    #[arg(long, value_name = "JSON")]
    pub reflect_metadata: Option<String>,
}

/// TLS: ghz's "Security" flags. A bare HOST:PORT (a gRPC server, as in ghz) and DNS
/// targets use TLS unless --insecure; URLs say it with their scheme (`grpcs://`,
/// `tcp+tls://`, ...). The other flags apply to every TLS connection.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct SecurityFlags {
    /// File containing trusted root certificates (PEM) for verifying the server; default:
    /// the system's roots (SSL_CERT_FILE and SSL_CERT_DIR are honoured).
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// File containing the client certificate (PEM), to present to the server. Must also
    /// provide --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// File containing the client private key (PEM), to present to the server. Must also
    /// provide --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Server name override when validating the TLS certificate (also sent as SNI).
    #[arg(long, value_name = "NAME")]
    pub cname: Option<String>,
    /// Skip TLS client verification of the server's certificate chain and host name.
    #[arg(long = "skipTLS", value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub skip_tls: bool,
    /// Use a plaintext, insecure connection (for a bare HOST:PORT or a DNS target).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub insecure: bool,
    /// Value to be used as the :authority pseudo-header of gRPC requests.
    #[arg(long, value_name = "AUTHORITY")]
    pub authority: Option<String>,
}

/// The connections: how many, their timeouts, sizes and compression, and balancing.
#[derive(ClapArgs, Debug, Clone)]
pub struct ConnectionFlags {
    /// Number of connections to use. Concurrency is distributed evenly among all the
    /// connections (with several endpoints: balanced channels, each with a connection
    /// per endpoint).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Connection timeout for the initial connection dial (and each reflection request).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Keepalive time duration: a connection silent this long with calls in flight is
    /// pinged, and closed if the ping is not answered within as long. Only used if
    /// present and above 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub keepalive: Option<Duration>,
    /// Number of CPU cores to use (threads of the load generator, at most 1024);
    /// default: all.
    #[arg(long, value_name = "N", value_parser = parse_cpus)]
    pub cpus: Option<usize>,
    /// Client load balancing strategy over a list of endpoints (tcp://h1:p1,h2:p2) or a
    /// DNS name: pick_first (gRPC's default, ghz's), round_robin, or p2c (power of two
    /// choices on calls in flight). Default: pick_first for a DNS name, p2c for a list.
    #[arg(long, value_enum, value_name = "STRATEGY")]
    pub lb_strategy: Option<LbStrategy>,
    /// The client behind gRPC targets: this framework's `Channel` over its gRPC
    /// transport (`rpc`, what generated clients use), or tonic's client (`tonic`, for
    /// comparison; plaintext only).
    #[arg(long, value_enum, default_value_t = GrpcClient::Rpc)]
    pub grpc_client: GrpcClient,
    /// Enable gzip compression on requests (gRPC targets).
    #[arg(short = 'e', long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false",
        value_parser = parse_bool)]
    pub enable_compression: bool,
    /// Maximum message size the client can receive, in bytes or human-readable ("4MB",
    /// "1GiB"); default: --max-message-size.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_recv_message_size: Option<u64>,
    /// Maximum message size the client can send, in bytes or human-readable; default:
    /// --max-message-size.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_send_message_size: Option<u64>,
    /// Largest message sent or received when neither of the two above is given, in
    /// bytes or human-readable (rpc-load's bound; ghz allows up to 2 GiB).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_message_size: u64,
}

/// The most threads `--cpus` may ask for.
pub const MAX_CPUS: usize = 1024;

/// `--cpus`: a count of threads, at most [`MAX_CPUS`] (tokio panics or aborts on huge
/// ones).
fn parse_cpus(text: &str) -> Result<usize, String> {
    let n: usize = text.parse().map_err(|e| format!("{e}"))?;
    if n > MAX_CPUS {
        return Err(format!("at most {MAX_CPUS} threads"));
    }
    Ok(n)
}

/// `--lb-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum LbStrategy {
    /// Every call to the first usable endpoint (gRPC's and ghz's default).
    #[value(name = "pick_first")]
    PickFirst,
    /// Each endpoint in turn.
    #[value(name = "round_robin", alias = "round-robin")]
    RoundRobin,
    /// Power of two choices on calls in flight (rpc-load's addition).
    P2c,
}

impl From<LbStrategy> for rdmarpc_core::LbStrategy {
    fn from(strategy: LbStrategy) -> Self {
        match strategy {
            LbStrategy::PickFirst => rdmarpc_core::LbStrategy::PickFirst,
            LbStrategy::RoundRobin => rdmarpc_core::LbStrategy::RoundRobin,
            LbStrategy::P2c => rdmarpc_core::LbStrategy::PowerOfTwoChoices,
        }
    }
}

/// `--grpc-client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum GrpcClient {
    /// This framework's channel over its gRPC client transport.
    Rpc,
    /// tonic's client.
    Tonic,
}

impl ConnectionFlags {
    /// The largest message received and the largest sent.
    pub fn message_limits(&self) -> (usize, usize) {
        let size = |v: Option<u64>| {
            usize::try_from(v.unwrap_or(self.max_message_size)).unwrap_or(usize::MAX)
        };
        (
            size(self.max_recv_message_size),
            size(self.max_send_message_size),
        )
    }
}
