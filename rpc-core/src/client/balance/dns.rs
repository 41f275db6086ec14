//! DNS targets of balanced channels: `dns:///name:port` (A/AAAA) and
//! `dns:///_service._proto.name` (SRV, as Kubernetes publishes a headless service's named
//! ports), optionally with the DNS server to ask as authority (`dns://10.0.0.10:53/...`),
//! as gRPC names them.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

use crate::{Endpoint, ParseEndpointError, Status};

/// The most SRV targets looked up per resolution.
const MAX_SRV_TARGETS: usize = 1024;

/// A parsed `dns:` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DnsTarget {
    /// The DNS server to ask; the system's (`/etc/resolv.conf`) when `None`.
    server: Option<SocketAddr>,
    host: String,
    /// `None` for an SRV name (the records give the ports).
    port: Option<u16>,
}

impl DnsTarget {
    /// Parses `dns:///host:port`, `dns://server[:port]/host:port`, `dns:host:port`, or the
    /// same with an SRV name (`_grpc._tcp.backend.ns.svc.cluster.local`) and no port.
    pub(crate) fn parse(target: &str) -> Result<DnsTarget, ParseEndpointError> {
        let bad = || ParseEndpointError::BadDnsTarget(target.to_owned());
        let rest = target.strip_prefix("dns:").ok_or_else(bad)?;
        let (server, name) = match rest.strip_prefix("//") {
            Some(rest) => {
                let (authority, name) = rest.split_once('/').ok_or_else(bad)?;
                let server = if authority.is_empty() {
                    None
                } else if let Ok(addr) = authority.parse::<SocketAddr>() {
                    Some(addr)
                } else {
                    let ip: IpAddr = authority
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse()
                        .map_err(|_| bad())?;
                    Some(SocketAddr::new(ip, 53))
                };
                (server, name)
            }
            None => (None, rest),
        };
        let name = name.trim_end_matches('/');
        let (host, port) = match name.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') => {
                (host, Some(port.parse::<u16>().map_err(|_| bad())?))
            }
            _ => (name, None),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || (port.is_none() && !host.starts_with('_')) {
            return Err(bad());
        }
        Ok(DnsTarget {
            server,
            host: host.to_owned(),
            port,
        })
    }

    pub(crate) fn resolver(&self) -> Result<TokioResolver, Status> {
        let mut builder = match self.server {
            Some(server) => {
                let mut udp = ConnectionConfig::udp();
                udp.port = server.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = server.port();
                let mut config = ResolverConfig::default();
                config.add_name_server(NameServerConfig::new(server.ip(), true, vec![udp, tcp]));
                TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            }
            None => TokioResolver::builder_tokio().map_err(|e| {
                Status::unavailable(format!("reading the system's DNS configuration: {e}"))
            })?,
        };
        // Every refresh asks the server: records that change are seen at once.
        builder.options_mut().cache_size = 0;
        builder
            .build()
            .map_err(|e| Status::unavailable(format!("making a DNS resolver: {e}")))
    }

    /// The endpoints the name has now, each as `scheme://address:port`: at most `max`,
    /// the subset of `seed` (see `balance::subset`), cut before they become endpoints.
    pub(crate) async fn resolve(
        &self,
        resolver: &TokioResolver,
        scheme: &str,
        max: usize,
        seed: u64,
    ) -> Result<Vec<Endpoint>, Status> {
        let failed = |e: &dyn fmt::Display| Status::unavailable(format!("resolving {self}: {e}"));
        let mut addresses = Vec::new();
        match self.port {
            Some(port) => {
                let ips = resolver
                    .lookup_ip(self.host.as_str())
                    .await
                    .map_err(|e| failed(&e))?;
                addresses.extend(ips.iter().map(|ip| SocketAddr::new(ip, port)));
            }
            None => {
                let records = resolver
                    .srv_lookup(self.host.as_str())
                    .await
                    .map_err(|e| failed(&e))?;
                let srvs = records
                    .answers()
                    .iter()
                    .filter_map(|record| match &record.data {
                        hickory_resolver::proto::rr::RData::SRV(srv) => Some(srv.clone()),
                        _ => None,
                    });
                // Each target is looked up at once (a bounded number of them); one that
                // does not resolve is left out, not the others with it.
                let lookups = srvs.take(MAX_SRV_TARGETS).map(|srv| async move {
                    let target = srv.target.to_utf8();
                    let ips = resolver.lookup_ip(target.as_str()).await;
                    (target, srv.port, ips)
                });
                let mut errors = Vec::new();
                let mut targets = 0;
                for (target, port, ips) in futures_util::future::join_all(lookups).await {
                    targets += 1;
                    match ips {
                        Ok(ips) => addresses.extend(ips.iter().map(|ip| SocketAddr::new(ip, port))),
                        Err(e) => {
                            tracing::warn!("SRV target {target} of {self} does not resolve: {e}");
                            errors.push(format!("{target}: {e}"));
                        }
                    }
                }
                if targets > 0 && errors.len() == targets {
                    return Err(failed(&errors.join("; ")));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        addresses.retain(|addr| seen.insert(*addr));
        super::subset(&mut addresses, seed, max);
        addresses
            .into_iter()
            .map(|addr| {
                format!("{scheme}://{addr}")
                    .parse::<Endpoint>()
                    .map_err(|e| Status::invalid_argument(e.to_string()))
            })
            .collect()
    }
}

impl fmt::Display for DnsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = self.server.map(|s| s.to_string()).unwrap_or_default();
        match self.port {
            Some(port) => write!(f, "dns://{server}/{}:{port}", self.host),
            None => write!(f, "dns://{server}/{}", self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_as_grpc_names_them() {
        let t = DnsTarget::parse("dns:///backend.default.svc:50051").unwrap();
        assert_eq!(
            (t.server, t.host.as_str(), t.port),
            (None, "backend.default.svc", Some(50051))
        );
        let t = DnsTarget::parse("dns://127.0.0.1:5353/svc.test:7000").unwrap();
        assert_eq!(t.server, Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(t.to_string(), "dns://127.0.0.1:5353/svc.test:7000");
        let t = DnsTarget::parse("dns://10.0.0.10/svc.test:7000").unwrap();
        assert_eq!(t.server, Some("10.0.0.10:53".parse().unwrap()));
        let t = DnsTarget::parse("dns:svc.test:7000").unwrap();
        assert_eq!((t.server, t.port), (None, Some(7000)));
        let t = DnsTarget::parse("dns:///_grpc._tcp.backend.default.svc.cluster.local").unwrap();
        assert_eq!(t.port, None);
        for bad in [
            "dns:///backend",
            "dns:///backend:http",
            "dns://not-an-ip/backend:1",
            "dns:///",
            "dns://",
            "tcp:///x:1",
        ] {
            assert!(
                matches!(
                    DnsTarget::parse(bad),
                    Err(ParseEndpointError::BadDnsTarget(_))
                ),
                "{bad}"
            );
        }
    }
}
