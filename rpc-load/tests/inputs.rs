//! The run's inputs are read once, before the run (`-d @FILE` through a FIFO, which a
//! second read would wait on for ever).

mod common;

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `rpc-load --proto echo.proto --call echo.Echo.Echo -n 4 ARGS... URL`, with `stdin`.
fn spawn(args: &[&str], url: &str, stdin: Stdio) -> Child {
    let proto = proto_dir().join("echo.proto").display().to_string();
    Command::new(env!("CARGO_BIN_EXE_rpc-load"))
        .args(["--proto", &proto, "--call", "echo.Echo.Echo", "-n", "4"])
        .args(args)
        .arg(url)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The child's output, or a failure if it has not ended within a minute (it is killed).
fn wait(mut child: Child, what: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{what}: still running after a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_from_a_fifo_is_read_once() {
    let url = start_rpc_server().await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("data.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            // Opening blocks until rpc-load opens the FIFO to read; written once.
            let mut file = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            file.write_all(br#"{"payload":"aGk="}"#).unwrap();
        })
    };
    let arg = format!("@{}", fifo.display());
    let url2 = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        wait(
            spawn(&["-d", &arg, "-O", "json"], &url2, Stdio::null()),
            "-d @FIFO",
        )
    })
    .await
    .unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["count"], 4);
    assert_eq!(report["errors"], 0);
    assert_eq!(
        report["options"]["data"],
        serde_json::json!({"payload": "aGk="})
    );
}
