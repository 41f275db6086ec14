//! Dialling: a dial as a future, bounded by the connect timeout, and the back-off between
//! failed dials (a channel's redial and a balanced endpoint's connector share them).

use std::future::Future;
use std::pin::Pin;

use crate::transport::TransportError;

/// A future that dials a new connection.
pub(in crate::client) type Dialing<C> =
    Pin<Box<dyn Future<Output = Result<C, TransportError>> + Send>>;

/// The back-off after a first failed dial; it grows 1.6 times per further failure, up to
/// [`MAX_REDIAL_BACKOFF`], with ±20 % jitter (gRPC's connection back-off, scaled down).
pub const REDIAL_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest back-off between dials.
pub const MAX_REDIAL_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

pub(in crate::client) fn next_backoff(previous: std::time::Duration) -> std::time::Duration {
    previous.mul_f64(1.6).min(MAX_REDIAL_BACKOFF)
}

/// `backoff` ±20 %, so that many clients of one restarted server do not dial in step.
pub(in crate::client) fn jitter(backoff: std::time::Duration) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(backoff.as_nanos() as u64);
    let unit = (hasher.finish() % 1000) as f64 / 1000.0; // [0, 1)
    backoff.mul_f64(0.8 + 0.4 * unit)
}

/// `dial`, failed when it takes longer than `timeout` (a channel's connect timeout).
pub(in crate::client) async fn dial_within<C>(
    timeout: std::time::Duration,
    dial: impl Future<Output = Result<C, TransportError>>,
) -> Result<C, TransportError> {
    tokio::time::timeout(timeout, dial)
        .await
        .unwrap_or_else(|_| {
            Err(TransportError::Other(format!(
                "not connected within {timeout:?}"
            )))
        })
}
