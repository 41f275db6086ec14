//! What a channel connects to: one endpoint, a list (`tcp://h1:p1,h2:p2`), or a DNS name
//! (`dns:///name:port`).

use super::balance::dns::DnsTarget;
use crate::{Endpoint, ParseEndpointError};

/// A parsed target.
pub(super) enum Target {
    One(Endpoint),
    List(Vec<Endpoint>),
    Dns(DnsTarget),
}

impl Target {
    pub(super) fn parse(target: &str) -> Result<Target, ParseEndpointError> {
        if target.starts_with("dns:") {
            return DnsTarget::parse(target).map(Target::Dns);
        }
        let Some((scheme, addresses)) = target.split_once("://") else {
            return Err(ParseEndpointError::NotAUrl(target.to_owned()));
        };
        if !addresses.contains(',') {
            return target.parse().map(Target::One);
        }
        addresses
            .split(',')
            .map(|address| format!("{scheme}://{}", address.trim()).parse())
            .collect::<Result<Vec<Endpoint>, _>>()
            .map(Target::List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_single_endpoints() {
        let Ok(Target::List(list)) = Target::parse("tcp://127.0.0.1:1, 127.0.0.1:2,h:3") else {
            panic!("a list");
        };
        let urls: Vec<String> = list.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            urls,
            ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://h:3"]
        );
        assert!(matches!(Target::parse("auto+tls://h:1"), Ok(Target::One(e)) if e.tls));
        assert!(matches!(Target::parse("dns:///h:1"), Ok(Target::Dns(_))));
        assert!(matches!(
            Target::parse("tcp://h:1,h"),
            Err(ParseEndpointError::BadAddress(_))
        ));
        assert!(matches!(
            Target::parse("h:1,h:2"),
            Err(ParseEndpointError::NotAUrl(_))
        ));
    }
}
