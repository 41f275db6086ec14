//! [`RetryPolicy`]: which failed calls a channel sends again, and when.

use std::time::Duration;

/// Which failed unary calls a channel sends again ([`ClientConfig::retry`](crate::ClientConfig::retry)), as gRPC's
/// retry policy: a call whose status is in [`RetryPolicy::codes`], of a method the policy
/// names, is sent again after a back-off with jitter, within its deadline, until
/// [`RetryPolicy::max_attempts`]. On a balanced channel the next attempt goes to a usable
/// endpoint, so a server that dies under load fails none of these calls. Streaming calls
/// are never retried.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included; at most 5 are made (as gRPC). Default 3.
    pub max_attempts: u32,
    /// The back-off before the first retry; it doubles for each further one, up to
    /// [`RetryPolicy::max_backoff`], with jitter. Default 10 ms.
    pub initial_backoff: Duration,
    /// The longest back-off. Default 1 s.
    pub max_backoff: Duration,
    /// The statuses that are retried. Default `[UNAVAILABLE]`.
    pub codes: Vec<crate::Code>,
    /// The methods that are retried, each `/package.Service/Method`, `package.Service`
    /// (all its methods) or `*`, besides those the proto marks idempotent (see
    /// [`RetryPolicy::idempotent`]). Default empty.
    pub methods: Vec<String>,
    /// Also retry every method whose `.proto` declares `option idempotency_level =
    /// IDEMPOTENT` (or `NO_SIDE_EFFECTS`). Default true.
    pub idempotent: bool,
    /// Retry throttling, as gRPC's `retryThrottling`: the channel holds this many tokens;
    /// each failed call the policy covers takes one, each success gives a tenth back, and
    /// calls are retried only while more than half are left. An outage then costs about
    /// one retry per success instead of `max_attempts` times the load. 0 turns
    /// throttling off. Default 100.
    pub max_tokens: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            codes: vec![crate::Code::Unavailable],
            methods: Vec::new(),
            idempotent: true,
            max_tokens: 100,
        }
    }
}

impl RetryPolicy {
    /// Sets [`RetryPolicy::methods`].
    ///
    /// ```
    /// let mut config = rdmarpc_core::ClientConfig::default();
    /// let mut policy = rdmarpc_core::RetryPolicy::default();
    /// policy.methods(["/kv.Kv/Get", "health.v1.Health"]);
    /// config.retry = Some(policy);
    /// ```
    pub fn methods<S: Into<String>>(&mut self, methods: impl IntoIterator<Item = S>) -> &mut Self {
        self.methods = methods.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`RetryPolicy::max_attempts`].
    pub fn max_attempts(&mut self, attempts: u32) -> &mut Self {
        self.max_attempts = attempts;
        self
    }

    /// Whether a call of `method` that ended with `code` may be sent again.
    pub fn retries(&self, method: &crate::codegen::MethodDescriptor, code: crate::Code) -> bool {
        if !self.codes.contains(&code) {
            return false;
        }
        if self.idempotent && method.idempotent {
            return true;
        }
        let service = method
            .path
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .map_or("", |(service, _)| service);
        self.methods
            .iter()
            .any(|m| m == "*" || m == method.path || m == service)
    }

    /// The back-off before retry number `retry` (1 for the first), before jitter.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let factor = 2f64.powi(retry.saturating_sub(1).min(30) as i32);
        self.initial_backoff.mul_f64(factor).min(self.max_backoff)
    }
}
