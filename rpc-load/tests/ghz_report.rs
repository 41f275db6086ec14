//! The report as ghz writes it: every field of ghz's JSON report (its `runner.Report`)
//! with ghz's name and JSON type, `details` per call, `tags`; and the flags that shape
//! what is counted: `--skipFirst`, `--async`, `-b`; and the influx and prometheus
//! formats' lines.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::*;
use examples::helloworld::greeter_server::{Greeter, GreeterServer};
use examples::helloworld::{HelloReply, HelloRequest};
use prost::Message as _;
use rdmarpc_core::{Request, Response, Status, Streaming};
use rdmarpc_load::app;
use rdmarpc_load::cli::Args;
use rdmarpc_transport::{AnyListener, TransportSettings};
use serde_json::Value;

/// A JSON type check.
type Kind = fn(&Value) -> bool;

async fn run(argv: &[&str]) -> rdmarpc_load::report::Report {
    let mut all = vec!["rpc-load"];
    all.extend_from_slice(argv);
    app::run(&Args::from_argv(all).unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_report_has_every_field_of_ghzs_with_its_type() {
    let url = start_rpc_server().await;
    let proto = proto_dir().join("echo.proto").display().to_string();
    // One call in four fails, so that errors show in the distributions and details.
    let data = r#"[{"payload":"aGk="},{"payload":"aGk="},{"payload":"aGk="},{"failCode":5}]"#;
    let report = run(&[
        "--proto",
        &proto,
        "--call",
        "echo.Echo.Echo",
        "-d",
        data,
        "-n",
        "40",
        "-c",
        "2",
        "--name",
        "typed",
        "--tags",
        r#"{"env":"ci","by":"test"}"#,
        "-O",
        "json",
        &url,
    ])
    .await;
    let json: Value = serde_json::to_value(&report).unwrap();
    let is_int = |v: &Value| v.is_u64() || v.is_i64();
    let kinds: [(&str, Kind); 16] = [
        ("name", Value::is_string),
        ("endReason", Value::is_string),
        ("date", Value::is_string),
        ("options", Value::is_object),
        ("count", Value::is_u64),
        ("total", Value::is_u64),
        ("average", Value::is_u64),
        ("fastest", Value::is_u64),
        ("slowest", Value::is_u64),
        ("rps", Value::is_number),
        ("errorDistribution", Value::is_object),
        ("statusCodeDistribution", Value::is_object),
        ("latencyDistribution", Value::is_array),
        ("histogram", Value::is_array),
        ("details", Value::is_array),
        ("tags", Value::is_object),
    ];
    for (key, kind) in kinds {
        assert!(kind(&json[key]), "{key}: {}", json[key]);
    }
    assert_eq!(json["tags"], serde_json::json!({"env": "ci", "by": "test"}));
    assert_eq!(
        json["errorDistribution"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        10
    );
    assert_eq!(json["statusCodeDistribution"]["NotFound"], 10);
    for point in json["latencyDistribution"].as_array().unwrap() {
        assert!(
            is_int(&point["percentage"]) && is_int(&point["latency"]),
            "{point}"
        );
    }
    for bucket in json["histogram"].as_array().unwrap() {
        assert!(
            bucket["mark"].is_number()
                && is_int(&bucket["count"])
                && bucket["frequency"].is_number()
        );
    }
    let details = json["details"].as_array().unwrap();
    assert_eq!(details.len(), 40);
    let mut statuses = BTreeSet::new();
    for d in details {
        let keys: BTreeSet<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["timestamp", "latency", "error", "status"])
        );
        assert!(d["timestamp"].as_str().unwrap().contains('T') && is_int(&d["latency"]));
        statuses.insert(d["status"].as_str().unwrap().to_owned());
        match d["status"].as_str().unwrap() {
            "OK" => assert_eq!(d["error"], ""),
            _ => assert!(d["error"]
                .as_str()
                .unwrap()
                .starts_with("rpc error: code = NotFound")),
        }
    }
    assert_eq!(
        statuses,
        BTreeSet::from(["NotFound".to_owned(), "OK".to_owned()])
    );
    let options = &json["options"];
    for (key, kind) in [
        ("call", Value::is_string as Kind),
        ("host", Value::is_string),
        ("proto", Value::is_string),
        ("import-paths", Value::is_array),
        ("insecure", Value::is_boolean),
        ("load-schedule", Value::is_string),
        ("load-start", Value::is_u64),
        ("load-end", Value::is_u64),
        ("load-step", Value::is_i64),
        ("load-step-duration", Value::is_u64),
        ("load-max-duration", Value::is_u64),
        ("concurrency", Value::is_u64),
        ("concurrency-schedule", Value::is_string),
        ("concurrency-start", Value::is_u64),
        ("concurrency-end", Value::is_u64),
        ("concurrency-step", Value::is_i64),
        ("concurrency-step-duration", Value::is_u64),
        ("concurrency-max-duration", Value::is_u64),
        ("total", Value::is_u64),
        ("connections", Value::is_u64),
        ("timeout", Value::is_u64),
        ("dial-timeout", Value::is_u64),
        ("data", Value::is_array),
        ("binary", Value::is_boolean),
        ("CPUs", Value::is_u64),
        ("name", Value::is_string),
    ] {
        assert!(kind(&options[key]), "options.{key}: {}", options[key]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_first_leaves_the_first_results_out() {
    let url = start_rpc_server().await;
    let proto = proto_dir().join("echo.proto").display().to_string();
    let report = run(&[
        "--proto",
        &proto,
        "--call",
        "echo.Echo/Echo",
        "-n",
        "20",
        "-c",
        "2",
        "--skipFirst",
        "5",
        "-O",
        "json",
        &url,
    ])
    .await;
    assert_eq!(
        (report.count, report.sent, report.details.calls.len()),
        (15, 20, 15)
    );
}

/// A greeter whose calls wait until `calls` of them are in flight at once (then all
/// answer), and that records the names it is sent.
#[derive(Debug)]
struct Gathering {
    barrier: tokio::sync::Barrier,
    names: parking_lot::Mutex<BTreeSet<String>>,
    /// The `trace_id` metadata of the calls.
    traces: parking_lot::Mutex<BTreeSet<String>>,
}

#[derive(Debug, Clone)]
struct GatheringGreeter(Arc<Gathering>);

impl Greeter for GatheringGreeter {
    type SayHellosStream = rdmarpc_core::BoxStream<HelloReply>;
    type SayHelloBidiStream = rdmarpc_core::BoxStream<HelloReply>;

    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        if let Some(trace) = request.metadata().get("trace_id") {
            self.0.traces.lock().insert(trace.to_owned());
        }
        self.0.names.lock().insert(request.into_inner().name);
        self.0.barrier.wait().await;
        Ok(Response::new(HelloReply::default()))
    }

    async fn say_hello_cs(
        &self,
        _: Request<Streaming<HelloRequest>>,
    ) -> Result<Response<HelloReply>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn say_hellos(
        &self,
        _: Request<HelloRequest>,
    ) -> Result<Response<Self::SayHellosStream>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn say_hello_bidi(
        &self,
        _: Request<Streaming<HelloRequest>>,
    ) -> Result<Response<Self::SayHelloBidiStream>, Status> {
        Err(Status::unimplemented("not here"))
    }
}

async fn start_gathering(calls: usize) -> (Arc<Gathering>, u16) {
    let gathering = Arc::new(Gathering {
        barrier: tokio::sync::Barrier::new(calls),
        names: Default::default(),
        traces: Default::default(),
    });
    let server = rdmarpc_core::Server::builder()
        .add_service(GreeterServer::new(GatheringGreeter(gathering.clone())))
        .unwrap()
        .build();
    let listener = AnyListener::bind(
        &"tcp://127.0.0.1:0".parse().unwrap(),
        &TransportSettings::default(),
    )
    .await
    .unwrap();
    let port = listener.port();
    tokio::spawn(async move { server.serve(listener).await });
    (gathering, port)
}

/// With --async, one worker has all its calls in flight at once: ten calls that each
/// wait for all ten to arrive all succeed. Without it, the first would wait alone until
/// its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_calls_do_not_wait_for_the_previous_one() {
    let (_, port) = start_gathering(10).await;
    let proto = proto_dir().join("greeter.proto").display().to_string();
    let host = format!("127.0.0.1:{port}");
    let base = [
        "--insecure",
        "--proto",
        &proto,
        "--call",
        "helloworld.Greeter.SayHello",
        "-c",
        "1",
        "-n",
        "10",
        "-t",
        "5s",
    ];
    let mut with_async = base.to_vec();
    with_async.extend(["--async", &host]);
    let report = run(&with_async).await;
    assert_eq!(
        (report.count, report.errors),
        (10, 0),
        "{:?}",
        report.error_distribution
    );
    // --max-in-flight bounds them: with room for 5, the first five cannot gather ten
    // and time out.
    let (_, port) = start_gathering(10).await;
    let host = format!("127.0.0.1:{port}");
    let mut bounded = base.to_vec();
    let last = bounded.len() - 1;
    bounded[last] = "1s";
    bounded.extend(["--async", "--max-in-flight", "5", &host]);
    let report = run(&bounded).await;
    let timed_out = report.status_code_distribution.get("DeadlineExceeded");
    assert!(
        timed_out.is_some_and(|&n| n >= 5),
        "{:?}",
        report.status_code_distribution
    );
}

/// -b: the messages come on standard input, count-prefixed, and are sent round-robin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_messages_from_stdin() {
    let (gathering, port) = start_gathering(1).await;
    let mut input = Vec::new();
    for name in ["Ann", "Bob", "Cid"] {
        HelloRequest { name: name.into() }
            .encode_length_delimited(&mut input)
            .unwrap();
    }
    let proto = proto_dir().join("greeter.proto").display().to_string();
    let host = format!("127.0.0.1:{port}");
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rpc-load"))
            .args([
                "--insecure",
                "--proto",
                &proto,
                "--call",
                "helloworld.Greeter.SayHello",
                "-b",
                "-n",
                "6",
                "-c",
                "1",
                &host,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&input).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = gathering.names.lock().clone();
    assert_eq!(
        names,
        BTreeSet::from(["Ann".into(), "Bob".into(), "Cid".into()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_and_prometheus_lines_as_ghz_writes_them() {
    let url = start_rpc_server().await;
    let proto = proto_dir().join("echo.proto").display().to_string();
    let report = run(&[
        "--proto",
        &proto,
        "--call",
        "echo.Echo.Echo",
        "-n",
        "10",
        "-c",
        "1",
        "--name",
        "a run",
        "--tags",
        r#"{"env":"ci"}"#,
        "-O",
        "influx-details",
        &url,
    ])
    .await;
    let summary = report.to_influx_summary();
    assert!(!summary.contains('\n'), "one line, as ghz: {summary}");
    // The first space not escaped ends the tags.
    let at = summary
        .char_indices()
        .find(|&(i, c)| c == ' ' && !summary[..i].ends_with('\\'))
        .unwrap()
        .0;
    let (head, rest) = (&summary[..at], &summary[at + 1..]);
    assert!(
        head.starts_with(r#"ghz_run,name="a\ run",proto=""#),
        "{head}"
    );
    for tag in [
        ",call=\"echo.Echo.Echo\"",
        ",n=10,c=1,rps=0,z=0,timeout=20,dial_timeout=10,keepalive=0,",
        r#",tags="{\"env\":\"ci\"}""#,
        ",errors=0,has_errors=false",
    ] {
        assert!(head.contains(tag), "{tag} in {head}");
    }
    let (fields, timestamp) = rest.split_once(' ').unwrap();
    assert!(
        fields.starts_with("count=10,total=")
            && fields.contains(",median=")
            && fields.ends_with(",errors=0"),
        "{fields}"
    );
    assert!(timestamp.parse::<u64>().unwrap() > 1_500_000_000_000_000_000);
    let details = report.to_influx_details();
    assert_eq!(details.lines().count(), 10);
    assert!(details.lines().all(|l| l.starts_with("ghz_detail,")
        && l.contains(",hasError=false latency=")
        && l.contains(",error=\"\",status=\"OK\" ")));
    let prometheus = report.to_prometheus();
    for family in [
        "ghz_run_count gauge",
        "ghz_run_total gauge",
        "ghz_run_average gauge",
        "ghz_run_fastest gauge",
        "ghz_run_slowest gauge",
        "ghz_run_rps gauge",
        "ghz_run_histogram histogram",
        "ghz_run_latency summary",
        "ghz_run_errors gauge",
    ] {
        assert!(
            prometheus.contains(&format!("# TYPE {family}\n")),
            "{family}"
        );
    }
    assert!(
        prometheus.contains(r#"name="a run""#) && prometheus.contains(r#"end_reason="normal""#)
    );
    assert!(
        prometheus.contains(r#",le="+Inf"} 10"#) && prometheus.contains(r#",quantile="0.5"} "#)
    );
    assert!(prometheus
        .lines()
        .any(|l| l.starts_with("ghz_run_count{") && l.ends_with("} 10")));
}

/// `-m` with template actions is rendered for every call, as ghz does; with
/// `--disable-template-data` it is sent as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_templates_are_rendered_per_call() {
    let proto = proto_dir().join("greeter.proto").display().to_string();
    for (flags, expected) in [
        (
            &[][..],
            BTreeSet::from(["0".to_owned(), "1".into(), "2".into()]),
        ),
        (
            &["--disable-template-data"],
            BTreeSet::from(["{{.RequestNumber}}".to_owned()]),
        ),
    ] {
        let (gathering, port) = start_gathering(1).await;
        let host = format!("127.0.0.1:{port}");
        let mut argv = vec![
            "--insecure",
            "--proto",
            &proto,
            "--call",
            "helloworld.Greeter.SayHello",
            "-n",
            "3",
            "-c",
            "1",
        ];
        argv.extend_from_slice(flags);
        argv.extend(["-m", r#"{"trace_id":"{{.RequestNumber}}"}"#, &host]);
        let report = run(&argv).await;
        assert_eq!(report.errors, 0);
        assert_eq!(*gathering.traces.lock(), expected, "{flags:?}");
        // The report records the metadata as given (the template), as ghz does.
        let template = "{{.RequestNumber}}";
        assert_eq!(
            report.options.metadata.get("trace_id").map(String::as_str),
            Some(template),
            "{flags:?}"
        );
        let influx = report.to_influx_summary();
        assert!(influx.contains("RequestNumber"), "{flags:?}: {influx}");
    }
}

/// Files that cannot be read fail the run before it starts, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_files_are_clear_errors() {
    let proto = proto_dir().join("greeter.proto").display().to_string();
    for flag in ["-D", "-M", "-B", "--tags"] {
        let missing = "/nonexistent/rpc-load-input";
        let value = if flag == "--tags" {
            "{not json"
        } else {
            missing
        };
        let mut argv = vec![
            "rpc-load",
            "--insecure",
            "--proto",
            &proto,
            "--call",
            "helloworld.Greeter.SayHello",
        ];
        argv.extend([flag, value, "127.0.0.1:1"]);
        let e = app::run(&Args::from_argv(argv).unwrap()).await.unwrap_err();
        let message = format!("{e:#}");
        let named = if flag == "--tags" { "--tags" } else { missing };
        assert!(message.contains(named), "{flag}: {message}");
    }
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rpc-load"))
            .args([
                "--insecure",
                "--call",
                "a.B/C",
                "--debug",
                "/nonexistent/dir/debug.json",
                "127.0.0.1:1",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("debug log"));
}

/// -e gzips requests: tonic's echo server, which takes no gzip, refuses them (and takes
/// the same requests without -e), through this framework's client and tonic's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_compression_gzips_requests() {
    let server =
        grpc_interop::echo::GrpcEchoServer::bind(([127, 0, 0, 1], 0).into(), 1 << 20).unwrap();
    let host = server.local_addr().unwrap().to_string();
    tokio::spawn(server.serve(std::future::pending()));
    let proto = proto_dir().join("echo.proto").display().to_string();
    for client in ["rpc", "tonic"] {
        let base = [
            "--insecure",
            "--grpc-client",
            client,
            "--proto",
            &proto,
            "--call",
            "echo.Echo/Echo",
            "--payload-size",
            "4096",
            "-n",
            "4",
            "-c",
            "1",
        ];
        let mut plain = base.to_vec();
        plain.push(&host);
        assert_eq!(run(&plain).await.errors, 0, "{client}");
        let mut gzip = base.to_vec();
        gzip.extend(["-e", &host]);
        let report = run(&gzip).await;
        assert_eq!(
            report.errors, 4,
            "{client}: {:?}",
            report.status_code_distribution
        );
        assert!(
            report
                .status_code_distribution
                .contains_key("Unimplemented"),
            "{client}: {:?}",
            report.error_distribution
        );
    }
}

/// -d @: the JSON data comes on standard input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_data_from_stdin() {
    let (gathering, port) = start_gathering(1).await;
    let proto = proto_dir().join("greeter.proto").display().to_string();
    let host = format!("127.0.0.1:{port}");
    let out = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rpc-load"))
            .args([
                "--insecure",
                "--proto",
                &proto,
                "--call",
                "helloworld.Greeter.SayHello",
                "-d",
                "@",
                "-n",
                "4",
                "-c",
                "1",
                &host,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(br#"[{"name":"Dee"},{"name":"Eve"}]"#)
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        *gathering.names.lock(),
        BTreeSet::from(["Dee".into(), "Eve".into()])
    );
}
