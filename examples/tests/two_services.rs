//! The two-service example as it is deployed: `kv-server` (the back end) and
//! `gateway-server` (the front end, whose `--backend` alone says how it reaches the back
//! end), each a process of its own on 127.0.0.1 with `--metrics-addr` and
//! `--trace-calls`. A caller's trace id reaches the back end's span; both Prometheus
//! endpoints count exactly the calls made.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use examples::gateway::gateway_client::GatewayClient;
use examples::gateway::{LookupRequest, StoreRequest};
use rdmarpc_core::trace::{TraceContext, TRACEPARENT};
use rdmarpc_core::{Channel, Code, Request};
use rdmarpc_transport::AnyConnection;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16, what: &str) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process, killed when dropped; its stderr goes to a file.
struct Process {
    child: Child,
    log: std::path::PathBuf,
}

impl Process {
    fn start(binary: &str, args: &[String], log: std::path::PathBuf) -> Process {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("RPC_CLIENT_DNS_SCHEME")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Process { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` of the exporter on `port`.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

/// The value of counter `name` whose labels include every one of `labels`.
fn counter(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_crosses_both_services_and_metrics_count_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let (kv_port, kv_metrics) = (free_port(), free_port());
    let (gw_port, gw_metrics) = (free_port(), free_port());
    let kv = Process::start(
        env!("CARGO_BIN_EXE_kv-server"),
        &[
            "--addr".into(),
            format!("tcp://127.0.0.1:{kv_port}"),
            "--metrics-addr".into(),
            format!("127.0.0.1:{kv_metrics}"),
            "--trace-calls".into(),
        ],
        dir.path().join("kv.log"),
    );
    let gateway = Process::start(
        env!("CARGO_BIN_EXE_gateway-server"),
        &[
            "--addr".into(),
            format!("tcp://127.0.0.1:{gw_port}"),
            // Configuration alone chooses the transport to the back end.
            "--backend".into(),
            format!("tcp://127.0.0.1:{kv_port}"),
            "--metrics-addr".into(),
            format!("127.0.0.1:{gw_metrics}"),
            "--trace-calls".into(),
        ],
        dir.path().join("gateway.log"),
    );
    for (port, what) in [
        (kv_port, "kv-server"),
        (kv_metrics, "kv-server's metrics"),
        (gw_port, "gateway-server"),
        (gw_metrics, "gateway-server's metrics"),
    ] {
        wait_for_port(port, what);
    }

    let channel = Channel::<AnyConnection>::connect(&format!("tcp://127.0.0.1:{gw_port}"))
        .await
        .unwrap();
    let client = GatewayClient::new(channel);
    for i in 0..3 {
        client
            .store(StoreRequest {
                key: format!("k{i}"),
                value: vec![i as u8; 8].into(),
            })
            .await
            .unwrap();
    }
    // The caller's own trace, on one lookup.
    let trace = TraceContext::new_root();
    let mut traced = Request::new(LookupRequest { key: "k1".into() });
    traced
        .metadata_mut()
        .insert(TRACEPARENT, trace.to_traceparent());
    let reply = client.lookup(traced).await.unwrap().into_inner();
    assert_eq!(&reply.value[..], &[1u8; 8]);
    for i in 0..5 {
        let reply = client
            .lookup(LookupRequest {
                key: format!("k{}", i % 3),
            })
            .await
            .unwrap();
        assert_eq!(reply.into_inner().value.len(), 8);
    }
    let missing = client
        .lookup(LookupRequest { key: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    // The back end's span of the traced lookup carries the caller's trace id.
    let trace_id = trace.trace_id_hex();
    let start = Instant::now();
    loop {
        let log = kv.log();
        let line = log
            .lines()
            .find(|l| l.contains(&trace_id) && l.contains("rpc.server"));
        if let Some(line) = line {
            assert!(line.contains("/kv.Kv/Get"), "{line}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "trace {trace_id} not in the back end's spans:\n{log}\n--- gateway:\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...and the gateway's own span and its client span of that call too.
    let gateway_log = gateway.log();
    assert!(
        gateway_log
            .lines()
            .any(|l| l.contains(&trace_id) && l.contains("/gateway.Gateway/Lookup")),
        "{gateway_log}"
    );

    // Per-method counts, exactly the calls made: 3 stores, 6 lookups found, 1 not.
    let front = scrape(gw_metrics);
    let served = |text: &str, service: &str, method: &str, code: &str| {
        counter(
            text,
            "rpc_server_handled_total",
            &[("service", service), ("method", method), ("code", code)],
        )
    };
    assert_eq!(
        served(&front, "gateway.Gateway", "Store", "OK"),
        3,
        "{front}"
    );
    assert_eq!(
        served(&front, "gateway.Gateway", "Lookup", "OK"),
        6,
        "{front}"
    );
    assert_eq!(served(&front, "gateway.Gateway", "Lookup", "NOT_FOUND"), 1);
    let called = |method: &str, code: &str| {
        counter(
            &front,
            "rpc_client_handled_total",
            &[("service", "kv.Kv"), ("method", method), ("code", code)],
        )
    };
    assert_eq!(called("Put", "OK"), 3);
    assert_eq!(called("Get", "OK"), 6);
    assert_eq!(called("Get", "NOT_FOUND"), 1);
    let back = scrape(kv_metrics);
    assert_eq!(served(&back, "kv.Kv", "Put", "OK"), 3, "{back}");
    assert_eq!(served(&back, "kv.Kv", "Get", "OK"), 6, "{back}");
    assert_eq!(served(&back, "kv.Kv", "Get", "NOT_FOUND"), 1);
    assert_eq!(
        counter(
            &back,
            "rpc_server_started_total",
            &[("service", "kv.Kv"), ("method", "Get")]
        ),
        7
    );
    // Latencies as histograms: every call in the +Inf bucket.
    assert_eq!(
        counter(
            &back,
            "rpc_server_handling_seconds_bucket",
            &[("service", "kv.Kv"), ("method", "Get"), ("le", "+Inf")]
        ),
        7,
        "{back}"
    );
    if std::env::var_os("SHOW_LOGS").is_some() {
        eprintln!("{}\n---\n{}\n---\n{front}", kv.log(), gateway.log());
    }
}
