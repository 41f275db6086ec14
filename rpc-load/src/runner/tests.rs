//! The runner against a fake target, on tokio's paused clock: latencies are exact.

use std::sync::Arc;
use std::time::Duration;

use prost_reflect::{DescriptorPool, DynamicMessage};
use rdmarpc_core::Code;

use super::{run, DurationStop, LoadPlan, Monitor};
use crate::data::Messages;
use crate::schedule::Schedule;
use crate::stats::CallError;
use crate::target::{CallOutcome, Target};
use crate::template::CallFacts;

/// Answers every call after `delay`, failing it if `fail`.
struct Fake {
    delay: Duration,
    fail: bool,
}

impl Target for Fake {
    async fn call(&self, _: CallFacts, _: &Arc<Messages>) -> CallOutcome {
        tokio::time::sleep(self.delay).await;
        let result = match self.fail {
            true => Err(CallError::new(Code::Unavailable, "down")),
            false => Ok(()),
        };
        (result, (0, 0))
    }
}

fn messages() -> Arc<Messages> {
    let empty = DescriptorPool::global()
        .get_message_by_name("google.protobuf.Empty")
        .unwrap();
    Arc::new(Messages::new(vec![DynamicMessage::new(empty)]).unwrap())
}

/// `total` calls by one worker, unpaced.
fn plan(total: u64) -> LoadPlan {
    LoadPlan {
        concurrency: 1,
        workers: None,
        total: Some(total),
        duration: None,
        schedule: Schedule::unpaced(),
        warmup: 0,
        interval: Duration::from_millis(100),
        duration_stop: DurationStop::Close,
        count_errors: false,
        details: false,
        skip_first: 0,
        max_in_flight: None,
        connections: 1,
    }
}

/// --async with no rate and room for one call in flight: each call waits for the previous
/// one's permit, and that wait is not its latency (it is sent when it gets the permit).
#[tokio::test(start_paused = true)]
async fn async_unpaced_latency_starts_when_the_call_is_sent() {
    let delay = Duration::from_millis(100);
    let target = Arc::new(Fake { delay, fail: false });
    let plan = LoadPlan {
        max_in_flight: Some(1),
        ..plan(5)
    };
    let outcome = run(&[target], messages(), &plan, Arc::new(Monitor::new())).await;
    assert_eq!(outcome.stats.ok(), 5);
    // Counting the wait, the fifth call would take 500 ms.
    let slowest = outcome.stats.slowest().unwrap();
    assert!(slowest < delay + delay / 2, "{slowest:?}");
}

/// --count-errors with every call failing: the latency figures are there (the failed
/// calls' latencies), and the histogram's frequencies add up to 1.
#[tokio::test(start_paused = true)]
async fn count_errors_with_every_call_failing() {
    let delay = Duration::from_millis(100);
    let target = Arc::new(Fake { delay, fail: true });
    let plan = LoadPlan {
        count_errors: true,
        ..plan(5)
    };
    let outcome = run(&[target], messages(), &plan, Arc::new(Monitor::new())).await;
    assert_eq!((outcome.stats.ok(), outcome.stats.errors()), (0, 5));
    let args = crate::cli::Args::from_argv(["rpc-load", "--count-errors", "127.0.0.1:1"]).unwrap();
    let options = crate::report::ReportOptions::new(&args, "p.S/M".into(), Some(5), None, &[], 1);
    let report = crate::report::Report::new(outcome, options, Default::default(), "fake".into());
    assert!(report.fastest >= 100_000_000, "{}", report.fastest);
    assert!(report.slowest >= report.fastest);
    assert_eq!(report.latency_distribution.len(), 7);
    let frequencies: f64 = report.histogram.iter().map(|b| b.frequency).sum();
    assert!((frequencies - 1.0).abs() < 1e-9, "{:?}", report.histogram);
    assert_eq!(report.histogram.iter().map(|b| b.count).sum::<u64>(), 5);
}

/// --async with room for one call in flight and -z: the request a worker claims before
/// -z ends but gets room for only after it is neither sent nor counted. (It was: under
/// close it was started and cancelled at once, an extra CANCELLED with no latency; under
/// wait it went out after -z and made the run longer.)
#[tokio::test(start_paused = true)]
async fn async_request_given_room_after_the_duration_is_dropped() {
    let delay = Duration::from_millis(100);
    for stop in [
        DurationStop::Close,
        DurationStop::Wait,
        DurationStop::Ignore,
    ] {
        let target = Arc::new(Fake { delay, fail: false });
        // Calls at 0, 100 and 200 ms; the third is in flight when -z ends at 250 ms, and
        // the fourth, claimed at 200 ms, waits for its room until after that.
        let plan = LoadPlan {
            max_in_flight: Some(1),
            total: None,
            duration: Some(Duration::from_millis(250)),
            duration_stop: stop,
            ..plan(0)
        };
        let outcome = run(&[target], messages(), &plan, Arc::new(Monitor::new())).await;
        let counted = (outcome.stats.ok(), outcome.stats.errors());
        let (expected_counted, expected_sent, expected_time) = match stop {
            DurationStop::Close => ((2, 1), 3, 250),
            DurationStop::Wait => ((3, 0), 3, 300),
            DurationStop::Ignore => ((2, 0), 2, 250),
        };
        assert_eq!(counted, expected_counted, "{stop:?}");
        assert_eq!(outcome.sent, expected_sent, "{stop:?}");
        assert_eq!(
            outcome.total_time,
            Duration::from_millis(expected_time),
            "{stop:?}"
        );
        assert_eq!(outcome.end_reason, super::EndReason::Timeout, "{stop:?}");
    }
}
