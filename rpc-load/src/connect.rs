//! Turning the address URL into a connection.
//!
//! `tcp://`, `rdma://` and `auto://` name this framework's transports (an
//! [`rdmarpc_core::Endpoint`]); `grpc://HOST:PORT` and `grpcs://HOST:PORT` name a
//! standard gRPC server, and so does a bare `HOST:PORT` as in ghz (over TLS unless
//! `--insecure`). TLS settings (`--cacert`, `--cert`, `--key`, `--cname`, `--skipTLS`)
//! apply to every TLS connection: `grpcs://` and the `+tls` schemes; each flag overrides
//! its own setting of the environment's (`RPC_TLS_*`), the others stay.
//!
//! The runner is generic over [`rdmarpc_core::Connection`]; [`RpcConnection`] is the one
//! connection type this binary instantiates it with, and [`connect`] the one function that
//! makes such connections. Wiring another transport changes those two items only.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use rdmarpc_core::Endpoint;
use rdmarpc_transport::{AnyConnection, TlsConfig, TransportSettings};

use crate::cli::SecurityFlags;

/// Where to send the load.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Address {
    /// An endpoint reached through this framework's `Channel`: its own transports
    /// (`tcp://`, `rdma://`, `auto://`, each also `+tls`) and gRPC servers (`grpc://`,
    /// `grpcs://`) through its gRPC client transport.
    Rpc(Endpoint),
    /// Several endpoints (`tcp://h1:p1,h2:p2`) or a DNS name (`dns:///name:port`), reached
    /// through this framework's balanced `Channel`; holds the target as given.
    Balanced(String),
    /// gRPC servers driven through tonic's client (`--grpc-client tonic`); holds their
    /// `HOST:PORT`s (several: tonic's balanced channel).
    Grpc(Vec<String>),
}

impl Address {
    /// Parses an endpoint URL, a list (`tcp://h1:p1,h2:p2`) or a DNS target
    /// (`dns:///name:port`); with `tonic`, `grpc://` addresses are for tonic's client.
    ///
    /// ```
    /// use rdmarpc_load::connect::Address;
    /// assert!(matches!(Address::parse("grpc://127.0.0.1:50052", true).unwrap(), Address::Grpc(a) if a == ["127.0.0.1:50052"]));
    /// assert!(matches!(Address::parse("grpc://h:1,h:2", true).unwrap(), Address::Grpc(a) if a == ["h:1", "h:2"]));
    /// assert!(matches!(Address::parse("tcp://h:1,h:2", false).unwrap(), Address::Balanced(_)));
    /// assert!(matches!(Address::parse("dns:///backend:50051", false).unwrap(), Address::Balanced(_)));
    /// assert!(Address::parse("tcp://h:1,h", false).is_err());
    /// assert!(matches!(Address::parse("grpc://127.0.0.1:50052", false).unwrap(), Address::Rpc(_)));
    /// assert!(matches!(Address::parse("tcp://127.0.0.1:50051", true).unwrap(), Address::Rpc(_)));
    /// assert!(Address::parse("127.0.0.1", false).is_err());
    /// ```
    ///
    /// # Errors
    /// Not a URL of one of these schemes with a numeric port.
    pub fn parse(url: &str, tonic: bool) -> anyhow::Result<Address> {
        if url.starts_with("dns:") {
            if tonic {
                bail!(
                    "--grpc-client tonic takes grpc://HOST:PORT[,HOST:PORT...], not a DNS target"
                );
            }
            return Ok(Address::Balanced(url.to_owned()));
        }
        if let Some((scheme, list)) = url.split_once("://").filter(|(_, a)| a.contains(',')) {
            let endpoints = list
                .split(',')
                .map(|address| Address::parse(&format!("{scheme}://{}", address.trim()), tonic))
                .collect::<anyhow::Result<Vec<_>>>()?;
            if tonic && scheme == "grpc" {
                let addresses = endpoints
                    .into_iter()
                    .flat_map(|a| match a {
                        Address::Grpc(a) => a,
                        _ => Vec::new(),
                    })
                    .collect();
                return Ok(Address::Grpc(addresses));
            }
            return Ok(Address::Balanced(url.to_owned()));
        }
        let endpoint: Endpoint = url.parse().map_err(|e: rdmarpc_core::ParseEndpointError| {
            anyhow::anyhow!(
                "{e}; expected tcp://, rdma://, auto:// (+tls), grpc:// or grpcs://HOST:PORT"
            )
        })?;
        if tonic && endpoint.kind == rdmarpc_core::TransportKind::Grpc {
            if endpoint.tls {
                bail!("--grpc-client tonic drives plaintext grpc:// only");
            }
            return Ok(Address::Grpc(vec![endpoint.address]));
        }
        Ok(Address::Rpc(endpoint))
    }
}

/// The URL a host names: a bare `HOST:PORT` is a gRPC server as in ghz, `grpcs://` (TLS)
/// unless `insecure` (`grpc://`); a URL is itself.
///
/// ```
/// use rdmarpc_load::connect::url_of;
/// assert_eq!(url_of("0.0.0.0:50051", false).unwrap(), "grpcs://0.0.0.0:50051");
/// assert_eq!(url_of("0.0.0.0:50051", true).unwrap(), "grpc://0.0.0.0:50051");
/// assert_eq!(url_of("tcp://h:1", true).unwrap(), "tcp://h:1");
/// assert!(url_of("grpcs://h:1", true).is_err());
/// assert!(url_of("tcp+tls://h:1", true).is_err());
/// ```
///
/// # Errors
/// `insecure` with a TLS scheme.
pub fn url_of(host: &str, insecure: bool) -> anyhow::Result<String> {
    if !host.contains("://") && !host.starts_with("dns:") {
        let scheme = if insecure { "grpc" } else { "grpcs" };
        return Ok(format!("{scheme}://{}", host.trim()));
    }
    let scheme = host.split_once("://").map_or("", |(s, _)| s);
    if insecure && (scheme == "grpcs" || scheme.ends_with("+tls")) {
        bail!("--insecure contradicts {scheme}://, a TLS scheme");
    }
    Ok(host.to_owned())
}

/// The connection type behind `tcp://`, `rdma://` and `auto://`: what the runner is
/// instantiated with.
pub type RpcConnection = AnyConnection;

/// Settings of the connections to the server under test.
#[derive(Debug, Clone, Default)]
pub struct ConnectSettings {
    /// How long connecting (including any transport handshake) may take.
    pub connect_timeout: Duration,
    /// Largest message sent or received.
    pub max_message_size: usize,
    /// TLS flags, over the `RPC_TLS_*` environment's settings.
    pub tls: TlsFlags,
    /// `--authority`: the `:authority` of gRPC requests.
    pub authority: Option<String>,
    /// `-e`: gzip on gRPC requests.
    pub gzip: bool,
}

/// The TLS settings the flags give; each given one replaces its own setting only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFlags {
    /// `--cacert`.
    pub ca: Option<PathBuf>,
    /// `--cert` and `--key`.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `--cname`.
    pub server_name: Option<String>,
    /// `--skipTLS` (when set; unset, the environment's stays).
    pub skip_verify: bool,
}

impl TlsFlags {
    /// Sets the given settings into `tls`, leaving the others as they are.
    pub fn apply(&self, tls: &mut TlsConfig) {
        if let Some(ca) = &self.ca {
            tls.ca(ca);
        }
        if let Some((cert, key)) = &self.identity {
            tls.identity(cert, key);
        }
        if let Some(name) = &self.server_name {
            tls.server_name(name);
        }
        if self.skip_verify {
            tls.skip_verify(true);
        }
    }
}

/// The TLS settings the flags give.
///
/// # Errors
/// `--cert` without `--key` (or the reverse).
pub fn tls_of(flags: &SecurityFlags) -> anyhow::Result<TlsFlags> {
    let identity = match (&flags.cert, &flags.key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        _ => bail!("--cert and --key go together"),
    };
    Ok(TlsFlags {
        ca: flags.cacert.clone(),
        identity,
        server_name: flags.cname.clone(),
        skip_verify: flags.skip_tls,
    })
}

impl ConnectSettings {
    /// Applies these settings over `transport`'s.
    pub fn apply(&self, transport: &mut TransportSettings) {
        transport.max_message_size(self.max_message_size);
        self.tls.apply(&mut transport.tls);
        if self.authority.is_some() {
            transport.grpc.authority = self.authority.clone();
        }
        if self.gzip {
            transport.grpc.send_compression = Some(rdmarpc_grpc::Encoding::Gzip);
        }
    }
}

/// Opens one connection to `endpoint`.
///
/// # Returns
/// The connection and the transport it actually uses, for the report (`"tcp"`; with
/// `auto://`, whichever of `"rdma"` and `"tcp"` the handshake settled on).
///
/// # Errors
/// A transport this build does not have, a connect error, or the connect timeout.
pub async fn connect(
    endpoint: &Endpoint,
    settings: &ConnectSettings,
) -> anyhow::Result<(RpcConnection, String)> {
    // RDMA tunables may come from RPC_RDMA_* environment variables (see
    // rdmarpc_transport::FileConfig::from_env); the message limit is rpc-load's own.
    let mut transport = TransportSettings::default();
    rdmarpc_transport::FileConfig::from_env().and_then(|env| env.apply(&mut transport))?;
    settings.apply(&mut transport);
    let conn = tokio::time::timeout(
        settings.connect_timeout,
        rdmarpc_transport::connect(endpoint, &transport),
    )
    .await
    .with_context(|| format!("connecting to {endpoint} timed out"))?
    .with_context(|| format!("cannot connect to {endpoint}"))?;
    let used = conn.transport().scheme().to_owned();
    Ok((conn, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flag replaces its own setting of the environment's, and only that one.
    #[test]
    fn tls_flags_layer_over_the_environments_settings() {
        let mut env = TlsConfig::default();
        env.ca("env-ca.pem").identity("env.pem", "env.key");
        let mut tls = env.clone();
        let cname = TlsFlags {
            server_name: Some("localhost".into()),
            ..TlsFlags::default()
        };
        cname.apply(&mut tls);
        assert_eq!(tls.ca, Some(PathBuf::from("env-ca.pem")));
        assert_eq!(tls.cert, Some(PathBuf::from("env.pem")));
        assert_eq!(tls.server_name.as_deref(), Some("localhost"));
        assert!(!tls.skip_verify);
        let ca = TlsFlags {
            ca: Some("flag-ca.pem".into()),
            ..TlsFlags::default()
        };
        ca.apply(&mut tls);
        assert_eq!(tls.ca, Some(PathBuf::from("flag-ca.pem")));
        assert_eq!(tls.key, Some(PathBuf::from("env.key")));
        // No flag: the environment's settings as they were.
        let mut untouched = env.clone();
        TlsFlags::default().apply(&mut untouched);
        assert_eq!(untouched, env);
    }
}
