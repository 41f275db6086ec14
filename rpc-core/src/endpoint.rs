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
    /// `grpc://` (`grpcs://` under TLS): gRPC over HTTP/2, to any gRPC server; on a
    /// server, the connection of a standard gRPC client.
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
            "grpc" => Ok(TransportKind::Grpc),
            other => Err(format!(
                "unknown transport {other:?} (expected tcp, rdma or auto, each optionally with +tls, or grpc, grpcs)"
            )),
        }
    }
}

/// A transport and a `host:port`, written as `tcp://host:port`, `rdma://host:port` or
/// `auto://host:port`; `+tls` after the transport (`tcp+tls://`, `rdma+tls://`,
/// `auto+tls://`) runs the connection, or RDMA's side channel, under TLS. `grpc://` and
/// `grpcs://` (TLS) name gRPC servers, reached over HTTP/2.
///
/// ```
/// let ep: rpc_core::Endpoint = "rdma://10.77.0.2:7000".parse().unwrap();
/// assert_eq!(ep.kind, rpc_core::TransportKind::Rdma);
/// assert_eq!(ep.address, "10.77.0.2:7000");
/// assert!(!ep.tls);
/// let ep: rpc_core::Endpoint = "tcp+tls://example.com:443".parse().unwrap();
/// assert!(ep.tls);
/// assert_eq!(ep.to_string(), "tcp+tls://example.com:443");
/// let ep: rpc_core::Endpoint = "grpcs://example.com:443".parse().unwrap();
/// assert_eq!((ep.kind, ep.tls), (rpc_core::TransportKind::Grpc, true));
/// assert_eq!(ep.to_string(), "grpcs://example.com:443");
/// assert!("http://x:1".parse::<rpc_core::Endpoint>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The transport.
    pub kind: TransportKind,
    /// `host:port`.
    pub address: String,
    /// Whether the connection (RDMA: its side channel) runs under TLS.
    pub tls: bool,
}

impl Endpoint {
    /// The URL scheme: the transport's, with `+tls` under TLS.
    pub fn scheme(&self) -> String {
        if self.tls && self.kind == TransportKind::Grpc {
            "grpcs".to_owned()
        } else if self.tls {
            format!("{}+tls", self.kind.scheme())
        } else {
            self.kind.scheme().to_owned()
        }
    }
}

impl FromStr for Endpoint {
    type Err = String;
    fn from_str(url: &str) -> Result<Self, String> {
        let (scheme, address) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?} is not a URL like tcp://HOST:PORT"))?;
        let (scheme, tls) = match scheme.strip_suffix("+tls") {
            Some("grpc") => return Err(format!("{url:?}: gRPC under TLS is grpcs://")),
            Some(transport) => (transport, true),
            None if scheme == "grpcs" => ("grpc", true),
            None => (scheme, false),
        };
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
            tls,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme(), self.address)
    }
}
