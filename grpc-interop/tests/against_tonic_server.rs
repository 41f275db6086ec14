//! This framework's interop client, over `grpc://` and `grpcs://`, runs every interop
//! case against tonic's server (a standard gRPC implementation): the client transport
//! that lets generated clients call any gRPC server.

use std::net::SocketAddr;

use examples::interop::{run_case, InteropClients, CASES};
use grpc_interop::grpc_testing::test_service_server::TestServiceServer;
use grpc_interop::{EchoMetadata, TonicInteropService};
use rdmarpc_core::{Channel, Endpoint, TransportKind};
use rdmarpc_transport::{connect, TransportSettings};
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// Starts tonic's interop server (under TLS with `identity`); returns its address.
async fn start(identity: Option<Identity>) -> SocketAddr {
    start_with(identity, None).await
}

/// [`start`], reading and sending messages compressed with `compression`, if any.
async fn start_with(
    identity: Option<Identity>,
    compression: Option<tonic::codec::CompressionEncoding>,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut server = Server::builder();
    if let Some(identity) = identity {
        server = server
            .tls_config(ServerTlsConfig::new().identity(identity))
            .unwrap();
    }
    let mut service = TestServiceServer::new(TonicInteropService);
    if let Some(encoding) = compression {
        service = service
            .accept_compressed(encoding)
            .send_compressed(encoding);
    }
    let router = server
        .layer(tower_layer::layer_fn(EchoMetadata))
        .add_service(service);
    let incoming = tokio_stream_from(listener);
    tokio::spawn(router.serve_with_incoming(incoming));
    addr
}

/// The listener's connections as the stream tonic serves.
fn tokio_stream_from(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(socket, _)| socket);
        Some((accepted, listener))
    })
}

async fn run_all(url: &str, settings: &TransportSettings) {
    let endpoint: Endpoint = url.parse().unwrap();
    let conn = connect(&endpoint, settings).await.unwrap();
    assert_eq!(conn.transport(), TransportKind::Grpc);
    let clients = InteropClients::new(Channel::new(conn));
    let mut failed = Vec::new();
    for case in CASES {
        let outcome = run_case(&clients, case).await;
        eprintln!("{case}: {outcome:?}");
        if let Err(e) = outcome {
            failed.push(format!("{case}: {e}"));
        }
    }
    assert!(failed.is_empty(), "failed over {url}: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interop_case_passes_over_grpc_against_tonics_server() {
    let addr = start(None).await;
    run_all(&format!("grpc://{addr}"), &TransportSettings::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interop_case_passes_over_grpcs_against_tonics_server() {
    let dir = tempfile::tempdir().unwrap();
    test_certs::write_set(dir.path()).unwrap();
    let identity = Identity::from_pem(
        std::fs::read(dir.path().join("server.pem")).unwrap(),
        std::fs::read(dir.path().join("server.key")).unwrap(),
    );
    let addr = start(Some(identity)).await;
    let mut settings = TransportSettings::default();
    settings.tls.ca(dir.path().join("ca.pem"));
    run_all(&format!("grpcs://{addr}"), &settings).await;

    // A client that does not trust the server's CA gets no connection, and says why.
    let mut untrusting = TransportSettings::default();
    untrusting.tls.ca(test_certs::Ca::new("other")
        .unwrap()
        .write(&dir.path().join("other"))
        .unwrap());
    let endpoint: Endpoint = format!("grpcs://{addr}").parse().unwrap();
    let error = connect(&endpoint, &untrusting)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
}

/// The 14 cases again with compression both ways: this client sends gzip (its
/// `send_compression`) and tonic's server answers gzip (this client accepts it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interop_case_passes_over_grpc_with_gzip_both_ways() {
    let addr = start_with(None, Some(tonic::codec::CompressionEncoding::Gzip)).await;
    let mut settings = TransportSettings::default();
    settings.grpc.send_compression = Some(rdmarpc_grpc::Encoding::Gzip);
    run_all(&format!("grpc://{addr}"), &settings).await;
}
