//! ghz's TLS flags against a TLS server: a bare HOST:PORT is TLS, verified against the
//! system's roots (which do not hold the test CA), `--cacert`, `--cname` (the name
//! checked, and sent), `--skipTLS`, and `--cert`/`--key` for a server that requires a
//! client certificate; `--insecure` against the TLS port fails, as plaintext would.

use std::path::{Path, PathBuf};

use rdmarpc_core::ServerConfig;
use rdmarpc_load::app;
use rdmarpc_load::cli::Args;
use rdmarpc_transport::{AnyListener, ClientAuth, TransportSettings};

/// ghz's example services over TLS with the server certificate of `certs`, asking
/// clients for certificates signed by its CA when `mutual`; returns the port.
async fn start_tls_server(certs: &Path, mutual: bool) -> u16 {
    let mut settings = TransportSettings::default();
    settings
        .tls
        .identity(certs.join("server.pem"), certs.join("server.key"));
    if mutual {
        settings
            .tls
            .ca(certs.join("ca.pem"))
            .client_auth(ClientAuth::Required);
    }
    let listener = AnyListener::bind(&"tcp+tls://127.0.0.1:0".parse().unwrap(), &settings)
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

async fn say_hello(flags: &[&str], host: &str) -> anyhow::Result<rdmarpc_load::report::Report> {
    let proto = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto/greeter.proto");
    let proto = proto.display().to_string();
    let mut argv = vec![
        "rpc-load",
        "--proto",
        &proto,
        "--call",
        "helloworld.Greeter.SayHello",
        "-n",
        "5",
        "-c",
        "1",
        "--connect-timeout",
        "3s",
    ];
    argv.extend_from_slice(flags);
    argv.push(host);
    app::run(&Args::from_argv(argv)?).await
}

/// What a failed TLS handshake says.
const CERTIFICATE: &[&str] = &["certificate", "handshake"];

/// What plaintext to a TLS port ends in: the server drops the connection.
const PLAINTEXT: &[&str] = &["connection reset", "broken pipe", "eof", "closed"];

fn ok(result: anyhow::Result<rdmarpc_load::report::Report>, what: &str) {
    let report = result.unwrap_or_else(|e| panic!("{what}: {e:#}"));
    assert_eq!(
        (report.count, report.errors),
        (5, 0),
        "{what}: {:?}",
        report.error_distribution
    );
}

/// The run fails for the reason `expected` names (any of its words, in any case): as a
/// whole, or call by call (at least one call, and every call).
fn fails(result: anyhow::Result<rdmarpc_load::report::Report>, what: &str, expected: &[&str]) {
    let text = match result {
        Err(e) => format!("{e:#}"),
        Ok(report) => {
            assert!(report.count > 0, "{what}: no call made");
            assert_eq!(report.errors, report.count, "{what}: every call fails");
            format!("{:?}", report.error_distribution)
        }
    };
    let lower = text.to_lowercase();
    assert!(
        expected.iter().any(|word| lower.contains(word)),
        "{what}: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_mean_what_they_mean_in_ghz() {
    let dir = tempfile::tempdir().unwrap();
    test_certs::write_set(dir.path()).unwrap();
    let port = start_tls_server(dir.path(), false).await;
    let host = format!("127.0.0.1:{port}");
    let ca = dir.path().join("ca.pem").display().to_string();
    fails(
        say_hello(&[], &host).await,
        "the test CA is no system root",
        CERTIFICATE,
    );
    ok(say_hello(&["--cacert", &ca], &host).await, "--cacert");
    ok(say_hello(&["--skipTLS"], &host).await, "--skipTLS");
    ok(
        say_hello(&["--cacert", &ca, "--cname", "localhost"], &host).await,
        "--cname a name the certificate has",
    );
    fails(
        say_hello(&["--cacert", &ca, "--cname", "other.test"], &host).await,
        "--cname a name it has not",
        CERTIFICATE,
    );
    fails(
        say_hello(&["--insecure"], &host).await,
        "--insecure: plaintext to a TLS port",
        PLAINTEXT,
    );
    // The URL forms take the same flags.
    ok(
        say_hello(&["--cacert", &ca], &format!("grpcs://{host}")).await,
        "grpcs://",
    );
    ok(
        say_hello(&["--cacert", &ca], &format!("tcp+tls://{host}")).await,
        "tcp+tls://",
    );
    let e = say_hello(&["--insecure"], &format!("grpcs://{host}"))
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("--insecure contradicts"), "{e:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_for_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    test_certs::write_set(dir.path()).unwrap();
    let port = start_tls_server(dir.path(), true).await;
    let host = format!("127.0.0.1:{port}");
    let path = |f: &str| dir.path().join(f).display().to_string();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    ok(
        say_hello(&["--cacert", &ca, "--cert", &cert, "--key", &key], &host).await,
        "--cert and --key",
    );
    // TLS 1.3: the server refuses the missing certificate after the client's handshake
    // is done, with an alert that may be lost to the connection's reset.
    fails(
        say_hello(&["--cacert", &ca], &host).await,
        "no client certificate",
        &[
            "certificaterequired",
            "certificate",
            "connection reset",
            "broken pipe",
        ],
    );
    let e = say_hello(
        &[
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            "/nonexistent.key",
        ],
        &host,
    )
    .await
    .unwrap_err();
    assert!(format!("{e:#}").contains("nonexistent.key"), "{e:#}");
}

/// A TLS flag layers over the `RPC_TLS_*` environment's settings: the CA from the
/// environment stays when only --cname is given (it was dropped, and the server's
/// certificate failed against the system's roots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_layer_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    test_certs::write_set(dir.path()).unwrap();
    let port = start_tls_server(dir.path(), false).await;
    let proto = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto/greeter.proto");
    let ca = dir.path().join("ca.pem");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_rpc-load"))
            .env("RPC_TLS_CA", &ca)
            .arg("--proto")
            .arg(&proto)
            .args([
                "--call",
                "helloworld.Greeter.SayHello",
                "-n",
                "3",
                "-c",
                "1",
            ])
            .args([
                "--connect-timeout",
                "3s",
                "--cname",
                "localhost",
                "-O",
                "json",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["count"].as_u64(), report["errors"].as_u64()),
        (Some(3), Some(0)),
        "{}",
        report["errorDistribution"]
    );
}
