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
    type Err = ParseEndpointError;
    fn from_str(s: &str) -> Result<Self, ParseEndpointError> {
        match s {
            "tcp" => Ok(TransportKind::Tcp),
            "rdma" => Ok(TransportKind::Rdma),
            "auto" => Ok(TransportKind::Auto),
            "grpc" => Ok(TransportKind::Grpc),
            other => Err(ParseEndpointError::UnknownTransport(other.to_owned())),
        }
    }
}

/// Why a string is not an [`Endpoint`] (or a [`TransportKind`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseEndpointError {
    /// No `://`.
    #[error("{0:?} is not a URL like tcp://HOST:PORT")]
    NotAUrl(String),
    /// A scheme that names no transport.
    #[error("unknown transport {0:?} (expected tcp, rdma or auto, each optionally with +tls, or grpc, grpcs)")]
    UnknownTransport(String),
    /// `grpc+tls://`, which is spelled `grpcs://`.
    #[error("{0:?}: gRPC under TLS is grpcs://")]
    GrpcPlusTls(String),
    /// No `:PORT`, an empty host, or a port that is not a number from 0 to 65535.
    #[error("{0:?} needs HOST:PORT with a numeric port")]
    BadAddress(String),
    /// A `dns:` target that is not `dns:///NAME:PORT`, `dns://DNS-SERVER-IP[:PORT]/NAME:PORT`
    /// or an SRV name (`dns:///_SERVICE._PROTO.NAME`).
    #[error("{0:?} is not a DNS target like dns:///NAME:PORT, dns://DNS-SERVER-IP/NAME:PORT or dns:///_SERVICE._tcp.NAME")]
    BadDnsTarget(String),
    /// A list of endpoints (`tcp://h1:p1,h2:p2`) where a single one is expected.
    #[error("{0:?} names several endpoints where one is expected")]
    NotOneEndpoint(String),
}

/// A transport and a `host:port`, written as `tcp://host:port`, `rdma://host:port` or
/// `auto://host:port`; `+tls` after the transport (`tcp+tls://`, `rdma+tls://`,
/// `auto+tls://`) runs the connection, or RDMA's side channel, under TLS. `grpc://` and
/// `grpcs://` (TLS) name gRPC servers, reached over HTTP/2.
///
/// ```
/// let ep: rdmarpc_core::Endpoint = "rdma://10.77.0.2:7000".parse().unwrap();
/// assert_eq!(ep.kind, rdmarpc_core::TransportKind::Rdma);
/// assert_eq!(ep.address, "10.77.0.2:7000");
/// assert!(!ep.tls);
/// let ep: rdmarpc_core::Endpoint = "tcp+tls://example.com:443".parse().unwrap();
/// assert!(ep.tls);
/// assert_eq!(ep.to_string(), "tcp+tls://example.com:443");
/// let ep: rdmarpc_core::Endpoint = "grpcs://example.com:443".parse().unwrap();
/// assert_eq!((ep.kind, ep.tls), (rdmarpc_core::TransportKind::Grpc, true));
/// assert_eq!(ep.to_string(), "grpcs://example.com:443");
/// let err = "http://x:1".parse::<rdmarpc_core::Endpoint>().unwrap_err();
/// assert!(matches!(err, rdmarpc_core::ParseEndpointError::UnknownTransport(_)));
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
    type Err = ParseEndpointError;
    fn from_str(url: &str) -> Result<Self, ParseEndpointError> {
        let (scheme, address) = url
            .split_once("://")
            .ok_or_else(|| ParseEndpointError::NotAUrl(url.to_owned()))?;
        let (scheme, tls) = match scheme.strip_suffix("+tls") {
            Some("grpc") => return Err(ParseEndpointError::GrpcPlusTls(url.to_owned())),
            Some(transport) => (transport, true),
            None if scheme == "grpcs" => ("grpc", true),
            None => (scheme, false),
        };
        let kind = scheme.parse()?;
        let address = address.trim_end_matches('/');
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| ParseEndpointError::BadAddress(url.to_owned()))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(ParseEndpointError::BadAddress(url.to_owned()));
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
