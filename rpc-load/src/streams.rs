//! Streaming calls as ghz makes them: what a call sends on a request stream
//! (`--stream-interval`, `--stream-call-count`, `--stream-call-duration`) and when it stops
//! reading a response stream.
//!
//! A client or bidirectional streaming call sends the request messages in order (`-d`'s
//! array), each `--stream-interval` after the previous one, and half-closes after the
//! last; with `--stream-call-count N` it sends N (the array cycled or cut), with
//! `--stream-call-duration D` it sends until D has passed. A server-streaming call reads
//! until the server ends the stream; with a count or a duration it stops after N
//! messages or D and cancels the call, which then counts as `CANCELLED` (as in ghz).
//!
//! With `--stream-ping-pong` (rpc-load's) a bidirectional call sends each request message
//! only once a response arrived for every one sent before it: one message each way per
//! round trip, so that the messages received count the round trips.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use prost_reflect::DynamicMessage;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::data::Messages;
use crate::template::CallFacts;

/// The stream flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// Time between two sends on a request stream.
    pub interval: Option<Duration>,
    /// How long a call sends (client, bidirectional) or reads (server streaming).
    pub call_duration: Option<Duration>,
    /// How many messages a call sends (client, bidirectional) or reads (server
    /// streaming).
    pub call_count: Option<u64>,
    /// A request message waits for the response to the one before it (bidirectional
    /// calls, `--stream-ping-pong`).
    pub ping_pong: bool,
}

/// What one call moved on its streams.
#[derive(Debug, Default)]
pub struct Moved {
    /// Messages sent on the request stream.
    pub sent: AtomicU64,
    /// Messages received on the response stream.
    pub received: AtomicU64,
    /// Told of each message received in ping-pong, which the request stream waits for.
    replied: Notify,
}

impl Moved {
    /// Messages sent and received.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }

    /// Waits until `n` messages were received (ping-pong: the replies to the `n`
    /// requests sent).
    async fn received_at_least(&self, n: u64) {
        loop {
            // Made before the check: a notice between the two is kept for it (tokio's
            // `notify_one` stores a permit when no one waits).
            let notified = self.replied.notified();
            if self.received.load(Ordering::Acquire) >= n {
                return;
            }
            notified.await;
        }
    }
}

/// The request stream of call `call`, a client or bidirectional one: `messages` as the
/// options say (rendered for the call, or for each message with
/// `--stream-dynamic-messages`), counted into `moved`; in ping-pong, each after the
/// response to the one before has been counted into `moved` by [`drain`]. A rendering
/// that fails ends the stream early.
///
/// # Errors
/// The call's rendering failed.
pub fn request_stream(
    messages: &Arc<Messages>,
    call: CallFacts,
    options: StreamOptions,
    moved: Arc<Moved>,
) -> Result<impl Stream<Item = DynamicMessage> + Send + 'static, String> {
    let start = Instant::now();
    let rendered = messages.for_call(call)?;
    let per_message = messages.per_message().then(|| messages.clone());
    let len = rendered.len() as u64;
    let limit = match (options.call_count, options.call_duration) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None, // cycles until the duration passes
        (None, None) => Some(len),
    };
    Ok(futures_util::stream::unfold(0u64, move |i| {
        let rendered = rendered.clone();
        let per_message = per_message.clone();
        let moved = moved.clone();
        async move {
            if limit.is_some_and(|n| i >= n) {
                return None;
            }
            if i > 0 && options.ping_pong {
                moved.received_at_least(i).await;
            }
            if i > 0 {
                if let Some(interval) = options.interval {
                    tokio::time::sleep(interval).await;
                }
            }
            if options.call_duration.is_some_and(|d| start.elapsed() >= d) {
                return None;
            }
            let message = match per_message {
                Some(messages) => {
                    let fresh = messages.for_call(call).ok()?;
                    fresh[(i % fresh.len() as u64) as usize].clone()
                }
                None => rendered[(i % len) as usize].clone(),
            };
            moved.sent.fetch_add(1, Ordering::Relaxed);
            Some((message, i + 1))
        }
    }))
}

/// Whether a server stream that has delivered `received` messages since `start` should
/// be given up (the count or the duration is reached).
pub fn enough(options: &StreamOptions, received: u64, start: Instant) -> bool {
    options.call_count.is_some_and(|n| received >= n)
        || options.call_duration.is_some_and(|d| start.elapsed() >= d)
}

/// Reads a response stream to its end or until the options say stop, counting into
/// `moved` (and, in ping-pong, letting the request stream send its next message).
/// `Ok(true)` when the stream ended, `Ok(false)` when the reader stopped first.
///
/// # Errors
/// The stream's error.
pub async fn drain<T, E>(
    stream: impl Stream<Item = Result<T, E>>,
    options: &StreamOptions,
    limited: bool,
    moved: &Moved,
) -> Result<bool, E> {
    use futures_util::StreamExt;
    let start = Instant::now();
    let mut stream = std::pin::pin!(stream);
    let deadline = options.call_duration.filter(|_| limited).map(|d| start + d);
    loop {
        if limited && enough(options, moved.received.load(Ordering::Relaxed), start) {
            return Ok(false);
        }
        let next = match deadline {
            Some(d) => match tokio::time::timeout_at(d, stream.next()).await {
                Ok(next) => next,
                Err(_) => return Ok(false),
            },
            None => stream.next().await,
        };
        match next {
            Some(Ok(_)) => {
                moved.received.fetch_add(1, Ordering::Release);
                if options.ping_pong {
                    moved.replied.notify_one();
                }
            }
            Some(Err(e)) => return Err(e),
            None => return Ok(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use futures_util::StreamExt;
    use prost_reflect::Value;

    use super::*;

    fn messages(n: usize) -> Arc<Messages> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let pool =
            crate::proto::load_descriptors(&root.join("proto/echo.proto"), &[root.join("proto")])
                .unwrap();
        let desc = pool.get_message_by_name("echo.EchoRequest").unwrap();
        let all = (0..n)
            .map(|i| {
                let mut m = DynamicMessage::new(desc.clone());
                m.set_field_by_name("delay_ms", Value::U32(i as u32));
                m
            })
            .collect();
        Arc::new(Messages::new(all).unwrap())
    }

    fn delays(sent: Vec<DynamicMessage>) -> Vec<u32> {
        sent.iter()
            .map(|m| m.get_field_by_name("delay_ms").unwrap().as_u32().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn the_array_once_or_cycled_or_cut_to_the_count() {
        let moved = Arc::new(Moved::default());
        let call = CallFacts {
            request_number: 0,
            worker: 0,
        };
        let all =
            request_stream(&messages(3), call, StreamOptions::default(), moved.clone()).unwrap();
        assert_eq!(delays(all.collect().await), [0, 1, 2]);
        assert_eq!(moved.counts(), (3, 0));
        let options = StreamOptions {
            call_count: Some(5),
            ..Default::default()
        };
        let cycled = request_stream(&messages(3), call, options, moved.clone()).unwrap();
        assert_eq!(delays(cycled.collect().await), [0, 1, 2, 0, 1]);
        let options = StreamOptions {
            call_count: Some(2),
            ..Default::default()
        };
        let cut = request_stream(&messages(3), call, options, moved).unwrap();
        assert_eq!(delays(cut.collect().await), [0, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn sends_are_spaced_by_the_interval_until_the_duration() {
        let options = StreamOptions {
            interval: Some(Duration::from_millis(100)),
            call_duration: Some(Duration::from_millis(450)),
            call_count: None,
            ping_pong: false,
        };
        let moved = Arc::new(Moved::default());
        let start = Instant::now();
        let call = CallFacts {
            request_number: 0,
            worker: 0,
        };
        let sent: Vec<_> = request_stream(&messages(2), call, options, moved.clone())
            .unwrap()
            .collect()
            .await;
        // At 0, 100, 200, 300 and 400 ms; the next would be at 500.
        assert_eq!(delays(sent), [0, 1, 0, 1, 0]);
        assert!(start.elapsed() >= Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn in_ping_pong_a_message_waits_for_the_reply_to_the_one_before() {
        let options = StreamOptions {
            call_count: Some(3),
            ping_pong: true,
            ..Default::default()
        };
        let moved = Arc::new(Moved::default());
        let call = CallFacts {
            request_number: 0,
            worker: 0,
        };
        let sent = request_stream(&messages(3), call, options, moved.clone()).unwrap();
        let mut sent = std::pin::pin!(sent);
        let reply = || futures_util::stream::iter([Ok::<_, ()>(())]);
        for i in 0..3u32 {
            if i > 0 {
                let early = tokio::time::timeout(Duration::from_secs(60), sent.next()).await;
                assert!(
                    early.is_err(),
                    "message {i} went before the reply to {}",
                    i - 1
                );
                assert_eq!(drain(reply(), &options, false, &moved).await, Ok(true));
            }
            let message = sent.next().await.expect("the next message");
            assert_eq!(delays(vec![message]), [i]);
        }
        // The half-close follows the last message at once.
        assert!(sent.next().await.is_none());
        assert_eq!(moved.counts(), (3, 2));
    }

    #[tokio::test]
    async fn a_server_stream_is_read_to_its_end_or_to_the_count() {
        let moved = Moved::default();
        let items = futures_util::stream::iter((0..10).map(Ok::<_, ()>));
        assert_eq!(
            drain(items, &StreamOptions::default(), false, &moved).await,
            Ok(true)
        );
        assert_eq!(moved.counts(), (0, 10));
        let moved = Moved::default();
        let options = StreamOptions {
            call_count: Some(4),
            ..Default::default()
        };
        let items = futures_util::stream::iter((0..10).map(Ok::<_, ()>));
        assert_eq!(drain(items, &options, true, &moved).await, Ok(false));
        assert_eq!(moved.counts(), (0, 4));
    }
}
