use std::time::Duration;

use super::*;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// Latencies 1, 2, ..., 10 000 µs, one call each: the k-th percentile is k * 100 µs.
fn uniform() -> Stats {
    let mut stats = Stats::new(Duration::from_millis(100));
    for i in 1..=10_000 {
        stats.record(us(i), Duration::from_millis(i / 10), &Ok(()));
    }
    stats
}

/// `actual` within the histogram's 3 significant digits of `expected`.
fn assert_close(actual: Duration, expected: Duration) {
    let (a, e) = (actual.as_nanos() as f64, expected.as_nanos() as f64);
    assert!(
        (a - e).abs() <= e * 1e-3,
        "expected {expected:?}, got {actual:?}"
    );
}

#[test]
fn percentiles_of_a_uniform_distribution() {
    let stats = uniform();
    for (p, expected) in [
        (10.0, 1_000),
        (25.0, 2_500),
        (50.0, 5_000),
        (75.0, 7_500),
        (90.0, 9_000),
        (95.0, 9_500),
        (99.0, 9_900),
        (99.9, 9_990),
    ] {
        assert_close(stats.percentile(p).unwrap(), us(expected));
    }
    assert_eq!(
        stats.percentile(100.0),
        Some(us(10_000)),
        "clamped to the exact slowest"
    );
    assert_eq!(stats.fastest(), Some(us(1)));
    assert_eq!(stats.slowest(), Some(us(10_000)));
    // Exact mean of 1..=10000 µs.
    assert_eq!(stats.average(), Duration::from_nanos(5_000_500));
    assert_eq!(
        (stats.count(), stats.ok(), stats.errors()),
        (10_000, 10_000, 0)
    );
}

#[test]
fn percentiles_of_a_bimodal_distribution() {
    // 90 % at 100 µs, 10 % at 10 ms: p50 and p90 are fast, p95 and p99 slow.
    let mut stats = Stats::new(Duration::from_millis(100));
    for i in 0..1_000 {
        let latency = if i % 10 == 9 { us(10_000) } else { us(100) };
        stats.record(latency, Duration::ZERO, &Ok(()));
    }
    assert_close(stats.percentile(50.0).unwrap(), us(100));
    assert_close(stats.percentile(90.0).unwrap(), us(100));
    assert_close(stats.percentile(95.0).unwrap(), us(10_000));
    assert_close(stats.percentile(99.0).unwrap(), us(10_000));
}

#[test]
fn errors_count_in_average_and_status_but_not_in_percentiles() {
    let mut stats = Stats::new(Duration::from_millis(100));
    stats.record(us(100), Duration::ZERO, &Ok(()));
    stats.record(us(300), Duration::ZERO, &Ok(()));
    let not_found = CallError::new(Code::NotFound, "no key \"x\"");
    stats.record(us(2), Duration::ZERO, &Err(not_found.clone()));
    assert_eq!(stats.count(), 3);
    assert_eq!(
        stats.fastest(),
        Some(us(100)),
        "errors are not the fastest call"
    );
    assert_eq!(stats.average(), Duration::from_nanos(134_000));
    assert_eq!(
        stats.status_counts(),
        vec![(Code::Ok, 2), (Code::NotFound, 1)]
    );
    assert_eq!(
        stats.error_counts(),
        vec![(
            "rpc error: code = NotFound desc = no key \"x\"".to_owned(),
            1
        )]
    );
    assert_eq!(
        not_found.to_ghz_string(),
        "rpc error: code = NotFound desc = no key \"x\""
    );
}

#[test]
fn no_successful_call_has_no_percentiles() {
    let mut stats = Stats::new(Duration::from_millis(100));
    stats.record(
        us(5),
        Duration::ZERO,
        &Err(CallError::new(Code::Unavailable, "down")),
    );
    assert_eq!(stats.percentile(50.0), None);
    assert_eq!(stats.fastest(), None);
    assert_eq!(stats.average(), us(5));
}

#[test]
fn merging_shards_equals_recording_in_one() {
    let whole = uniform();
    let mut shards = [
        Stats::new(Duration::from_millis(100)),
        Stats::new(Duration::from_millis(100)),
    ];
    for i in 1..=10_000u64 {
        shards[(i % 2) as usize].record(us(i), Duration::from_millis(i / 10), &Ok(()));
    }
    let mut merged = Stats::new(Duration::from_millis(100));
    let [first, second] = &mut shards;
    merged.merge(first);
    merged.merge(second);
    assert_eq!(merged.count(), whole.count());
    assert_eq!(merged.average(), whole.average());
    assert_eq!(merged.percentile(99.0), whole.percentile(99.0));
    assert_eq!(merged.timeline(), whole.timeline());
    // 1000 ms of completions at 100 ms intervals (the last call lands in interval 10).
    assert_eq!(merged.timeline().len(), 11);
    assert_eq!(merged.timeline()[0].ok, 999);
}

#[test]
fn distinct_errors_are_capped() {
    let mut stats = Stats::new(Duration::from_millis(100));
    for i in 0..MAX_DISTINCT_ERRORS + 10 {
        let error = CallError::new(Code::Internal, format!("error {i}"));
        stats.record(us(1), Duration::ZERO, &Err(error));
    }
    let errors = stats.error_counts();
    assert_eq!(errors.len(), MAX_DISTINCT_ERRORS + 1);
    assert_eq!(errors[0], (OTHER_ERRORS.to_owned(), 10));
}

#[test]
fn code_names_are_grpc_go_names() {
    assert_eq!(code_name(Code::Ok), "OK");
    assert_eq!(code_name(Code::Cancelled), "Canceled");
    assert_eq!(code_name(Code::DeadlineExceeded), "DeadlineExceeded");
    assert_eq!(code_name(Code::ResourceExhausted), "ResourceExhausted");
}

#[test]
fn count_errors_puts_failed_calls_in_the_latency_figures() {
    let error = CallError::new(Code::NotFound, "missing");
    let mut plain = Stats::new(Duration::from_millis(100));
    let mut counting = Stats::new(Duration::from_millis(100)).counting_errors(true);
    for stats in [&mut plain, &mut counting] {
        stats.record(us(100), Duration::ZERO, &Ok(()));
        stats.record(us(5000), Duration::ZERO, &Err(error.clone()));
    }
    assert_eq!(plain.slowest(), Some(us(100)), "errors left out by default");
    assert_eq!(
        counting.slowest(),
        Some(us(5000)),
        "--count-errors counts them"
    );
    assert_eq!(
        (counting.ok(), counting.errors()),
        (1, 1),
        "still counted as errors"
    );
}

#[test]
fn percentiles_over_time_come_from_log_buckets() {
    let mut stats = Stats::new(Duration::from_millis(100));
    // 99 calls at 100 µs and one at 10 ms, in the first interval.
    for _ in 0..99 {
        stats.record(us(100), Duration::ZERO, &Ok(()));
    }
    stats.record(us(10_000), Duration::ZERO, &Ok(()));
    let interval = &stats.timeline()[0];
    let p50 = interval.percentile(50.0).unwrap() as f64;
    let p100 = interval.percentile(100.0).unwrap() as f64;
    assert!((p50 / 100_000.0 - 1.0).abs() < 0.2, "p50 {p50}");
    assert!((p100 / 10_000_000.0 - 1.0).abs() < 0.2, "max {p100}");
    assert_eq!(
        interval.percentile(99.0),
        interval.percentile(50.0),
        "99 of 100 at 100 µs"
    );
    assert!(Interval::default().percentile(50.0).is_none());
}

/// Shards share one room for details: the first calls recorded are kept, whichever
/// shard records them, and no more than the cap in all (each shard having its own room,
/// as before, kept 2 × 3 = 6, the last ones of the busier shard among them).
#[test]
fn shards_keep_the_first_calls_in_all() {
    let room = DetailRoom::with_cap(5);
    let start = Some(std::time::SystemTime::now());
    let new = || Stats::new(Duration::from_millis(100)).keeping_details(start, &room);
    let mut shards = [new(), new()];
    // Calls 0..10 complete in order; shard 0 records calls 0, 1, 2, 5, 6, 7, 8, 9.
    for i in 0..10u64 {
        let shard = usize::from(matches!(i, 3 | 4));
        shards[shard].record(us(1), Duration::from_millis(i), &Ok(()));
    }
    assert_eq!(shards[0].details().len() + shards[1].details().len(), 5);
    let mut merged = Stats::new(Duration::from_millis(100)).keeping_details(start, &room);
    let [first, second] = &mut shards;
    merged.merge(first);
    merged.merge(second);
    let at: Vec<u64> = merged
        .details()
        .iter()
        .map(|d| d.at.as_millis() as u64)
        .collect();
    assert_eq!(at, [0, 1, 2, 3, 4]);
    assert_eq!(merged.count(), 10);
    assert!(first.details().is_empty(), "moved, not copied");
    assert_eq!(merged.take_details().len(), 5);
    assert!(merged.details().is_empty());
}

/// A run longer than MAX_INTERVALS intervals: adjacent intervals merge in pairs and the
/// width doubles, so the timeline stays bounded and adds up to the same calls; shards
/// that widened differently merge at the wider width.
#[test]
fn a_long_timeline_widens_its_intervals_instead_of_growing() {
    let ms = Duration::from_millis;
    let mut long = Stats::new(ms(100));
    let mut short = Stats::new(ms(100));
    // One call every 100 ms for 10,000 s: 100,000 intervals of 100 ms.
    for i in 0..100_000u64 {
        long.record(us(1 + i % 1000), ms(100 * i), &Ok(()));
    }
    short.record(us(7), ms(150), &Err(CallError::new(Code::Internal, "x")));
    assert!(
        long.timeline().len() <= MAX_INTERVALS,
        "{}",
        long.timeline().len()
    );
    // 100 ms doubled until 10,000 s fits in 4096 intervals: 100 ms * 2^5 = 3.2 s.
    assert_eq!(long.interval(), ms(3200));
    assert_eq!(long.timeline().len(), 3125);
    assert!(long.timeline().iter().all(|i| i.ok == 32));
    let buckets: u64 = long.timeline()[0]
        .log_buckets
        .iter()
        .map(|&n| u64::from(n))
        .sum();
    assert_eq!(buckets, 32);
    assert_eq!(long.timeline()[0].latency_max_ns, 32_000);

    let mut merged = Stats::new(ms(100));
    merged.merge(&mut short);
    merged.merge(&mut long);
    assert_eq!(merged.interval(), ms(3200));
    assert_eq!(merged.timeline().len(), 3125);
    assert_eq!(
        (merged.timeline()[0].ok, merged.timeline()[0].errors),
        (32, 1)
    );
    let calls: u64 = merged.timeline().iter().map(|i| i.ok + i.errors).sum();
    assert_eq!(calls, merged.count());
}
