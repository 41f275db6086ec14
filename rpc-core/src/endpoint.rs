//! [`Endpoint`]: where to connect or listen, and over which transport, as a URL.

use std::fmt;
use std::str::FromStr;

/// Which transport an endpoint asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// `tcp://`: TCP.
    Tcp,
    /// `rdma://`: RDMA; an error where no RDMA device exists.
    Rdma,
    /// `auto://`: RDMA where both ends have a device, otherwise TCP.
    Auto,
    /// gRPC over HTTP/2 (a server's connection from a standard gRPC client).
    Grpc,
}

impl TransportKind {
    /// The URL scheme.
    pub fn scheme(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
            TransportKind::Auto => "auto",
            TransportKind::Grpc => "grpc",
        }
    }
}

impl FromStr for TransportKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tcp" => Ok(TransportKind::Tcp),
            "rdma" => Ok(TransportKind::Rdma),
            "auto" => Ok(TransportKind::Auto),
            other => Err(format!(
                "unknown transport {other:?} (expected tcp, rdma or auto)"
            )),
        }
    }
}

/// A transport and a `host:port`, written as `tcp://host:port`, `rdma://host:port` or
/// `auto://host:port`.
///
/// ```
/// let ep: rpc_core::Endpoint = "rdma://10.77.0.2:7000".parse().unwrap();
/// assert_eq!(ep.kind, rpc_core::TransportKind::Rdma);
/// assert_eq!(ep.address, "10.77.0.2:7000");
/// assert!("http://x:1".parse::<rpc_core::Endpoint>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The transport.
    pub kind: TransportKind,
    /// `host:port`.
    pub address: String,
}

impl FromStr for Endpoint {
    type Err = String;
    fn from_str(url: &str) -> Result<Self, String> {
        let (scheme, address) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?} is not a URL like tcp://HOST:PORT"))?;
        let kind = scheme.parse()?;
        let address = address.trim_end_matches('/');
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| format!("{url:?} has no port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{url:?} needs HOST:PORT with a numeric port"));
        }
        Ok(Endpoint {
            kind,
            address: address.to_owned(),
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.kind.scheme(), self.address)
    }
}
