//! Every flag of ghz's command line (each `kingpin.Flag` of its `cmd/ghz/main.go`, long
//! and short forms) is accepted by rpc-load's parser with ghz's meaning: each is parsed
//! by the real parser and the setting it makes is checked. Then ghz's defaults, the
//! binary on a few, and `--config` files in JSON, TOML and YAML.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rdmarpc_load::cli::{Args, Format, LbStrategy, LoadSchedule};
use rdmarpc_load::runner::DurationStop;

fn parse(flags: &[&str]) -> Args {
    let mut argv = vec!["rpc-load"];
    argv.extend_from_slice(flags);
    argv.push("127.0.0.1:50051");
    Args::from_argv(argv).unwrap_or_else(|e| panic!("{flags:?}: {e:#}"))
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

type Check = fn(&Args) -> bool;

/// A config file (in the build's temporary directory, written once) that sets -n 7.
fn config_giving_total() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("ghz-flags-config-{}.json", std::process::id()));
        std::fs::write(&path, r#"{"total": 7}"#).unwrap();
        path.display().to_string()
    })
}

/// ghz's flags, each with the arguments that set it and what it must then mean.
fn ghz_flags() -> Vec<(&'static str, Vec<&'static str>, Check)> {
    vec![
        // A file giving -n (more in the config tests below).
        ("config", vec!["--config", config_giving_total()], |a| {
            a.config.is_some() && a.plan().unwrap().total == Some(7)
        }),
        ("proto", vec!["--proto", "a.proto"], |a| {
            a.proto.proto == Some(PathBuf::from("a.proto"))
        }),
        ("protoset", vec!["--protoset", "b.protoset"], |a| {
            a.proto.protoset == Some(PathBuf::from("b.protoset"))
        }),
        ("call", vec!["--call", "helloworld.Greeter.SayHello"], |a| {
            a.call().unwrap() == "helloworld.Greeter.SayHello"
        }),
        ("import-paths", vec!["--import-paths", "x,y"], |a| {
            a.proto.import_paths == [PathBuf::from("x"), PathBuf::from("y")]
        }),
        ("i", vec!["-i", "x,y"], |a| a.proto.import_paths.len() == 2),
        ("cacert", vec!["--cacert", "ca.pem"], |a| {
            a.security.cacert == Some(PathBuf::from("ca.pem"))
        }),
        ("cert", vec!["--cert", "c.pem", "--key", "c.key"], |a| {
            a.security.cert == Some(PathBuf::from("c.pem"))
        }),
        ("key", vec!["--key", "c.key", "--cert", "c.pem"], |a| {
            a.security.key == Some(PathBuf::from("c.key"))
        }),
        ("cname", vec!["--cname", "example.test"], |a| {
            a.security.cname.as_deref() == Some("example.test")
        }),
        ("skipTLS", vec!["--skipTLS"], |a| a.security.skip_tls),
        ("insecure", vec!["--insecure"], |a| a.security.insecure),
        ("authority", vec!["--authority", "svc.test"], |a| {
            a.security.authority.as_deref() == Some("svc.test")
        }),
        ("async", vec!["--async"], |a| {
            a.load.async_calls && a.plan().unwrap().max_in_flight.is_some()
        }),
        ("rps", vec!["--rps", "100"], |a| a.load.rps == 100),
        ("r", vec!["-r", "100"], |a| a.load.rps == 100),
        (
            "load-schedule",
            vec![
                "--load-schedule",
                "line",
                "--load-start",
                "5",
                "--load-step",
                "2",
            ],
            |a| a.load.load_schedule == LoadSchedule::Line && a.load.schedule().is_ok(),
        ),
        ("load-start", vec!["--load-start", "50"], |a| {
            a.load.load_start == 50
        }),
        ("load-step", vec!["--load-step", "-2"], |a| {
            a.load.load_step == -2
        }),
        ("load-end", vec!["--load-end", "150"], |a| {
            a.load.load_end == 150
        }),
        (
            "load-step-duration",
            vec!["--load-step-duration", "5s"],
            |a| a.load.load_step_duration == Some(secs(5)),
        ),
        (
            "load-max-duration",
            vec!["--load-max-duration", "1m"],
            |a| a.load.load_max_duration == Some(secs(60)),
        ),
        ("concurrency", vec!["--concurrency", "20"], |a| {
            a.load.concurrency == 20
        }),
        ("c", vec!["-c", "20"], |a| {
            a.plan().unwrap().concurrency == 20
        }),
        (
            "concurrency-schedule",
            vec![
                "--concurrency-schedule",
                "step",
                "--concurrency-step-duration",
                "5s",
                "--concurrency-end",
                "10",
            ],
            |a| {
                a.load.concurrency_schedule == LoadSchedule::Step
                    && a.plan().unwrap().concurrency == 10
            },
        ),
        ("concurrency-start", vec!["--concurrency-start", "5"], |a| {
            a.load.concurrency_start == 5
        }),
        ("concurrency-end", vec!["--concurrency-end", "50"], |a| {
            a.load.concurrency_end == 50
        }),
        ("concurrency-step", vec!["--concurrency-step", "-2"], |a| {
            a.load.concurrency_step == -2
        }),
        (
            "concurrency-step-duration",
            vec!["--concurrency-step-duration", "5s"],
            |a| a.load.concurrency_step_duration == Some(secs(5)),
        ),
        (
            "concurrency-max-duration",
            vec!["--concurrency-max-duration", "30s"],
            |a| a.load.concurrency_max_duration == Some(secs(30)),
        ),
        ("total", vec!["--total", "2000"], |a| {
            a.plan().unwrap().total == Some(2000)
        }),
        ("n", vec!["-n", "2000"], |a| {
            a.plan().unwrap().total == Some(2000)
        }),
        ("timeout", vec!["--timeout", "5s"], |a| {
            a.load.call_timeout() == Some(secs(5))
        }),
        ("t", vec!["-t", "0"], |a| a.load.call_timeout().is_none()),
        // -z: the run's duration, and -n is ignored.
        ("duration", vec!["--duration", "10s", "-n", "5"], |a| {
            let p = a.plan().unwrap();
            p.duration == Some(secs(10)) && p.total.is_none()
        }),
        ("z", vec!["-z", "3m"], |a| {
            a.plan().unwrap().duration == Some(secs(180))
        }),
        // -x: the longest the run may last, with -n respected.
        (
            "max-duration",
            vec!["--max-duration", "10s", "-n", "5"],
            |a| {
                let p = a.plan().unwrap();
                p.duration == Some(secs(10)) && p.total == Some(5)
            },
        ),
        ("x", vec!["-x", "10s"], |a| {
            let p = a.plan().unwrap();
            p.duration == Some(secs(10)) && p.total == Some(200)
        }),
        ("duration-stop", vec!["--duration-stop", "wait"], |a| {
            a.plan().unwrap().duration_stop == DurationStop::Wait
        }),
        ("data", vec!["--data", r#"{"name":"Joe"}"#], |a| {
            a.data.data.as_deref() == Some(r#"{"name":"Joe"}"#)
        }),
        ("d", vec!["-d", "@"], |a| {
            a.data.data.as_deref() == Some("@")
        }),
        ("data-file", vec!["--data-file", "d.json"], |a| {
            a.data.data_file == Some(PathBuf::from("d.json"))
        }),
        ("D", vec!["-D", "d.json"], |a| a.data.data_file.is_some()),
        ("binary", vec!["--binary"], |a| a.data.binary),
        ("b", vec!["-b"], |a| a.data.binary),
        ("binary-file", vec!["--binary-file", "m.bin"], |a| {
            a.data.binary_file == Some(PathBuf::from("m.bin"))
        }),
        ("B", vec!["-B", "m.bin"], |a| {
            a.data.binary_file.is_some() && !a.data.binary
        }),
        ("metadata", vec!["--metadata", r#"{"k":"v"}"#], |a| {
            a.data.metadata.is_some()
        }),
        ("m", vec!["-m", r#"{"k":"v"}"#], |a| {
            a.data.metadata.is_some()
        }),
        ("metadata-file", vec!["--metadata-file", "md.json"], |a| {
            a.data.metadata_file == Some(PathBuf::from("md.json"))
        }),
        ("M", vec!["-M", "md.json"], |a| {
            a.data.metadata_file.is_some()
        }),
        ("stream-interval", vec!["--stream-interval", "100ms"], |a| {
            a.data.stream_options().interval == Some(Duration::from_millis(100))
        }),
        (
            "stream-call-duration",
            vec!["--stream-call-duration", "500ms"],
            |a| a.data.stream_options().call_duration == Some(Duration::from_millis(500)),
        ),
        ("stream-call-count", vec!["--stream-call-count", "5"], |a| {
            a.data.stream_options().call_count == Some(5)
        }),
        (
            "stream-dynamic-messages",
            vec!["--stream-dynamic-messages=true"],
            |a| a.data.stream_dynamic_messages,
        ),
        (
            "reflect-metadata",
            vec!["--reflect-metadata", r#"{"auth":"x"}"#],
            |a| a.proto.reflect_metadata.is_some(),
        ),
        ("output", vec!["--output", "r.json"], |a| {
            a.output.output == Some(PathBuf::from("r.json"))
        }),
        ("o", vec!["-o", "r.json"], |a| a.output.output.is_some()),
        ("format", vec!["--format", "influx-details"], |a| {
            a.output.format == Format::InfluxDetails && a.plan().unwrap().details
        }),
        ("O", vec!["-O", "prometheus"], |a| {
            a.output.format == Format::Prometheus
        }),
        ("skipFirst", vec!["--skipFirst", "5"], |a| {
            a.plan().unwrap().skip_first == 5
        }),
        ("count-errors", vec!["--count-errors"], |a| {
            a.plan().unwrap().count_errors
        }),
        (
            "connections",
            vec!["--connections", "10", "-c", "20"],
            |a| a.plan().unwrap().connections == 10,
        ),
        ("connect-timeout", vec!["--connect-timeout", "3s"], |a| {
            a.connection.connect_timeout == secs(3)
        }),
        ("keepalive", vec!["--keepalive", "1m"], |a| {
            a.connection.keepalive == Some(secs(60))
        }),
        ("name", vec!["--name", "run"], |a| {
            a.output.name.as_deref() == Some("run")
        }),
        ("tags", vec!["--tags", r#"{"env":"staging"}"#], |a| {
            a.output.tags.is_some()
        }),
        ("cpus", vec!["--cpus", "2"], |a| {
            a.connection.cpus == Some(2)
        }),
        ("debug", vec!["--debug", "debug.json"], |a| {
            a.output.debug == Some(PathBuf::from("debug.json"))
        }),
        ("enable-compression", vec!["--enable-compression"], |a| {
            a.connection.enable_compression
        }),
        ("e", vec!["-e"], |a| a.connection.enable_compression),
        ("lb-strategy", vec!["--lb-strategy", "round_robin"], |a| {
            a.connection.lb_strategy == Some(LbStrategy::RoundRobin)
        }),
        (
            "max-recv-message-size",
            vec!["--max-recv-message-size", "4MB"],
            |a| a.connection.message_limits().0 == 4_000_000,
        ),
        (
            "max-send-message-size",
            vec!["--max-send-message-size", "1GiB"],
            |a| a.connection.message_limits().1 == 1 << 30,
        ),
        (
            "disable-template-functions",
            vec!["--disable-template-functions"],
            |a| a.data.disable_template_functions,
        ),
        (
            "disable-template-data",
            vec!["--disable-template-data"],
            |a| a.data.disable_template_data,
        ),
    ]
}

#[test]
fn every_ghz_flag_is_accepted_with_ghzs_meaning() {
    for (flag, argv, check) in ghz_flags() {
        let args = parse(&argv);
        assert!(
            check(&args),
            "--{flag} ({argv:?}) does not mean what it means in ghz"
        );
    }
}

#[test]
fn every_kingpin_flag_of_ghz_is_in_the_list() {
    // The long names of every kingpin.Flag in ghz's cmd/ghz/main.go.
    let ghz = "config proto protoset call import-paths cacert cert key cname skipTLS insecure \
        authority async rps load-schedule load-start load-step load-end load-step-duration \
        load-max-duration concurrency concurrency-schedule concurrency-start concurrency-end \
        concurrency-step concurrency-step-duration concurrency-max-duration total timeout \
        duration max-duration duration-stop data data-file binary binary-file metadata \
        metadata-file stream-interval stream-call-duration stream-call-count \
        stream-dynamic-messages reflect-metadata output format skipFirst count-errors \
        connections connect-timeout keepalive name tags cpus debug enable-compression \
        lb-strategy max-recv-message-size max-send-message-size disable-template-functions \
        disable-template-data";
    let listed: Vec<&str> = ghz_flags().into_iter().map(|(flag, _, _)| flag).collect();
    let command = <Args as clap::CommandFactory>::command();
    for flag in ghz.split_whitespace() {
        assert!(listed.contains(&flag), "--{flag} is not tested");
        assert!(
            command.get_arguments().any(|a| a.get_long() == Some(flag)),
            "--{flag} is not a flag"
        );
    }
    // And their short forms, with -h and -v.
    for short in "i r c n t z x d D b B m M o O e h v".split(' ') {
        let c = short.chars().next().unwrap();
        let known = command.get_arguments().any(|a| a.get_short() == Some(c)) || c == 'h';
        assert!(known, "-{short} is not a flag");
    }
}

#[test]
fn ghz_defaults() {
    let a = parse(&[]);
    let plan = a.plan().unwrap();
    assert_eq!(plan.total, Some(200));
    assert_eq!(plan.concurrency, 50);
    assert_eq!(plan.connections, 1);
    assert_eq!(a.load.call_timeout(), Some(secs(20)));
    assert_eq!(a.connection.connect_timeout, secs(10));
    assert_eq!(plan.duration_stop, DurationStop::Close);
    assert_eq!(a.load.load_schedule, LoadSchedule::Const);
    assert_eq!(a.load.concurrency_schedule, LoadSchedule::Const);
    assert_eq!((a.load.concurrency_start, a.load.concurrency_step), (0, 1));
    assert_eq!(a.output.format, Format::Summary);
    assert!(!a.security.insecure && !a.security.skip_tls && !a.data.binary);
    assert_eq!(a.output.skip_first, 0);
    assert!(plan.max_in_flight.is_none());
    // A bare HOST:PORT is a gRPC server over TLS, or plaintext with --insecure.
    assert_eq!(
        rdmarpc_load::connect::url_of(a.address().unwrap(), false).unwrap(),
        "grpcs://127.0.0.1:50051"
    );
    // Booleans take ghz's =false too.
    assert!(!parse(&["--insecure=false"]).security.insecure);
}

#[test]
fn bad_values_are_refused_with_the_flags_name() {
    for (bad, name) in [
        // -x was --duration-stop's: the error says where that went.
        (&["-x", "wait"][..], "--duration-stop"),
        (&["-z", "10 parsecs"], "--duration"),
        (
            &["--max-recv-message-size", "4 nibbles"],
            "--max-recv-message-size",
        ),
        (&["--insecure=maybe"], "--insecure"),
        (&["--lb-strategy", "random"], "--lb-strategy"),
        (&["-O", "xml"], "--format"),
        (&["--cert", "only-cert.pem"], "--key"),
        (&["--no-such-flag"], "--no-such-flag"),
    ] {
        let mut argv = vec!["rpc-load"];
        argv.extend_from_slice(bad);
        argv.push("h:1");
        let e = match Args::from_argv(argv) {
            Ok(_) => panic!("{bad:?} was accepted"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(name), "{bad:?}: {e}");
    }
}

/// Extreme values are refused with a clear error, not a panic: a duration over Go's
/// largest (it overflowed the clock at the run's start), more calls in flight than a
/// semaphore holds (its constructor panicked).
#[test]
fn extreme_values_are_clear_errors() {
    for (flag, long) in [
        ("-z", "--duration"),
        ("-x", "--max-duration"),
        ("-t", "--timeout"),
        ("--connect-timeout", "--connect-timeout"),
        ("--load-step-duration", "--load-step-duration"),
    ] {
        let argv = ["rpc-load", flag, "2562047788015216h", "h:1"];
        let e = format!("{:#}", Args::from_argv(argv).unwrap_err());
        assert!(
            e.contains("largest duration") && e.contains(long),
            "{flag}: {e}"
        );
    }
    let huge = usize::MAX.to_string();
    let a = parse(&["--async", "--max-in-flight", &huge]);
    let e = format!("{:#}", a.plan().unwrap_err());
    assert!(e.contains("--max-in-flight must be between 1 and"), "{e}");
    let most = rdmarpc_load::cli::MAX_IN_FLIGHT.to_string();
    assert!(parse(&["--async", "--max-in-flight", &most]).plan().is_ok());
    // -c (and with it --connections) and --cpus: not 1e8 tasks or threads.
    let e = format!("{:#}", parse(&["-c", "100000000"]).plan().unwrap_err());
    assert!(e.contains("-c must be between 1 and 100000"), "{e}");
    let most = rdmarpc_load::cli::MAX_WORKERS.to_string();
    assert!(parse(&["-c", &most, "--connections", &most]).plan().is_ok());
    let over = (rdmarpc_load::cli::MAX_WORKERS + 1).to_string();
    let e = format!("{:#}", parse(&["-c", &over]).plan().unwrap_err());
    assert!(e.contains("-c must be"), "{e}");
    for cpus in ["1025", &huge] {
        let argv = ["rpc-load", "--cpus", cpus, "h:1"];
        let e = format!("{:#}", Args::from_argv(argv).unwrap_err());
        assert!(
            e.contains("--cpus") && e.contains("at most 1024"),
            "{cpus}: {e}"
        );
    }
    assert_eq!(parse(&["--cpus", "1024"]).connection.cpus, Some(1024));
}

fn config_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn config_files_in_json_toml_and_yaml_under_ghzs_keys() {
    let dir = tempfile::tempdir().unwrap();
    let json = config_file(
        dir.path(),
        "c.json",
        r#"{"proto": "/p/greeter.proto", "call": "helloworld.Greeter.SayHello", "total": 2000,
            "concurrency": 50, "data": {"name": "Joe"},
            "metadata": {"foo": "bar", "trace_id": "{{.RequestNumber}}"},
            "import-paths": ["/p", "/q"], "max-duration": "10s", "host": "0.0.0.0:50051",
            "insecure": true, "skipFirst": 5, "tags": {"env": "ci"}}"#,
    );
    let toml = config_file(
        dir.path(),
        "c.toml",
        "\"max-duration\" = \"7s\"\ntotal = 5000\nconcurrency = 50\nproto = \"/p/greeter.proto\"\n\
         call = \"helloworld.Greeter.SayHello\"\nhost = \"0.0.0.0:50051\"\ninsecure = true\n\
         [data]\nname = \"Bob {{.TimestampUnix}}\"\n[metadata]\nrn = \"{{.RequestNumber}}\"\n",
    );
    let yaml = config_file(
        dir.path(),
        "c.yaml",
        "insecure: true\nimport-paths:\n- /p\nproto: greeter.proto\ncall: helloworld.Greeter.SayHello\n\
         connections: 3\nkeepalive: 0\ntotal: 1000\nconcurrency: 3\nhost: 127.0.0.1:9000\n\
         duration: 20s\nmax-recv-message-size: 1024mb\ndata:\n  name: Joe\n",
    );
    let a = Args::from_argv(["rpc-load", "--config", &json]).unwrap();
    assert_eq!(a.call().unwrap(), "helloworld.Greeter.SayHello");
    assert_eq!(a.address().unwrap(), "0.0.0.0:50051");
    assert_eq!(a.proto.import_paths.len(), 2);
    assert!(a.security.insecure);
    let plan = a.plan().unwrap();
    assert_eq!(
        (plan.total, plan.duration, plan.skip_first),
        (Some(2000), Some(secs(10)), 5)
    );
    assert_eq!(a.data.data.as_deref(), Some(r#"{"name":"Joe"}"#));
    // The command line wins over the file.
    let a = Args::from_argv([
        "rpc-load", "--config", &json, "-c", "20", "-n", "1000", "h:1",
    ])
    .unwrap();
    assert_eq!(
        (a.load.concurrency, a.plan().unwrap().total),
        (20, Some(1000))
    );
    assert_eq!(a.address().unwrap(), "h:1");
    let a = Args::from_argv(["rpc-load", "--config", &toml]).unwrap();
    assert_eq!(a.plan().unwrap().duration, Some(secs(7)));
    assert!(a
        .data
        .metadata
        .as_deref()
        .unwrap()
        .contains("RequestNumber"));
    let a = Args::from_argv(["rpc-load", "--config", &yaml]).unwrap();
    assert_eq!(a.connection.connections, 3);
    assert_eq!(a.connection.message_limits().0, 1_024_000_000);
    assert_eq!(a.plan().unwrap().duration, Some(secs(20)));
}

/// What one flag requires of another (--cert and --key) holds for the merged settings:
/// either may come from the file and the other from the command line; one alone, from
/// either, is still refused.
#[test]
fn config_and_command_line_complete_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let key = config_file(dir.path(), "key.json", r#"{"key": "c.key"}"#);
    let cert = config_file(dir.path(), "cert.json", r#"{"cert": "c.pem"}"#);
    let none = config_file(dir.path(), "none.json", r#"{"total": 5}"#);
    let a = Args::from_argv(["rpc-load", "--cert", "c.pem", "--config", &key, "h:1"]).unwrap();
    assert_eq!(a.security.cert, Some(PathBuf::from("c.pem")));
    assert_eq!(a.security.key, Some(PathBuf::from("c.key")));
    let a = Args::from_argv(["rpc-load", "--key", "c.key", "--config", &cert, "h:1"]).unwrap();
    assert_eq!(a.security.cert, Some(PathBuf::from("c.pem")));
    for argv in [
        vec!["rpc-load", "--cert", "c.pem", "--config", &none, "h:1"],
        vec!["rpc-load", "--config", &cert, "h:1"],
        vec!["rpc-load", "--cert", "c.pem", "h:1"],
    ] {
        let e = format!("{:#}", Args::from_argv(argv.clone()).unwrap_err());
        assert!(e.contains("--key"), "{argv:?}: {e}");
    }
}

#[test]
fn bad_config_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("unknown.json", r#"{"totl": 5}"#, "unknown key \"totl\""),
        ("value.json", r#"{"total": "many"}"#, "--total"),
        ("kind.json", r#"{"total": [1, 2]}"#, "total"),
        ("syntax.toml", "total = = 5", "TOML"),
        ("list.yaml", "- 1\n- 2\n", "expected a table"),
        ("duration.yaml", "stream-interval: foo\n", "stream-interval"),
        (
            "size.yaml",
            "max-send-message-size: 2000nib\n",
            "max-send-message-size",
        ),
    ];
    for (name, text, expected) in cases {
        let path = config_file(dir.path(), name, text);
        let e = Args::from_argv(["rpc-load", "--config", &path]).unwrap_err();
        let message = format!("{e:#}");
        assert!(message.contains(expected), "{name}: {message}");
        assert!(
            message.contains(name),
            "{name}: the error names the file: {message}"
        );
    }
    let missing = dir.path().join("missing.json").display().to_string();
    assert!(Args::from_argv(["rpc-load", "--config", &missing]).is_err());
}

#[test]
fn the_binary_prints_its_version_and_every_flag_in_its_help() {
    let bin = env!("CARGO_BIN_EXE_rpc-load");
    let version = Command::new(bin).arg("-v").output().unwrap();
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
    let help = Command::new(bin).arg("-h").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--skipTLS",
        "--max-duration",
        "--data-file",
        "--binary-file",
        "--skipFirst",
        "--reflect-metadata",
        "--lb-strategy",
    ] {
        assert!(help.contains(flag), "{flag} missing from -h");
    }
    let bad = Command::new(bin)
        .args(["--rps", "fast", "h:1"])
        .output()
        .unwrap();
    // Status 1 for a usage error, as ghz (kingpin) exits; clap's own is 2.
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--rps"));
}
