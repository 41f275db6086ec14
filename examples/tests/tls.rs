//! TLS end to end on 127.0.0.1, with certificates made at run time (rcgen) and read
//! from files, as a deployment would: `tcp+tls://` carries the shared suite and the 14
//! interop cases; mutual TLS admits only clients whose certificates the CA signed; a
//! plaintext client on a TLS port, a TLS client on a plaintext port and a stalled TLS
//! handshake each fail alone, with an error that says why, while others are served.

mod suite;

use std::sync::Arc;
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::EchoRequest;
use rdmarpc_core::{Channel, ClientConfig, Code, Connection, Endpoint, Server, TransportKind};
use rdmarpc_transport::{
    connect, AnyConnection, AnyListener, ClientAuth, FileConfig, TransportSettings,
};
use suite::*;
use tokio::io::AsyncWriteExt;

/// A CA with server and client certificates in a directory that lives as long as this.
struct Certs(tempfile::TempDir);

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        test_certs::write_set(dir.path()).unwrap();
        Certs(dir)
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.path().join(name)
    }

    fn server(&self, max: usize) -> TransportSettings {
        let mut s = TransportSettings::default();
        s.max_message_size(max);
        s.tls
            .identity(self.path("server.pem"), self.path("server.key"));
        s
    }

    fn client(&self, max: usize) -> TransportSettings {
        let mut s = TransportSettings::default();
        s.max_message_size(max);
        s.tls.ca(self.path("ca.pem"));
        s
    }
}

async fn start(server: Server, url: &str, settings: &TransportSettings) -> String {
    let endpoint: Endpoint = url.parse().unwrap();
    let listener = AnyListener::bind(&endpoint, settings).await.unwrap();
    let addr = format!("127.0.0.1:{}", listener.port());
    tokio::spawn(async move { server.serve(listener).await });
    addr
}

fn channel(conn: AnyConnection, max: usize) -> Channel<AnyConnection> {
    let mut config = ClientConfig::default();
    config.max_message_size(max);
    Channel::with_config(conn, config)
}

struct Tls(Arc<Certs>);

impl Harness for Tls {
    type Conn = AnyConnection;

    async fn start(&self, server: Server) -> String {
        start(server, "tcp+tls://127.0.0.1:0", &self.0.server(BIG)).await
    }

    async fn connect(&self, addr: &str, max: usize) -> Channel<AnyConnection> {
        let endpoint: Endpoint = format!("tcp+tls://{addr}").parse().unwrap();
        let conn = connect(&endpoint, &self.0.client(max)).await.unwrap();
        assert_eq!(conn.transport(), TransportKind::Tcp);
        assert!(conn.peer().starts_with("tcp+tls://"), "{}", conn.peer());
        channel(conn, max)
    }
}

fn tls() -> Tls {
    Tls(Arc::new(Certs::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_calls() {
    thousand_concurrent_calls_on_one_connection(tls()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_32_mib_value_round_trip() {
    large_value_put_then_get(tls(), 32 << 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_exceeded() {
    deadline_fails_one_call_not_the_others(tls()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_oversized_and_garbage_protobuf() {
    bad_requests_get_their_status(tls()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interop_cases_pass() {
    interop_cases_pass(tls()).await;
}

async fn echo(channel: Channel<AnyConnection>) -> Result<(), rdmarpc_core::Status> {
    EchoClient::new(channel)
        .echo(EchoRequest {
            payload: b"over tls".to_vec().into(),
            ..Default::default()
        })
        .await
        .map(|r| assert_eq!(&r.into_inner().payload[..], b"over tls"))
}

fn mtls_server(certs: &Certs) -> TransportSettings {
    let mut s = certs.server(BIG);
    s.tls
        .ca(certs.path("ca.pem"))
        .client_auth(ClientAuth::Required);
    s
}

/// The first call's error on a connection dialed with `settings` (the dial's, if it
/// failed): under TLS 1.3 a refused client certificate shows after the handshake.
async fn first_error(addr: &str, settings: &TransportSettings) -> String {
    let endpoint: Endpoint = format!("tcp+tls://{addr}").parse().unwrap();
    match connect(&endpoint, settings).await {
        Err(e) => e.to_string(),
        Ok(conn) => match echo(channel(conn, BIG)).await {
            Err(status) => status.to_string(),
            Ok(()) => "served".into(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_serves_only_clients_the_ca_signed() {
    let certs = Certs::new();
    let addr = start(
        server_with(Probe::default(), big_config()),
        "tcp+tls://127.0.0.1:0",
        &mtls_server(&certs),
    )
    .await;

    let without = first_error(&addr, &certs.client(BIG)).await;
    // TLS 1.3: the server refuses after the client's handshake completed on its side, so
    // the client learns it from the alert (CertificateRequired) or, when its first write
    // races the close, from the write (a broken pipe or reset): never served.
    assert!(
        ["CertificateRequired", "Broken pipe", "reset", "closed"]
            .iter()
            .any(|why| without.contains(why)),
        "{without}"
    );

    let other = tempfile::tempdir().unwrap();
    let stranger = test_certs::Ca::new("other")
        .unwrap()
        .issue("stranger", &["x.test"])
        .unwrap();
    let (cert, key) = stranger.write(other.path()).unwrap();
    let mut settings = certs.client(BIG);
    settings.tls.identity(cert, key);
    assert_ne!(first_error(&addr, &settings).await, "served");

    let mut settings = certs.client(BIG);
    settings
        .tls
        .identity(certs.path("client.pem"), certs.path("client.key"));
    assert_eq!(first_error(&addr, &settings).await, "served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_tls_clients_on_the_wrong_port_fail_clearly() {
    let certs = Certs::new();
    let tls_addr = start(
        server_with(Probe::default(), big_config()),
        "tcp+tls://127.0.0.1:0",
        &certs.server(BIG),
    )
    .await;
    let plain_addr = start(
        server_with(Probe::default(), big_config()),
        "tcp://127.0.0.1:0",
        &certs.server(BIG),
    )
    .await;

    // A plaintext client on the TLS port: the server closes it; the call fails.
    let endpoint: Endpoint = format!("tcp://{tls_addr}").parse().unwrap();
    let conn = connect(&endpoint, &certs.client(BIG)).await.unwrap();
    let status = echo(channel(conn, BIG)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status}");

    // A TLS client on the plaintext port: the handshake fails and says so.
    let endpoint: Endpoint = format!("tcp+tls://{plain_addr}").parse().unwrap();
    let error = connect(&endpoint, &certs.client(BIG))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("TLS handshake"), "{error}");

    // Both ports still serve their own kind.
    let endpoint: Endpoint = format!("tcp+tls://{tls_addr}").parse().unwrap();
    echo(channel(
        connect(&endpoint, &certs.client(BIG)).await.unwrap(),
        BIG,
    ))
    .await
    .unwrap();
    let endpoint: Endpoint = format!("tcp://{plain_addr}").parse().unwrap();
    echo(channel(
        connect(&endpoint, &certs.client(BIG)).await.unwrap(),
        BIG,
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_tls_handshake_is_cut_at_the_handshake_timeout_and_blocks_no_one() {
    let certs = Certs::new();
    let mut settings = certs.server(BIG);
    settings.handshake_timeout = Duration::from_millis(500);
    let addr = start(
        server_with(Probe::default(), big_config()),
        "tcp+tls://127.0.0.1:0",
        &settings,
    )
    .await;
    // Half a ClientHello record header, then nothing.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let started = Instant::now();
    let endpoint: Endpoint = format!("tcp+tls://{addr}").parse().unwrap();
    echo(channel(
        connect(&endpoint, &certs.client(BIG)).await.unwrap(),
        BIG,
    ))
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stalled, &mut buf),
    )
    .await
    .expect("the server closes a stalled handshake");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_come_from_the_toml_file_and_the_environment() {
    let certs = Certs::new();
    let server_file = FileConfig::parse(&format!(
        "address = \"tcp+tls://127.0.0.1:0\"\n[tls]\ncert = {:?}\nkey = {:?}\nca = {:?}\nclient_auth = \"required\"\n",
        certs.path("server.pem"),
        certs.path("server.key"),
        certs.path("ca.pem"),
    ))
    .unwrap();
    let mut server = TransportSettings::default();
    server_file.apply(&mut server).unwrap();
    let addr = start(
        server_with(Probe::default(), big_config()),
        server_file.address.as_deref().unwrap(),
        &server,
    )
    .await;

    let vars = [
        ("RPC_TLS_CA", certs.path("ca.pem")),
        ("RPC_TLS_CERT", certs.path("client.pem")),
        ("RPC_TLS_KEY", certs.path("client.key")),
    ];
    let env = FileConfig::from_vars(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.display().to_string())
            .or_else(|| (name == "RPC_TLS_SERVER_NAME").then(|| "localhost".into()))
    })
    .unwrap();
    let mut client = TransportSettings::default();
    env.apply(&mut client).unwrap();
    assert_eq!(client.tls.server_name.as_deref(), Some("localhost"));
    assert_eq!(first_error(&addr, &client).await, "served");

    let error = FileConfig::parse("[tls]\nclient_auth = \"maybe\"\n").unwrap_err();
    assert!(error.to_string().contains("client_auth"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_with_tls_falls_back_to_tcp_under_tls_without_rdma() {
    if rdmarpc_transport::rdma_available() {
        eprintln!("SKIP: this host has RDMA (the guest suite covers rdma+tls://)");
        return;
    }
    let certs = Certs::new();
    let addr = start(
        server_with(Probe::default(), big_config()),
        "auto+tls://127.0.0.1:0",
        &certs.server(BIG),
    )
    .await;
    let endpoint: Endpoint = format!("auto+tls://{addr}").parse().unwrap();
    let conn = connect(&endpoint, &certs.client(BIG)).await.unwrap();
    assert_eq!(conn.transport(), TransportKind::Tcp);
    assert!(conn.peer().starts_with("tcp+tls://"), "{}", conn.peer());
    echo(channel(conn, BIG)).await.unwrap();
}

/// Handlers see who called: the transport, the address and, under mutual TLS, the
/// certificate chain the client presented (`Request::peer`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_see_the_peer_and_its_certificates() {
    let certs = Certs::new();
    let mut settings = certs.server(BIG);
    settings
        .tls
        .ca(certs.path("ca.pem"))
        .client_auth(ClientAuth::Optional);
    let echo_server = || {
        Server::builder()
            .add_service(examples::echo::echo_server::EchoServer::new(
                examples::EchoService,
            ))
            .unwrap()
            .build()
    };
    let tls_addr = start(echo_server(), "tcp+tls://127.0.0.1:0", &settings).await;
    let plain_addr = start(echo_server(), "tcp://127.0.0.1:0", &settings).await;
    let describe = |url: String, settings: TransportSettings| async move {
        let endpoint: Endpoint = url.parse().unwrap();
        let conn = connect(&endpoint, &settings).await.unwrap();
        let reply = EchoClient::new(channel(conn, BIG))
            .echo(EchoRequest {
                describe_peer: true,
                ..Default::default()
            })
            .await
            .unwrap();
        String::from_utf8(reply.into_inner().payload.to_vec()).unwrap()
    };
    let mut with_cert = certs.client(BIG);
    with_cert
        .tls
        .identity(certs.path("client.pem"), certs.path("client.key"));
    let seen = describe(format!("tcp+tls://{tls_addr}"), with_cert).await;
    assert!(
        seen.starts_with("transport=tcp+tls addr=127.0.0.1:"),
        "{seen}"
    );
    assert!(seen.ends_with("certs=2"), "{seen}");
    let seen = describe(format!("tcp+tls://{tls_addr}"), certs.client(BIG)).await;
    assert!(seen.ends_with("certs=0"), "{seen}");
    let seen = describe(format!("tcp://{plain_addr}"), certs.client(BIG)).await;
    assert!(seen.starts_with("transport=tcp addr=127.0.0.1:"), "{seen}");
}
