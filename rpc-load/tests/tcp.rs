//! End to end over tcp:// against the examples' echo and kv services on 127.0.0.1.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdmarpc_load::app;

/// Every 4th request is over the server's message limit: those fail with
/// RESOURCE_EXHAUSTED, and the run goes on over the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_show_up_in_the_error_distribution() {
    let url = start_rpc_server().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.json");
    let big = "A".repeat(((2 * SERVER_MAX) / 3) * 4); // base64 of 2 MiB
    let small = r#"{"payload": "aGVsbG8="}"#;
    let json = format!(r#"[{small}, {small}, {small}, {{"payload": "{big}"}}]"#);
    std::fs::write(&data, json).unwrap();
    let data_arg = format!("@{}", data.display());

    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            &data_arg,
            "-c",
            "4",
            "-n",
            "200",
            &url,
        ],
    ))
    .await
    .unwrap();

    assert_eq!(report.count, 200, "every request counted");
    assert_eq!(
        report.sent,
        report.ok + report.errors,
        "sent = replies + errors"
    );
    assert_eq!(report.status_code_distribution.get("OK"), Some(&150));
    assert_eq!(
        report.status_code_distribution.get("ResourceExhausted"),
        Some(&50)
    );
    assert_eq!(report.error_distribution.values().sum::<u64>(), 50);
    let (error, _) = report.error_distribution.iter().next().unwrap();
    assert!(
        error.starts_with("rpc error: code = ResourceExhausted desc = "),
        "{error}"
    );
    assert_eq!(report.end_reason, "normal");
    assert_eq!(report.transport, "tcp");
    assert!(report.fastest > 0 && report.fastest <= report.slowest);
    assert_eq!(report.latency_distribution.len(), 7);
    assert_eq!(report.histogram.iter().map(|b| b.count).sum::<u64>(), 150);
}

/// --max-recv-message-size holds on its own: responses over it (and under the larger
/// --max-send-message-size, the transport's limit) fail RESOURCE_EXHAUSTED call by call,
/// as grpc-go reports them, unary and streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_over_the_receive_limit_fail_each_call() {
    let url = start_rpc_server().await;
    for (call, data) in [
        ("echo.Echo/Echo", "{}"),
        ("echo.Echo/Repeat", r#"{"count": 3}"#),
    ] {
        let report = app::run(&args(
            "echo.proto",
            &[
                "--call",
                call,
                "-d",
                data,
                "--payload-size",
                "2000",
                "--max-recv-message-size",
                "1000",
                "--max-send-message-size",
                "10000",
                "-n",
                "10",
                "-c",
                "2",
                &url,
            ],
        ))
        .await
        .unwrap();
        assert_eq!(
            (report.count, report.errors),
            (10, 10),
            "{call}: {:?}",
            report.error_distribution
        );
        let (error, _) = report.error_distribution.iter().next().unwrap();
        assert!(
            error.starts_with("rpc error: code = ResourceExhausted desc = grpc: received message larger than max ("),
            "{call}: {error}"
        );
    }
}

/// kv: a Put, then Gets where every 3rd key is missing (NOT_FOUND), over 2 connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_keys_mixed_into_kv_gets() {
    let url = start_rpc_server().await;
    let put = app::run(&args(
        "kv.proto",
        &[
            "--call",
            "kv.Kv/Put",
            "-d",
            r#"{"key": "present", "value": "dg=="}"#,
            "-n",
            "1",
            "-c",
            "1",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(put.status_code_distribution.get("OK"), Some(&1));

    let data = r#"[{"key": "present"}, {"key": "present"}, {"key": "missing"}]"#;
    let report = app::run(&args(
        "kv.proto",
        &[
            "--call",
            "kv.Kv/Get",
            "-d",
            data,
            "-c",
            "8",
            "--connections",
            "2",
            "-n",
            "300",
            "--warmup",
            "30",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.count, 300);
    assert_eq!(report.sent, report.ok + report.errors);
    assert_eq!(report.ok, 200);
    assert_eq!(report.status_code_distribution.get("NotFound"), Some(&100));
    assert_eq!(
        report
            .error_distribution
            .get(r#"rpc error: code = NotFound desc = no key "missing""#),
        Some(&100)
    );
    assert_eq!((report.warmup.calls, report.warmup.errors), (30, 10));
    assert_eq!(report.options.connections, 2);
}

/// Under -r, latency runs from the intended send time: one worker facing a server that
/// takes 50 ms per call while the schedule asks for one call every 10 ms falls behind,
/// and the queueing shows in the latencies (no coordinated omission).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_latency_includes_queueing() {
    let url = start_rpc_server().await;
    let started = Instant::now();
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"delayMs": 50}"#,
            "-c",
            "1",
            "-n",
            "12",
            "-r",
            "100",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.count, 12);
    // Request 11 was due at 110 ms but could only start at about 11 * 50 ms = 550 ms.
    let slowest = Duration::from_nanos(report.slowest);
    assert!(slowest > Duration::from_millis(450), "slowest {slowest:?}");
    assert!(Duration::from_nanos(report.fastest) < Duration::from_millis(150));
    assert!(started.elapsed() >= Duration::from_millis(600));
}

/// A constant rate paces the run: 100 requests at 200/s take about half a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_rate_paces_the_run() {
    let url = start_rpc_server().await;
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-c",
            "4",
            "-n",
            "100",
            "-r",
            "200",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.ok, 100);
    let total = Duration::from_nanos(report.total);
    assert!(total >= Duration::from_millis(490), "total {total:?}");
    assert!(total < Duration::from_secs(3), "total {total:?}");
}

/// -z ends the run by time; a step schedule sends what its arithmetic says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_and_step_schedule() {
    let url = start_rpc_server().await;
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-c",
            "4",
            "-z",
            "1s",
            "--load-schedule",
            "step",
            "--load-start",
            "50",
            "--load-step",
            "50",
            "--load-step-duration",
            "200ms",
            "--load-end",
            "150",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.end_reason, "timeout");
    // Due within 1 s: 0.2 s x (50 + 100 + 150 + 150 + 150) = 120 requests.
    assert!(
        (118..=121).contains(&report.count),
        "count {}",
        report.count
    );
    assert_eq!(report.sent, report.ok + report.errors);
    assert!(!report.timeline.is_empty());
}

/// The per-call timeout turns slow calls into DEADLINE_EXCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_timeout() {
    let url = start_rpc_server().await;
    let data = r#"[{"delayMs": 0}, {"delayMs": 1000}]"#;
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            data,
            "-c",
            "2",
            "-n",
            "4",
            "-t",
            "300ms",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.ok, 2);
    assert_eq!(
        report.status_code_distribution.get("DeadlineExceeded"),
        Some(&2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_targets_fail_before_the_run() {
    for (rest, expected) in [
        (
            &["--call", "echo.Echo/Echo", "rdma://127.0.0.1:1"][..],
            "cannot connect",
        ),
        (
            &["--call", "echo.Echo/Echo", "tcp://127.0.0.1:1"],
            "cannot connect",
        ),
        (
            &["--call", "echo.Echo/Nope", "tcp://127.0.0.1:1"],
            "no method",
        ),
        (
            &[
                "--call",
                "echo.Echo/Echo",
                "-c",
                "2",
                "--connections",
                "3",
                "tcp://127.0.0.1:1",
            ],
            "--connections",
        ),
        (
            &["--call", "echo.Echo/Echo", "http://127.0.0.1:1"],
            "expected tcp://",
        ),
    ] {
        let error = format!(
            "{:#}",
            app::run(&args("echo.proto", rest)).await.unwrap_err()
        );
        assert!(error.contains(expected), "{rest:?}: {error}");
    }
}

/// Streaming methods of each kind: the messages moved are counted, ghz's stream flags
/// shape what a call sends and reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_calls_of_every_kind() {
    let url = start_rpc_server().await;
    let run = |file: &'static str, rest: Vec<String>| {
        let url = url.clone();
        async move {
            let mut rest: Vec<&str> = rest.iter().map(String::as_str).collect();
            rest.push(&url);
            app::run(&args(file, &rest)).await.unwrap()
        }
    };
    let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();

    // Server streaming: each call reads all 100 replies.
    let r = run(
        "echo.proto",
        owned(&[
            "--call",
            "echo.Echo/Repeat",
            "-d",
            r#"{"payload": "aGk=", "count": 100}"#,
            "-c",
            "2",
            "-n",
            "6",
        ]),
    )
    .await;
    assert_eq!(r.status_code_distribution.get("OK"), Some(&6));
    let m = r.stream_messages.unwrap();
    assert_eq!((m.sent, m.received), (0, 600));
    // --stream-call-count 10: each call reads 10, then cancels (CANCELLED, as in ghz).
    let r = run(
        "echo.proto",
        owned(&[
            "--call",
            "echo.Echo/Repeat",
            "-d",
            r#"{"payload": "aGk=", "count": 100000}"#,
            "-c",
            "2",
            "-n",
            "4",
            "--stream-call-count",
            "10",
        ]),
    )
    .await;
    assert_eq!(
        r.status_code_distribution.get("Canceled"),
        Some(&4),
        "{:?}",
        r.status_code_distribution
    );
    assert_eq!(r.stream_messages.unwrap().received, 40);

    // Client streaming: the -d array, in order, once per call; cycled to the count.
    let data = r#"[{"payload": {"body": "AAAA"}}, {"payload": {"body": "AAAAAAAA"}}]"#;
    let r = run(
        "grpc/testing/test.proto",
        owned(&[
            "--call",
            "grpc.testing.TestService/StreamingInputCall",
            "-d",
            data,
            "-c",
            "1",
            "-n",
            "3",
        ]),
    )
    .await;
    assert_eq!(r.status_code_distribution.get("OK"), Some(&3));
    assert_eq!(r.stream_messages.unwrap().sent, 6);
    let r = run(
        "grpc/testing/test.proto",
        owned(&[
            "--call",
            "grpc.testing.TestService/StreamingInputCall",
            "-d",
            data,
            "-c",
            "1",
            "-n",
            "2",
            "--stream-call-count",
            "5",
            "--stream-interval",
            "1ms",
        ]),
    )
    .await;
    assert_eq!(r.stream_messages.unwrap().sent, 10);

    // Bidirectional: each request answered by its response parameters.
    let data = r#"[{"responseParameters": [{"size": 10}, {"size": 20}]}, {"responseParameters": [{"size": 5}]}]"#;
    let r = run(
        "grpc/testing/test.proto",
        owned(&[
            "--call",
            "grpc.testing.TestService/FullDuplexCall",
            "-d",
            data,
            "-c",
            "2",
            "-n",
            "4",
        ]),
    )
    .await;
    assert_eq!(r.status_code_distribution.get("OK"), Some(&4));
    let m = r.stream_messages.unwrap();
    assert_eq!((m.sent, m.received), (8, 12));
}

/// `{{.RequestNumber}}` templates are rendered for every call: here the kv keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_render_every_call() {
    let url = start_rpc_server().await;
    let put = app::run(&args(
        "kv.proto",
        &[
            "--call",
            "kv.Kv/Put",
            "-d",
            r#"{"key": "k-{{.RequestNumber}}-{{randomString 4}}", "value": "dg=="}"#,
            "-c",
            "4",
            "-n",
            "50",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(put.status_code_distribution.get("OK"), Some(&50));
    // Every call made its own key: a scan finds 50 keys k-0-... to k-49-....
    let conn = rdmarpc_transport_tcp::TcpConnection::connect(
        url.trim_start_matches("tcp://"),
        &rdmarpc_transport_tcp::TcpConfig::default(),
    )
    .await
    .unwrap();
    let kv = examples::kv::kv_client::KvClient::new(rdmarpc_core::Channel::new(conn));
    let scan = kv
        .scan(examples::kv::ScanRequest {
            prefix: "k-".into(),
            limit: 100,
            keys_only: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(scan.entries.len(), 50);
    let mut numbers: Vec<u64> = scan
        .entries
        .iter()
        .map(|e| e.key.split('-').nth(1).unwrap().parse().unwrap())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..50).collect::<Vec<_>>());
}

/// `-x`: what happens to the calls in flight when -z ends (each call sleeps 400 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_stop_closes_waits_for_or_ignores_calls_in_flight() {
    let url = start_rpc_server().await;
    let run = |mode: &'static str| {
        let url = url.clone();
        async move {
            app::run(&args(
                "echo.proto",
                &[
                    "--call",
                    "echo.Echo/Echo",
                    "-d",
                    r#"{"delayMs": 400}"#,
                    "-c",
                    "2",
                    "-z",
                    "1s",
                    "--duration-stop",
                    mode,
                    &url,
                ],
            ))
            .await
            .unwrap()
        }
    };
    let close = run("close").await;
    assert_eq!(
        close.status_code_distribution.get("Canceled"),
        Some(&2),
        "{:?}",
        close.status_code_distribution
    );
    let wait = run("wait").await;
    assert_eq!(wait.errors, 0, "{:?}", wait.status_code_distribution);
    assert_eq!(wait.count, 6, "3 rounds of 2 calls, the last waited for");
    let ignore = run("ignore").await;
    assert_eq!(ignore.errors, 0);
    assert_eq!(
        ignore.count, 4,
        "the 2 calls in flight at 1 s are not counted"
    );
    assert_eq!(ignore.sent, ignore.count);
}

/// `--concurrency-schedule step`: 1 worker, then one more every 300 ms up to 4; each call
/// takes 50 ms, so the completion rate climbs from about 20/s to about 80/s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_schedule_adds_workers_over_time() {
    let url = start_rpc_server().await;
    let report = app::run(&args(
        "echo.proto",
        &[
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"delayMs": 50}"#,
            "-z",
            "1200ms",
            "--duration-stop",
            "wait",
            "--concurrency-schedule",
            "step",
            "--concurrency-start",
            "1",
            "--concurrency-step",
            "1",
            "--concurrency-step-duration",
            "300ms",
            "--concurrency-end",
            "4",
            &url,
        ],
    ))
    .await
    .unwrap();
    assert_eq!(report.errors, 0);
    // As ghz writes them: -c (its default, unused by the schedule), and the schedule.
    assert_eq!(report.options.concurrency, 50, "-c, as ghz writes it");
    assert_eq!(report.options.concurrency_end, 4);
    // Calls completed in the first and the last 300 ms.
    let calls_in = |from: u64, to: u64| -> f64 {
        report
            .timeline
            .iter()
            .filter(|p| p.start >= from && p.start < to)
            .map(|p| p.rps * report.timeline_interval as f64 / 1e9)
            .sum()
    };
    let (first, last) = (
        calls_in(0, 300_000_000),
        calls_in(900_000_000, 1_200_000_000),
    );
    assert!(
        (3.0..=8.0).contains(&first) && last >= 2.5 * first,
        "calls in the first 300 ms: {first}, in the last: {last}"
    );
}
