//! The `rpc-load` binary as a user runs it: output formats
//! and ghz's JSON field names.

mod common;

use std::process::{Command, Output};

use common::*;

/// Runs the `rpc-load` binary with `args` (off the async runtime).
async fn rdmarpc_load(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rpc-load"))
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn base_args(url: &str, rest: &[&str]) -> Vec<String> {
    let proto = proto_dir().join("echo.proto");
    let mut args = vec![
        "--proto".to_owned(),
        proto.display().to_string(),
        "--call".to_owned(),
        "echo.Echo/Echo".to_owned(),
        "--payload-size".to_owned(),
        "64".to_owned(),
        "-c".to_owned(),
        "4".to_owned(),
        "-n".to_owned(),
        "100".to_owned(),
    ];
    args.extend(rest.iter().map(|s| (*s).to_owned()));
    args.push(url.to_owned());
    args
}

fn stdout_of(output: &Output) -> String {
    assert!(
        output.status.success(),
        "rpc-load failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_report_has_ghz_fields() {
    let url = start_rpc_server().await;
    let out = rdmarpc_load(base_args(&url, &["-O", "json", "--name", "t1"])).await;
    let json: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    for key in ["count", "total", "average", "fastest", "slowest"] {
        assert!(json[key].is_u64(), "{key} in ns: {}", json[key]);
    }
    assert_eq!(json["count"], 100);
    assert!(json["rps"].as_f64().unwrap() > 0.0);
    assert_eq!(json["name"], "t1");
    assert_eq!(json["endReason"], "normal");
    assert!(json["date"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        json["statusCodeDistribution"],
        serde_json::json!({"OK": 100})
    );
    assert_eq!(json["errorDistribution"], serde_json::json!({}));
    let latencies = json["latencyDistribution"].as_array().unwrap();
    let percentages: Vec<u64> = latencies
        .iter()
        .map(|p| p["percentage"].as_u64().unwrap())
        .collect();
    assert_eq!(percentages, [10, 25, 50, 75, 90, 95, 99]);
    assert!(latencies.iter().all(|p| p["latency"].is_u64()));
    assert_eq!(json["tailLatencyDistribution"][0]["percentage"], 99.9);
    let histogram = json["histogram"].as_array().unwrap();
    assert_eq!(histogram.len(), 11);
    assert!(histogram[0]["mark"].is_f64() && histogram[0]["frequency"].is_f64());
    assert_eq!(
        histogram
            .iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum::<u64>(),
        100
    );
    let details = json["details"].as_array().unwrap();
    assert_eq!(details.len(), 100, "one per call");
    for detail in details {
        assert!(
            detail["timestamp"].as_str().unwrap().ends_with('Z'),
            "{detail}"
        );
        assert!(detail["latency"].as_u64().unwrap() > 0, "{detail}");
        assert_eq!(
            (&detail["status"], &detail["error"]),
            (&serde_json::json!("OK"), &serde_json::json!(""))
        );
    }
    assert_eq!(json["options"]["call"], "echo.Echo/Echo");
    assert_eq!(json["options"]["concurrency"], 4);
    assert_eq!(json["options"]["total"], 100);
    assert_eq!(json["options"]["payload-size"], 64);
    assert_eq!(json["transport"], "tcp");
    assert_eq!(json["sent"], 100);
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(!json["machine"]["cpuModel"].as_str().unwrap().is_empty());
    assert!(json["clientCpu"]["userSeconds"].is_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_csv_and_html() {
    let url = start_rpc_server().await;
    let summary = stdout_of(&rdmarpc_load(base_args(&url, &[])).await);
    for part in [
        "Summary:",
        "Count:\t100",
        "Requests/sec:",
        "Response time histogram:",
        "Latency distribution:",
        "99.9 % in",
        "Status code distribution:",
        "[OK]",
    ] {
        assert!(summary.contains(part), "{part:?} missing from:\n{summary}");
    }

    // ghz's per-call listing: a blank line, a header and one row per call.
    let csv = stdout_of(&rdmarpc_load(base_args(&url, &["-O", "csv"])).await);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[..2], ["", "duration (ms),status,error"]);
    assert_eq!(lines.len(), 102, "{csv}");
    for row in &lines[2..] {
        let cols: Vec<&str> = row.split(',').collect();
        assert_eq!(cols.len(), 3, "{row}");
        assert!(cols[0].parse::<f64>().unwrap() > 0.0, "{row}");
        assert_eq!((cols[1], cols[2]), ("OK", ""), "{row}");
    }

    let csv = stdout_of(&rdmarpc_load(base_args(&url, &["-O", "csv-summary"])).await);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(header.len(), row.len());
    assert_eq!(
        row[header.iter().position(|h| *h == "count").unwrap()],
        "100"
    );
    assert!(header.contains(&"p99_9_ns"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    let file_arg = file.display().to_string();
    let out = rdmarpc_load(base_args(&url, &["-O", "html", "-o", &file_arg])).await;
    assert!(stdout_of(&out).is_empty(), "-o writes the file, not stdout");
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        html.matches("<svg").count(),
        3,
        "histogram, latency and throughput charts"
    );
    assert!(html.contains("Latency histogram") && html.contains("Throughput over time"));
    assert!(
        !html.contains("<script") && !html.contains("src=") && !html.contains("href="),
        "self-contained"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_non_zero() {
    let out = rdmarpc_load(base_args("ftp://127.0.0.1:1", &[])).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rpc-load:"));
}

/// An uncreatable -o fails the run before it starts (it was found only after the run,
/// losing it): against a live server, and against no server at all (no connect tried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_output_fails_before_the_run() {
    let url = start_rpc_server().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("report.json");
    let path = path.display().to_string();
    let nowhere = "tcp://127.0.0.1:1";
    for target in [url.as_str(), nowhere] {
        let args = base_args(target, &["-o", &path, "--connect-timeout", "20s"]);
        let out = rdmarpc_load(args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{target}");
        assert!(
            stderr.contains("-o") && stderr.contains(&path),
            "{target}: {stderr}"
        );
    }
    // A writable -o gets the report; a failed run leaves no file behind.
    let good = dir.path().join("report.json");
    let good = good.display().to_string();
    let out = rdmarpc_load(base_args(&url, &["-O", "json", "-o", &good])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
    assert_eq!(json["count"], 100);
    let failed = dir.path().join("failed.json");
    let failed = failed.display().to_string();
    let args = base_args(nowhere, &["-o", &failed, "--call", "echo.Nope/Nope"]);
    assert!(!rdmarpc_load(args).await.status.success());
    assert!(!std::path::Path::new(&failed).exists());
}
