//! gRPC's retry policy for unary calls: the loop that sends a call again, and the
//! throttle that stops retries while calls fail too often.

use std::sync::atomic::Ordering;

use std::time::Instant;

use super::unary::{is_refused, response_code, Outgoing, SplitFn};
use super::{check_request, Channel};
use crate::client::dial::jitter;
use crate::payload::Inbound;
use crate::service::MethodDescriptor;
use crate::transport::Connection;
use crate::{ClientConfig, Code, Request, Status};

/// The most attempts a retry policy makes, whatever it asks (as gRPC).
pub(super) const MAX_ATTEMPTS: u32 = 5;

/// gRPC's retry throttling ([`RetryPolicy::max_tokens`](crate::RetryPolicy::max_tokens)):
/// one token taken by each failed call the policy covers, a tenth given back by each
/// success; retries are made only while more than half are left.
pub(super) struct RetryThrottle {
    /// Thousandths of a token.
    tokens: std::sync::atomic::AtomicU64,
    /// The most, in thousandths; 0 when throttling is off.
    max: u64,
}

impl RetryThrottle {
    pub(super) fn new(config: &ClientConfig) -> RetryThrottle {
        let max = config
            .retry
            .as_ref()
            .map_or(0, |p| u64::from(p.max_tokens) * 1000);
        RetryThrottle {
            tokens: std::sync::atomic::AtomicU64::new(max),
            max,
        }
    }

    pub(super) fn success(&self) {
        let max = self.max;
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < max).then(|| (t + 100).min(max))
            });
    }

    /// A failed call: whether it may be retried.
    pub(super) fn failure(&self) -> bool {
        if self.max == 0 {
            return true;
        }
        let before = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(1000))
            })
            .unwrap_or(0);
        before.saturating_sub(1000) > self.max / 2
    }
}

impl<C: Connection> Channel<C> {
    /// Sends the request and waits for its response frame.
    pub(super) async fn exchange<Req: prost::Message>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        split: Option<SplitFn<Req>>,
        span: &tracing::Span,
    ) -> Result<Inbound<C::RecvBuf>, Status> {
        let (metadata, message, timeout) = request.into_parts();
        let config = &self.inner.config;
        let timeout = timeout.or(config.timeout);
        let payload_len = message.encoded_len();
        check_request(config, payload_len, &metadata)?;
        // tokio's clock (the timer's; it differs from the system's when paused in tests),
        // or the process's cheap one (`crate::clock`).
        let deadline = timeout.and_then(|t| crate::clock::tokio_now().checked_add(t));
        let request = Outgoing {
            metadata: &metadata,
            message: &message,
            split,
            method,
            payload_len,
            span,
        };

        let exchange = async {
            let mut retries = 0;
            let mut attempts = 1;
            // The connection of the attempt before: a retry goes elsewhere if it can.
            let mut last = None;
            loop {
                // A retry tells the server the time that is left, not the original timeout
                // (the first attempt, which starts now, the timeout: no clock read).
                let left = match deadline {
                    Some(d) if attempts + retries > 1 => {
                        Some(d.saturating_duration_since(tokio::time::Instant::now()))
                    }
                    _ => timeout,
                };
                let result = self.attempt(&request, left, &mut last).await;
                // A call the server refused without starting it (it was draining) goes
                // once more on a fresh connection, if this channel makes them.
                if let Ok(frame) = &result {
                    if retries < config.max_transparent_retries
                        && self.reconnects()
                        && is_refused(frame.bytes())
                    {
                        retries += 1;
                        tracing::debug!(
                            retries,
                            "call refused by a draining server; sending it again"
                        );
                        continue;
                    }
                }
                let code = match &result {
                    Ok(frame) => response_code(frame.bytes()),
                    Err(status) => status.code(),
                };
                let std_deadline = deadline.map(tokio::time::Instant::into_std);
                if let Some(backoff) = self.policy_retry(method, code, attempts, std_deadline) {
                    tracing::debug!(attempts, ?code, "retrying the call (retry policy)");
                    tokio::time::sleep(backoff).await;
                    attempts += 1;
                    continue;
                }
                return result;
            }
        };
        match timeout {
            Some(t) => match within(t, deadline, exchange).await {
                Ok(result) => result,
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "deadline of {t:?} exceeded"
                ))),
            },
            None => exchange.await,
        }
    }

    /// Whether attempt number `attempts`, which ended with `code`, goes again: the
    /// back-off to wait first when the retry policy covers the code, failures are not so
    /// frequent that retries are throttled, and the back-off ends before the deadline.
    /// The retry goes to a usable connection (another endpoint, on a balanced channel).
    fn policy_retry(
        &self,
        method: &MethodDescriptor,
        code: Code,
        attempts: u32,
        deadline: Option<Instant>,
    ) -> Option<std::time::Duration> {
        let policy = self.inner.config.retry.as_ref()?;
        if code == Code::Ok {
            self.inner.throttle.success();
            return None;
        }
        if !policy.retries(method, code) {
            return None;
        }
        let allowed = self.inner.throttle.failure();
        let backoff = jitter(policy.backoff(attempts));
        let in_time = deadline.is_none_or(|d| Instant::now() + backoff < d);
        (allowed && in_time && attempts < policy.max_attempts.min(MAX_ATTEMPTS)).then_some(backoff)
    }
}

/// `call` within `timeout`, whose `deadline` (now + timeout) the caller has read already:
/// the timer takes the deadline, so the clock is read once per call, not twice.
pub(super) async fn within<T>(
    timeout: std::time::Duration,
    deadline: Option<tokio::time::Instant>,
    call: impl std::future::Future<Output = T>,
) -> Result<T, tokio::time::error::Elapsed> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, call).await,
        None => tokio::time::timeout(timeout, call).await,
    }
}
