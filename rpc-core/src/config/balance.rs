//! [`BalanceConfig`] and [`LbStrategy`]: how a channel over several endpoints picks one.

use std::time::Duration;

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
    /// Every call to the first usable endpoint in the resolver's order (the list's, or
    /// the DNS answer's), the next one only while it is not usable: gRPC's default
    /// policy, `pick_first` (what ghz uses without `--lb-strategy`).
    PickFirst,
}

impl std::str::FromStr for LbStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "p2c" | "power_of_two_choices" | "least_loaded" => Ok(LbStrategy::PowerOfTwoChoices),
            "round_robin" | "rr" => Ok(LbStrategy::RoundRobin),
            "pick_first" => Ok(LbStrategy::PickFirst),
            other => Err(format!(
                "unknown balancing strategy {other:?} (expected p2c, round_robin or pick_first)"
            )),
        }
    }
}

impl std::fmt::Display for LbStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LbStrategy::PowerOfTwoChoices => "p2c",
            LbStrategy::RoundRobin => "round_robin",
            LbStrategy::PickFirst => "pick_first",
        })
    }
}

/// Settings of a channel over several endpoints ([`ClientConfig::balance`](crate::ClientConfig::balance)).
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
