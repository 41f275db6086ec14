//! Where the endpoints come from: a stream the application supplies, or DNS resolved
//! again and again; and the subset of a large set a channel keeps.

use std::pin::Pin;
use std::sync::Weak;
use std::time::Duration;

use futures_util::{Stream, StreamExt};

use super::Balancer;
use crate::client::balance::dns::DnsTarget;
use crate::client::dial::{jitter, next_backoff, REDIAL_BACKOFF};
use crate::transport::Connection;
use crate::{Endpoint, Status};

/// The shortest interval between two resolutions of a DNS target.
pub(super) const MIN_DNS_REFRESH: Duration = Duration::from_millis(100);

pub(super) async fn follow_stream<C: Connection>(
    balancer: Weak<Balancer<C>>,
    mut stream: Pin<Box<dyn Stream<Item = Vec<Endpoint>> + Send>>,
) {
    while let Some(endpoints) = stream.next().await {
        let Some(balancer) = balancer.upgrade() else {
            return;
        };
        balancer.update(endpoints);
    }
    if let Some(balancer) = balancer.upgrade() {
        balancer.failed(Status::unavailable(
            "the stream of endpoints ended before it gave any",
        ));
    }
}

/// Cuts `items` to at most `max` (at least 1): a subset that stays the same across
/// updates of one channel (its `seed`) and differs between channels, so that many
/// clients cover every server.
pub(in crate::client) fn subset<T: std::hash::Hash>(items: &mut Vec<T>, seed: u64, max: usize) {
    let max = max.max(1);
    if items.len() <= max {
        return;
    }
    items.sort_by_cached_key(|item| {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (seed, item).hash(&mut hasher);
        hasher.finish()
    });
    tracing::warn!(
        found = items.len(),
        max,
        "more endpoints than max_endpoints: using a subset"
    );
    items.truncate(max);
}

pub(super) async fn follow_dns<C: Connection>(
    balancer: Weak<Balancer<C>>,
    target: DnsTarget,
    scheme: String,
    refresh: Duration,
) {
    let resolver = match target.resolver() {
        Ok(resolver) => resolver,
        Err(status) => {
            if let Some(balancer) = balancer.upgrade() {
                balancer.failed(status);
            }
            return;
        }
    };
    let refresh = refresh.max(MIN_DNS_REFRESH);
    let mut backoff: Option<Duration> = None;
    // Answers are cut to the channel's subset before they become endpoints.
    let Some((max, seed)) = balancer
        .upgrade()
        .map(|b| (b.config.balance.max_endpoints, b.subset_seed))
    else {
        return;
    };
    loop {
        let resolved = target.resolve(&resolver, &scheme, max, seed).await;
        let Some(strong) = balancer.upgrade() else {
            return;
        };
        let wait = match resolved {
            Ok(endpoints) => {
                strong.update(endpoints);
                backoff = None;
                refresh
            }
            Err(status) => {
                tracing::warn!("resolving {target} failed: {}", status.message());
                strong.failed(status);
                // Tried again soon (a failed first resolution fails every call).
                let wait = backoff.map_or(REDIAL_BACKOFF, next_backoff);
                backoff = Some(wait);
                jitter(wait).min(refresh)
            }
        };
        drop(strong);
        tokio::time::sleep(wait).await;
    }
}
