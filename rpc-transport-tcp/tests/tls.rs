//! TLS on the TCP transport, on real sockets with certificates made at run time: frames
//! cross in both directions, large ones too; the peer's certificate is visible; a server
//! that does not verify, a wrong name, a missing client certificate under mutual TLS and
//! a plaintext server each fail the dial with an error saying so.

use bytes::BufMut;
use rdmarpc_core::wire::{FrameKind, Header, HEADER_LEN};
use rdmarpc_core::Connection;
use rdmarpc_transport_tcp::{ClientAuth, TcpConfig, TcpConnection, TlsConfig, ALPN_FRAMES};
use test_certs::Ca;

fn frame(call_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut header = Header::new(FrameKind::Message, call_id);
    header.payload_len = payload.len() as u32;
    let mut f = header.encode().to_vec();
    f.extend_from_slice(payload);
    f
}

struct Certs {
    _dir: tempfile::TempDir,
    server: TlsConfig,
    client: TlsConfig,
}

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, as files.
fn certs() -> Certs {
    let dir = tempfile::tempdir().unwrap();
    test_certs::write_set(dir.path()).unwrap();
    let path = |name: &str| dir.path().join(name);
    let mut server = TlsConfig::default();
    server.identity(path("server.pem"), path("server.key"));
    let mut client = TlsConfig::default();
    client.ca(path("ca.pem"));
    Certs {
        server,
        client,
        _dir: dir,
    }
}

/// A server accepting one connection under `server`'s TLS; its result when it ends.
async fn serve_one(
    server: &TlsConfig,
) -> (
    String,
    tokio::task::JoinHandle<Result<TcpConnection, String>>,
) {
    let acceptor = server.acceptor(&[ALPN_FRAMES]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let socket = acceptor.accept(stream).await.map_err(|e| e.to_string())?;
        TcpConnection::accepted(socket, &TcpConfig::default(), &[]).map_err(|e| e.to_string())
    });
    (addr, task)
}

async fn send(conn: &TcpConnection, bytes: &[u8]) {
    let mut buf = conn.alloc(bytes.len()).await.unwrap();
    buf.put_slice(bytes);
    conn.send(buf).await.unwrap();
}

#[tokio::test]
async fn frames_cross_under_tls_both_ways_and_the_peer_is_known() {
    let certs = certs();
    let (addr, server) = serve_one(&certs.server).await;
    let connector = certs.client.connector(&[ALPN_FRAMES]).unwrap();
    let client = TcpConnection::connect_tls(&addr, &connector, &TcpConfig::default())
        .await
        .unwrap();
    let server = server.await.unwrap().unwrap();
    assert!(client.peer().starts_with("tcp+tls://127.0.0.1:"));
    assert!(
        client.peer_certificates().is_some_and(|c| c.len() == 2),
        "the server's chain"
    );
    assert!(
        server.peer_certificates().is_none(),
        "no client certificate"
    );

    // Small frames, and a 3 MiB one (many TLS records), each way.
    let big = vec![7u8; 3 << 20];
    for (id, payload) in [(1u64, &b"hello"[..]), (2, &big[..])] {
        send(&client, &frame(id, payload)).await;
        let got = server.recv().await.unwrap().unwrap();
        assert_eq!(Header::decode(&got).unwrap().unwrap().call_id, id);
        assert_eq!(&got[HEADER_LEN..], payload);
        send(&server, &frame(id + 10, payload)).await;
        let got = client.recv().await.unwrap().unwrap();
        assert_eq!(Header::decode(&got).unwrap().unwrap().call_id, id + 10);
        assert_eq!(got.len(), HEADER_LEN + payload.len());
    }
    // A graceful close reaches the other side as the end of the stream.
    client.shutdown().await;
    assert!(server.recv().await.unwrap().is_none());
}

/// The dial's error text, from a client with `client` settings to a server with `server`.
async fn dial_error(server: &TlsConfig, client: &TlsConfig) -> (String, String) {
    let (addr, server) = serve_one(server).await;
    let connector = client.connector(&[ALPN_FRAMES]).unwrap();
    let dialed = TcpConnection::connect_tls(&addr, &connector, &TcpConfig::default()).await;
    let server = server.await.unwrap();
    // Under TLS 1.3 a client learns of a refused certificate on its first read.
    let client_error = match dialed {
        Err(e) => e.to_string(),
        Ok(conn) => match conn.recv().await {
            Err(e) => e.to_string(),
            Ok(_) => "no error".into(),
        },
    };
    (client_error, server.err().unwrap_or_default())
}

#[tokio::test]
async fn a_server_signed_by_another_ca_is_refused_with_a_hint() {
    let certs = certs();
    let other = tempfile::tempdir().unwrap();
    let mut client = TlsConfig::default();
    client.ca(Ca::new("other").unwrap().write(other.path()).unwrap());
    let (error, _) = dial_error(&certs.server, &client).await;
    assert!(error.contains("UnknownIssuer"), "{error}");
    assert!(error.contains("check [tls] ca"), "{error}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let certs = certs();
    let mut client = certs.client.clone();
    client.server_name("not-this-server.test");
    let (error, _) = dial_error(&certs.server, &client).await;
    assert!(error.contains("not valid for name"), "{error}");
    assert!(error.contains("server_name"), "{error}");
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let certs = certs();
    let dir = certs._dir.path();
    let mut server = certs.server.clone();
    server
        .ca(dir.join("ca.pem"))
        .client_auth(ClientAuth::Required);

    // Without a certificate: refused, and both sides say why.
    let (client_error, server_error) = dial_error(&server, &certs.client).await;
    assert!(
        client_error.contains("CertificateRequired") || client_error.contains("certificate"),
        "{client_error}"
    );
    assert!(server_error.contains("TLS handshake"), "{server_error}");

    // With one from another CA: refused.
    let other_dir = tempfile::tempdir().unwrap();
    let stranger = Ca::new("other")
        .unwrap()
        .issue("stranger", &["x.test"])
        .unwrap();
    let (cert, key) = stranger.write(other_dir.path()).unwrap();
    let mut client = certs.client.clone();
    client.identity(cert, key);
    let (_, server_error) = dial_error(&server, &client).await;
    assert!(server_error.contains("UnknownIssuer"), "{server_error}");

    // With the CA's client certificate: served, and the server sees it.
    let mut client = certs.client.clone();
    client.identity(dir.join("client.pem"), dir.join("client.key"));
    let (addr, accepted) = serve_one(&server).await;
    let connector = client.connector(&[ALPN_FRAMES]).unwrap();
    let conn = TcpConnection::connect_tls(&addr, &connector, &TcpConfig::default())
        .await
        .unwrap();
    let accepted = accepted.await.unwrap().unwrap();
    send(&conn, &frame(1, b"hi")).await;
    assert!(accepted.recv().await.unwrap().is_some());
    assert!(accepted.peer_certificates().is_some_and(|c| !c.is_empty()));
}

#[tokio::test]
async fn a_plaintext_server_fails_the_dial_clearly() {
    let certs = certs();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        // A plain frame server answers with a frame of its own.
        let conn = TcpConnection::accepted(stream, &TcpConfig::default(), &[]).unwrap();
        send(&conn, &frame(1, b"not tls")).await;
        let _ = conn.recv().await;
    });
    let connector = certs.client.connector(&[ALPN_FRAMES]).unwrap();
    let error = TcpConnection::connect_tls(&addr, &connector, &TcpConfig::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("TLS handshake"), "{error}");
    server.abort();
}

#[test]
fn settings_errors_name_the_file_or_setting() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let mut server = TlsConfig::default();
    let error = server.acceptor(&[]).unwrap_err().to_string();
    assert!(error.contains("needs a certificate and a key"), "{error}");
    server.identity(&missing, &missing);
    let error = server.acceptor(&[]).unwrap_err().to_string();
    assert!(error.contains("missing.pem"), "{error}");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let mut client = TlsConfig::default();
    client.ca(&not_pem);
    let error = client.connector(&[]).unwrap_err().to_string();
    assert!(error.contains("no PEM certificate"), "{error}");
    let certs = certs();
    let mut server = certs.server.clone();
    server.client_auth(ClientAuth::Required);
    let error = server.acceptor(&[]).unwrap_err().to_string();
    assert!(error.contains("needs a CA"), "{error}");
}
