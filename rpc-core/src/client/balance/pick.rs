//! The pick of an endpoint per call: power of two choices on calls in flight, round
//! robin, or the first in order, among the usable endpoints.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::endpoint::{EndpointState, Health, Phase};
use super::{Balancer, Resolution, Sub};
use crate::client::connection::Shared;
use crate::transport::Connection;
use crate::{LbStrategy, Status};

/// Two different indices below `n` (at least 2) from the random `r`.
pub(super) fn distinct_pair(r: u64, n: usize) -> (usize, usize) {
    let i = (r % n as u64) as usize;
    let j = ((r >> 32) % (n as u64 - 1)) as usize;
    (i, if j >= i { j + 1 } else { j })
}

/// What one pick found.
pub(super) enum Pick<C: Connection> {
    Ready(Arc<Shared<C>>),
    /// Nothing usable yet, but something is under way (a dial, a first health answer,
    /// the first resolution).
    Wait,
    Fail(Status),
}

/// Why an endpoint that no pick could use is not usable now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unusable {
    /// Something is under way that is worth waiting for: a first dial, a first health
    /// answer, or a new connection after the last one ended or began draining.
    Wait,
    /// Connected, its health watch says (or has not said within the connect timeout)
    /// it does not serve.
    NotServing,
    /// Dials fail (as gRPC's TRANSIENT_FAILURE): fail-fast calls do not wait for it.
    Failing,
}

/// Why the endpoint of `state` is not usable (no pick took it): `failed` says its last
/// dial or connection failed.
fn unusable(state: &EndpointState, failed: bool, connect_timeout: Duration) -> Unusable {
    match state.phase.load() {
        // A first dial: worth waiting for. A dial after failures is not (the endpoint is
        // failing until it connects).
        Phase::Connecting if !failed => Unusable::Wait,
        Phase::Ready => match state.health.load() {
            Health::Unknown => {
                let since = *state.health_since.lock();
                if since.is_none_or(|t| t.elapsed() < connect_timeout) {
                    Unusable::Wait
                } else {
                    Unusable::NotServing
                }
            }
            Health::NotServing => Unusable::NotServing,
            // Ready and serving, yet no pick took it: its connection just ended or
            // drains, and its connector is about to dial again (it says Connecting,
            // then Ready or Failed). Failing calls meanwhile said "no endpoint usable"
            // with no reason, under load, as a channel connected.
            Health::Serving if !failed => Unusable::Wait,
            Health::Serving => Unusable::Failing,
        },
        Phase::Connecting | Phase::Failed => Unusable::Failing,
    }
}

impl<C: Connection> Balancer<C> {
    pub(super) fn random(&self) -> u64 {
        // SplitMix64 over a shared counter: cheap, and different for concurrent picks.
        let mut z = self
            .next
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn try_pick(&self, avoid: Option<&Shared<C>>) -> Pick<C> {
        let subs = self.endpoints.read().clone();
        let n = subs.len();
        let now = Instant::now();
        let mut ejected = None;
        if n > 0 {
            // The others first, when one is to be avoided; then all.
            let others: Option<Vec<Arc<Sub<C>>>> = avoid.filter(|_| n > 1).map(|avoid| {
                subs.iter()
                    .filter(|sub| !sub.holds(avoid))
                    .cloned()
                    .collect()
            });
            let picked = others
                .filter(|others| !others.is_empty())
                .and_then(|others| self.choose(&others, now, &mut ejected))
                .or_else(|| self.choose(&subs, now, &mut ejected));
            if let Some(shared) = picked {
                return Pick::Ready(shared);
            }
        }
        // Only ejected endpoints are usable: they are used rather than none.
        if let Some((shared, _)) = ejected {
            return Pick::Ready(shared);
        }
        match &*self.resolution.lock() {
            Resolution::Pending(since) if since.elapsed() < self.config.connect_timeout => {
                return Pick::Wait
            }
            Resolution::Pending(_) => {
                return Pick::Fail(Status::unavailable(format!(
                    "no endpoints found within {:?}",
                    self.config.connect_timeout
                )))
            }
            Resolution::Failed(status) if n == 0 => return Pick::Fail(status.clone()),
            _ => {}
        }
        if n == 0 {
            return Pick::Fail(Status::unavailable("no endpoints (discovery found none)"));
        }
        let mut not_serving = 0;
        let mut error = None;
        for sub in subs.iter() {
            let state = &sub.state;
            let last_error = state.last_error.lock().clone();
            match unusable(state, last_error.is_some(), self.config.connect_timeout) {
                Unusable::Wait => return Pick::Wait,
                Unusable::NotServing => not_serving += 1,
                Unusable::Failing => {}
            }
            if error.is_none() {
                error = last_error;
            }
        }
        Pick::Fail(match error {
            Some(error) => Status::unavailable(format!(
                "no endpoint of {n} is usable ({not_serving} not serving); last error: {}",
                error.message()
            )),
            None => Status::unavailable(format!(
                "no endpoint of {n} is usable ({not_serving} not serving)"
            )),
        })
    }

    /// A usable endpoint of `subs` by the configured strategy.
    pub(super) fn choose(
        &self,
        subs: &[Arc<Sub<C>>],
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<Arc<Shared<C>>> {
        match self.config.balance.strategy {
            LbStrategy::PowerOfTwoChoices => self.two_choices(subs, now, ejected),
            LbStrategy::RoundRobin => self.round_robin(subs, now, ejected),
            LbStrategy::PickFirst => subs
                .iter()
                .find_map(|sub| sub.usable(now, ejected).map(|(shared, _)| shared)),
        }
    }

    /// Power of two choices: two endpoints drawn at random, the one with fewer calls in
    /// flight; when either is not usable, two drawn among the usable ones.
    pub(super) fn two_choices(
        &self,
        subs: &[Arc<Sub<C>>],
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<Arc<Shared<C>>> {
        let n = subs.len();
        if n == 1 {
            return subs[0].usable(now, ejected).map(|(shared, _)| shared);
        }
        let r = self.random();
        let (i, j) = distinct_pair(r, n);
        let a = subs[i].usable(now, ejected);
        let b = subs[j].usable(now, ejected);
        if let (Some(a), Some(b)) = (&a, &b) {
            return Some(if b.1 < a.1 { b.0.clone() } else { a.0.clone() });
        }
        // Some are not usable: choose among those that are, so that none is favoured
        // for being next to one that is down.
        let mut usable: Vec<(Arc<Shared<C>>, usize)> = subs
            .iter()
            .filter_map(|sub| sub.usable(now, ejected))
            .collect();
        match usable.len() {
            0 => None,
            1 => usable.pop().map(|(shared, _)| shared),
            m => {
                let (i, j) = distinct_pair(r.rotate_left(17), m);
                let (a, b) = (&usable[i], &usable[j]);
                Some(if b.1 < a.1 { b.0.clone() } else { a.0.clone() })
            }
        }
    }

    /// Each usable endpoint in turn.
    pub(super) fn round_robin(
        &self,
        subs: &[Arc<Sub<C>>],
        now: Instant,
        ejected: &mut Option<(Arc<Shared<C>>, usize)>,
    ) -> Option<Arc<Shared<C>>> {
        let mut usable: Vec<Arc<Shared<C>>> = subs
            .iter()
            .filter_map(|sub| sub.usable(now, ejected).map(|(shared, _)| shared))
            .collect();
        if usable.is_empty() {
            return None;
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) as usize % usable.len();
        Some(usable.swap_remove(turn))
    }
}

pub(super) fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(phase: Phase, health: Health) -> EndpointState {
        EndpointState::for_test(phase, health, Arc::default())
    }

    /// An endpoint between two connections (ready and serving, but its connection
    /// ended or drains and its connector has not dialled yet) is waited for, not failed:
    /// calls failed so with "no endpoint of 2 is usable (0 not serving)" and no reason.
    #[test]
    fn an_endpoint_between_connections_is_waited_for() {
        let timeout = Duration::from_secs(1);
        let between = state(Phase::Ready, Health::Serving);
        assert_eq!(unusable(&between, false, timeout), Unusable::Wait);
        // After a connection that ended at once, or failed dials: failing.
        assert_eq!(unusable(&between, true, timeout), Unusable::Failing);
        let failed = state(Phase::Failed, Health::Serving);
        assert_eq!(unusable(&failed, true, timeout), Unusable::Failing);
        let first_dial = state(Phase::Connecting, Health::Serving);
        assert_eq!(unusable(&first_dial, false, timeout), Unusable::Wait);
        assert_eq!(unusable(&first_dial, true, timeout), Unusable::Failing);
    }

    /// Health decides for a connected endpoint: not serving counts as such; unknown is
    /// waited for within the connect timeout only.
    #[test]
    fn a_connected_endpoint_is_judged_by_its_health() {
        let timeout = Duration::from_secs(1);
        let not_serving = state(Phase::Ready, Health::NotServing);
        assert_eq!(unusable(&not_serving, false, timeout), Unusable::NotServing);
        let unknown = state(Phase::Ready, Health::Unknown);
        assert_eq!(unusable(&unknown, false, timeout), Unusable::Wait);
        *unknown.health_since.lock() = Some(Instant::now() - 2 * timeout);
        assert_eq!(unusable(&unknown, false, timeout), Unusable::NotServing);
    }
}
