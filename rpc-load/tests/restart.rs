//! rpc-load across server restarts (hardening item 9): a server process restarted
//! gracefully under load (c=16) loses no call; one killed outright costs the calls that
//! were in flight, which rpc-load reports, and it redials and carries on.
//!
//! The server processes are this test binary run again as `serve_child_process` (an
//! ignored test): the echo service served by `examples::transport::serve_until_ctrl_c`,
//! the same code as the `echo-server` binary, stopped gracefully by SIGINT.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::proto_dir;

const SERVE_VAR: &str = "RPC_LOAD_TEST_SERVE";

/// Not a test: the server process of the tests below (runs only when spawned by them).
#[test]
#[ignore = "the server process of the restart tests, spawned by them"]
fn serve_child_process() {
    let Ok(url) = std::env::var(SERVE_VAR) else {
        return;
    };
    let args = examples::transport::TransportArgs {
        addr: Some(url),
        config: None,
        max_message_size: None,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(examples::transport::serve_until_ctrl_c(
            &args,
            &examples::transport::ObserveArgs::default(),
            "tcp://127.0.0.1:0",
            1 << 20,
            examples::echo::echo_server::EchoServer::new(examples::EchoService),
        ))
        .unwrap();
}

struct ServerChild(Child);

impl ServerChild {
    fn start(port: u16) -> ServerChild {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "serve_child_process", "--nocapture"])
            .env(SERVE_VAR, format!("tcp://127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "server did not come up");
            std::thread::sleep(Duration::from_millis(10));
        }
        ServerChild(child)
    }

    fn signal(&self, signal: &str) {
        Command::new("kill")
            .args([&format!("-{signal}"), &self.0.id().to_string()])
            .status()
            .unwrap();
    }

    /// Waits for the process to exit; whether it exited cleanly.
    fn wait(&mut self) -> bool {
        self.0.wait().unwrap().success()
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts rpc-load (c=16, 20 ms calls, for `seconds`) against `port`, JSON report.
fn start_load(port: u16, seconds: u32) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rpc-load"))
        .args([
            "--proto",
            &proto_dir().join("echo.proto").display().to_string(),
            "--call",
            "echo.Echo/Echo",
            "-d",
            r#"{"payload":"aGVsbG8=","delayMs":20}"#,
            "-c",
            "16",
            "-z",
            &format!("{seconds}s"),
            // Calls in flight at the end are waited for: every call is an outcome here.
            "--duration-stop",
            "wait",
            "-O",
            "json",
            &format!("tcp://127.0.0.1:{port}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn report_of(output: Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "rpc-load failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn ok_count(report: &serde_json::Value) -> u64 {
    report["statusCodeDistribution"]["OK"].as_u64().unwrap_or(0)
}

#[test]
fn a_graceful_restart_under_load_loses_no_call() {
    let port = free_port();
    let mut old = ServerChild::start(port);
    let load = start_load(port, 4);
    std::thread::sleep(Duration::from_secs(1));
    // SIGINT: the old server says GOAWAY, finishes its calls and exits; the new one
    // binds the same port as soon as it is free.
    old.signal("INT");
    assert!(old.wait(), "the old server exits cleanly");
    let _new = ServerChild::start(port);
    let report = report_of(load.wait_with_output().unwrap());
    let (count, ok) = (report["count"].as_u64().unwrap(), ok_count(&report));
    eprintln!(
        "restart: graceful: {count} calls, {ok} OK, errors {}",
        report["errorDistribution"]
    );
    assert!(count > 100, "the load ran: {count}");
    assert_eq!(ok, count, "no call lost: {}", report["errorDistribution"]);
}

#[test]
fn after_a_crash_rpc_load_redials_and_reports_the_calls_in_flight() {
    let port = free_port();
    let old = ServerChild::start(port);
    let load = start_load(port, 4);
    std::thread::sleep(Duration::from_secs(1));
    old.signal("KILL");
    drop(old);
    std::thread::sleep(Duration::from_millis(500));
    let _new = ServerChild::start(port);
    let report = report_of(load.wait_with_output().unwrap());
    let (count, ok) = (report["count"].as_u64().unwrap(), ok_count(&report));
    let errors = count - ok;
    eprintln!(
        "restart: crash: {count} calls, {ok} OK, {errors} errors: {}",
        report["errorDistribution"]
    );
    // The calls in flight at the crash (at most one per worker) fail with UNAVAILABLE;
    // calls made while no server listens wait for the redial instead of failing.
    assert!((1..=16 * 2).contains(&errors), "errors {errors}");
    let reported = report["errorDistribution"].as_object().unwrap();
    assert!(
        reported.keys().all(|e| e.contains("Unavailable")),
        "reported as UNAVAILABLE: {reported:?}"
    );
    assert!(
        ok > 16 * 2 * 1000 / 20,
        "calls went on after the restart: {ok}"
    );
}
