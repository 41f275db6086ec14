//! ghz's documented example command lines (its www/docs/examples.md, and the debug and
//! config examples of options.md and example_config.md), run as they are written,
//! adapted only in address (`0.0.0.0:50051` is the test server's port on 127.0.0.1) and
//! where a path is absolute (`/protos/bytes.proto`, `/path/to/greeter.proto`), against
//! this framework's server of the services they call (`examples::ghz`). Examples without
//! `--insecure` talk TLS, as in ghz: to a TLS port, whose test CA is trusted through
//! `SSL_CERT_FILE`. (The prototool example needs prototool, and is left out.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use examples::helloworld::greeter_server::{Greeter, GreeterServer};
use examples::helloworld::{HelloReply, HelloRequest};
use prost::Message as _;
use rdmarpc_core::{Request, Response, ServerConfig, Status, Streaming};
use rdmarpc_transport::{AnyListener, TransportSettings};

/// ghz's examples, verbatim but for the paths noted above.
const EXAMPLES: &[&str] = &[
    // A simple insecure unary call
    r#"ghz --insecure \
  --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Joe"}' \
  0.0.0.0:50051"#,
    // Server reflection
    r#"ghz --insecure \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Joe"}' \
  0.0.0.0:50051"#,
    // Metadata using template variables
    r#"ghz --insecure \
  --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Joe"}' \
  -m '{"trace_id":"{{.RequestNumber}}", "timestamp":"{{.TimestampUnix}}"}' \
  0.0.0.0:50051"#,
    // Binary data
    r#"ghz --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  -B ./hello_request_data.bin \
  0.0.0.0:50051"#,
    // Binary from stdin (the test gives the file on standard input); as written (no
    // -b: standard input is not read), and with -b (see
    // binary_from_stdin_with_b_reaches_the_server for what the server gets)
    r#"ghz --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  0.0.0.0:50051 < ./hello_request_data.bin"#,
    r#"ghz --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello -b \
  0.0.0.0:50051 < ./hello_request_data.bin"#,
    // Binary fields (the script's base64 of favicon.ico is ${data})
    r#"ghz --insecure \
--proto protos/bytes.proto \
--call bytes.ImageService.Save \
-d "{\"name\":\"icon.ico\", \"data\":\"${data}\"}" \
-c 1 -n 1 0.0.0.0:50051"#,
    // Variable data for unary calls
    r#"ghz --insecure \
  --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  -d '[{"name":"Joe"},{"name":"Bob"}]' \
  0.0.0.0:50051"#,
    // Custom parameters
    r#"ghz --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Joe"}' \
  -n 2000 \
  -c 20 \
  0.0.0.0:50051"#,
    r#"ghz --proto ./greeter.proto \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Joe"}' \
  -n 2000 \
  -c 20 \
  --connections=10 \
  0.0.0.0:50051"#,
    r#"ghz --proto ./greeter.proto \
  --call helloworld.Greeter.SayHelloCS \
  -d '[{"name":"Joe"},{"name":"Kate"},{"name":"Sara"}]' \
  0.0.0.0:50051"#,
    // Protoset
    r#"ghz --protoset ./bundle.protoset \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Bob"}' \
  -n 1000 -c 10 \
  0.0.0.0:50051"#,
    // Config file
    r#"ghz --config ./config.json"#,
    r#"ghz --config ./config.json -c 20 -n 1000"#,
    r#"ghz --config ./config.toml"#,
    // The config example of options.md
    r#"ghz --config=./config.json -c 20 -n 1000"#,
    // Debug logging
    r#"ghz --insecure \
  --proto ./protos/greeter.proto \
  --call helloworld.Greeter.SayHello \
  -d '{"name":"Joe"}' -c 5 -n 50 -m '{"request-id":"{{.RequestNumber}}", "timestamp":"{{.TimestampUnix}}"}' \
  --debug ./logs/debug.json \
  0.0.0.0:50051"#,
    // Client streaming
    r#"ghz --insecure \
  --proto ./protos/route_guide.proto \
  --call routeguide.RouteGuide.RecordRoute \
  -d '[{ "latitude": 407838351, "longitude": -746143763 }, { "latitude": 419999544, "longitude": -740371136 }, { "latitude": 419611318, "longitude": -746524769 }, { "latitude": 412144655, "longitude": -743949739 }]' \
  -m '{"trace_id":"{{.RequestNumber}}", "timestamp":"{{.TimestampUnixNano}}"}' \
  0.0.0.0:50051"#,
    // Server streaming
    r#"ghz --insecure \
  --proto ./protos/route_guide.proto \
  --call routeguide.RouteGuide.ListFeatures \
  -d '{"lo":{"latitude":400000000,"longitude":-750000000},"hi":{"latitude":420000000,"longitude":-730000000}}' \
  -m '{"trace_id":"{{.RequestNumber}}", "timestamp":"{{.TimestampUnixNano}}"}' \
  0.0.0.0:50051"#,
    // Well Known Types
    r#"ghz --insecure \
  --proto ./testdata/wrapped.proto \
  --call wrapped.WrappedService.GetMessage \
  -d '"asdf"' \
  0.0.0.0:50051"#,
];

/// ghz's example config files (example_config.md), the proto's path adapted.
const CONFIG_JSON: &str = r#"{
    "proto": "greeter.proto",
    "call": "helloworld.Greeter.SayHello",
    "total": 2000,
    "concurrency": 50,
    "data": {
        "name": "Joe"
    },
    "metadata": {
        "foo": "bar",
        "trace_id": "{{.RequestNumber}}",
        "timestamp": "{{.TimestampUnix}}"
    },
    "import-paths": [
        "/path/to/protos"
    ],
    "max-duration": "10s",
    "host": "0.0.0.0:50051"
}"#;

const CONFIG_TOML: &str = r#""max-duration" = "7s"
total = 5000
concurrency = 50
proto = "./greeter.proto"
call = "helloworld.Greeter.SayHello"
host = "0.0.0.0:50051"
insecure = true
output = "pretty.json"
format = "pretty"

[data]
name = "Bob {{.TimestampUnix}}"

[metadata]
rn = "{{.RequestNumber}}"
"#;

/// Splits a command line as a POSIX shell would (quotes, `\` escapes and line
/// continuations); a `< FILE` redirection is returned apart.
fn shell_words(line: &str) -> (Vec<String>, Option<String>) {
    let (mut words, mut word, mut has_word) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(next) => {
                    word.push(next);
                    has_word = true;
                }
            },
            '\'' => {
                has_word = true;
                for c in chars.by_ref().take_while(|&c| c != '\'') {
                    word.push(c);
                }
            }
            '"' => {
                has_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' if matches!(chars.peek(), Some('"' | '\\' | '$')) => {
                            word.extend(chars.next());
                        }
                        c => word.push(c),
                    }
                }
            }
            c if c.is_whitespace() => {
                if has_word {
                    words.push(std::mem::take(&mut word));
                    has_word = false;
                }
            }
            c => {
                word.push(c);
                has_word = true;
            }
        }
    }
    if has_word {
        words.push(word);
    }
    match words.iter().position(|w| w == "<") {
        Some(i) => {
            let file = words.get(i + 1).cloned();
            words.truncate(i);
            (words, file)
        }
        None => (words, None),
    }
}

/// Serves ghz's example services on 127.0.0.1:0, over TLS with `tls`; returns the port.
async fn start_server(tls: Option<(PathBuf, PathBuf)>) -> u16 {
    let mut settings = TransportSettings::default();
    let url = match tls {
        Some((cert, key)) => {
            settings.tls.identity(cert, key);
            "tcp+tls://127.0.0.1:0"
        }
        None => "tcp://127.0.0.1:0",
    };
    let listener = AnyListener::bind(&url.parse().unwrap(), &settings)
        .await
        .unwrap();
    let port = listener.port();
    let (server, reporter) = examples::ghz::ghz_server(ServerConfig::default()).unwrap();
    tokio::spawn(async move {
        let _reporter = reporter;
        server.serve(listener).await
    });
    port
}

/// The working directory of the examples: their protos, data, protoset and configs.
fn workdir(dir: &Path) {
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
    for sub in ["protos", "testdata", "logs"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let copy = |from: &str, to: &str| std::fs::copy(proto.join(from), dir.join(to)).unwrap();
    copy("greeter.proto", "greeter.proto");
    copy("greeter.proto", "protos/greeter.proto");
    copy("route_guide.proto", "protos/route_guide.proto");
    copy("bytes.proto", "protos/bytes.proto");
    copy("wrapped.proto", "testdata/wrapped.proto");
    let hello = examples::helloworld::HelloRequest { name: "Bob".into() };
    std::fs::write(dir.join("hello_request_data.bin"), hello.encode_to_vec()).unwrap();
    // protoc --descriptor_set_out=bundle.protoset greeter.proto, by protox.
    let set = protox::compile([dir.join("greeter.proto")], [dir]).unwrap();
    std::fs::write(dir.join("bundle.protoset"), set.encode_to_vec()).unwrap();
    std::fs::write(dir.join("config.json"), CONFIG_JSON).unwrap();
    std::fs::write(dir.join("config.toml"), CONFIG_TOML).unwrap();
}

async fn run(dir: PathBuf, argv: Vec<String>, stdin: Option<String>, ca: PathBuf) -> Output {
    tokio::task::spawn_blocking(move || {
        let input = match stdin {
            Some(file) => Stdio::from(std::fs::File::open(dir.join(file)).unwrap()),
            None => Stdio::null(),
        };
        Command::new(env!("CARGO_BIN_EXE_rpc-load"))
            .args(&argv[1..])
            .current_dir(&dir)
            .env("SSL_CERT_FILE", ca)
            .env_remove("SSL_CERT_DIR")
            .stdin(input)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghz_documented_examples_run() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    test_certs::write_set(&certs).unwrap();
    let tls = start_server(Some((certs.join("server.pem"), certs.join("server.key")))).await;
    let plain = start_server(None).await;
    workdir(dir.path());
    // The TOML config has insecure = true; the JSON one talks TLS.
    let tls_configs = |text: &str| text.replace("0.0.0.0:50051", &format!("127.0.0.1:{tls}"));
    let json = tls_configs(CONFIG_JSON);
    std::fs::write(dir.path().join("config.json"), json).unwrap();
    let toml = CONFIG_TOML.replace("0.0.0.0:50051", &format!("127.0.0.1:{plain}"));
    std::fs::write(dir.path().join("config.toml"), toml).unwrap();
    let favicon: Vec<u8> = (0..=255u8).cycle().take(1150).collect();
    let data = base64::engine::general_purpose::STANDARD.encode(favicon);

    for example in EXAMPLES {
        let port = if example.contains("--insecure") {
            plain
        } else {
            tls
        };
        let line = example
            .replace("0.0.0.0:50051", &format!("127.0.0.1:{port}"))
            .replace("${data}", &data);
        let (argv, stdin) = shell_words(&line);
        assert_eq!(argv[0], "ghz");
        let out = run(dir.path().to_owned(), argv, stdin, certs.join("ca.pem")).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{example}\nfailed: {stderr}");
        let report = if example.contains("config.toml") {
            std::fs::read_to_string(dir.path().join("pretty.json")).unwrap()
        } else {
            stdout.to_string()
        };
        assert!(
            report.contains("[OK]") || report.contains("\"OK\""),
            "{example}\nno OK calls:\n{report}\n{stderr}"
        );
        assert!(
            !report.contains("Error distribution") && !report.contains("rpc error"),
            "{example}\nfailed calls:\n{report}"
        );
    }
    let debug = std::fs::read_to_string(dir.path().join("logs/debug.json")).unwrap();
    let lines: Vec<serde_json::Value> = debug
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.len() >= 50,
        "a debug line per call at least: {}",
        lines.len()
    );
    let pretty: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("pretty.json")).unwrap())
            .unwrap();
    assert_eq!(pretty["options"]["insecure"], true);
    assert_eq!(pretty["count"], 5000);
}

#[test]
fn shell_words_split_as_a_shell_does() {
    let (words, stdin) = shell_words("a 'b c' \"d \\\"e\\\"\" f\\\n  g < in.bin");
    assert_eq!(words, ["a", "b c", "d \"e\"", "f", "g"]);
    assert_eq!(stdin.as_deref(), Some("in.bin"));
}

/// The names a greeter was called with.
#[derive(Clone, Default)]
struct Names(std::sync::Arc<parking_lot::Mutex<Vec<String>>>);

impl Greeter for Names {
    type SayHellosStream = rdmarpc_core::BoxStream<HelloReply>;
    type SayHelloBidiStream = rdmarpc_core::BoxStream<HelloReply>;

    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.0.lock().push(request.into_inner().name);
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

/// ghz's "Binary from stdin" line with `-b`, which says the binary data is on standard
/// input: the server gets the message of the file (name "Bob"), every call. (Without
/// `-b`, as the docs' line is, standard input is not read and the name is empty.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_from_stdin_with_b_reaches_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    test_certs::write_set(&certs).unwrap();
    workdir(dir.path());
    for (b, expected) in [(true, "Bob"), (false, "")] {
        let mut settings = TransportSettings::default();
        settings
            .tls
            .identity(certs.join("server.pem"), certs.join("server.key"));
        let listener = AnyListener::bind(&"tcp+tls://127.0.0.1:0".parse().unwrap(), &settings)
            .await
            .unwrap();
        let port = listener.port();
        let names = Names::default();
        let server = rdmarpc_core::Server::builder()
            .add_service(GreeterServer::new(names.clone()))
            .unwrap()
            .build();
        tokio::spawn(async move { server.serve(listener).await });
        let b = if b { "-b " } else { "" };
        let line = format!(
            "ghz --proto ./greeter.proto --call helloworld.Greeter.SayHello {b}\
             127.0.0.1:{port} < ./hello_request_data.bin"
        );
        let (argv, stdin) = shell_words(&line);
        let out = run(dir.path().to_owned(), argv, stdin, certs.join("ca.pem")).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{line}\nfailed: {stderr}");
        let names = names.0.lock().clone();
        assert_eq!(names.len(), 200, "{line}: ghz's default -n");
        assert!(names.iter().all(|n| n == expected), "{line}: {names:?}");
    }
}
