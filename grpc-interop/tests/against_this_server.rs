//! tonic's client runs every interop case against this framework's interop service, over
//! HTTP/2 on the server's one port: in plaintext, and under TLS (`tcp+tls://` on the
//! server, `https://` with the test CA on tonic's side).

use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::interop::InteropService;
use rdmarpc_core::{Endpoint, Server};
use rdmarpc_transport::{AnyListener, TransportSettings};
use tonic::transport::{Certificate, ClientTlsConfig};

/// Starts the interop server on `url`; returns its port.
async fn start(url: &str, settings: &TransportSettings) -> u16 {
    let endpoint: Endpoint = url.parse().unwrap();
    let listener = AnyListener::bind(&endpoint, settings).await.unwrap();
    let port = listener.port();
    let server = Server::builder()
        .add_service(TestServiceServer::new(InteropService::default()))
        .unwrap()
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    port
}

async fn run_all(channel: tonic::transport::Channel) {
    let mut failed = Vec::new();
    for case in grpc_interop::CASES {
        let outcome = grpc_interop::run_case(channel.clone(), case).await;
        eprintln!("{case}: {outcome:?}");
        if let Err(e) = outcome {
            failed.push(format!("{case}: {e}"));
        }
    }
    assert!(failed.is_empty(), "failed: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interop_case_passes_with_tonics_client() {
    let port = start("tcp://127.0.0.1:0", &TransportSettings::default()).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    run_all(channel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interop_case_passes_with_tonics_client_under_tls() {
    let dir = tempfile::tempdir().unwrap();
    test_certs::write_set(dir.path()).unwrap();
    let mut settings = TransportSettings::default();
    settings
        .tls
        .identity(dir.path().join("server.pem"), dir.path().join("server.key"));
    let port = start("tcp+tls://127.0.0.1:0", &settings).await;
    let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    let endpoint = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls.clone())
        .unwrap();
    run_all(endpoint.connect().await.unwrap()).await;

    // A client that does not trust the server's CA is refused, and says why.
    let stranger = test_certs::Ca::new("other").unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(stranger.cert_pem()))
                .domain_name("localhost"),
        )
        .unwrap();
    let error = match endpoint.connect().await {
        Ok(_) => panic!("connected with an untrusted server certificate"),
        Err(e) => format!("{e:?}"),
    };
    assert!(error.contains("UnknownIssuer"), "{error}");
}

/// Status details (`grpc-status-details-bin`) and error metadata cross HTTP/2 both ways:
/// tonic's client sees what this framework's handler set, and so does this framework's
/// own client over `grpc://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_details_and_error_metadata_reach_grpc_clients() {
    use examples::echo::{EchoReply, EchoRequest};
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let port = listener.port();
    let server = Server::builder()
        .add_service(examples::echo::echo_server::EchoServer::new(
            examples::EchoService,
        ))
        .unwrap()
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    let details = vec![8u8, 3, 0, 0xff];
    let request = EchoRequest {
        payload: details.clone().into(),
        fail_code: 9, // FAILED_PRECONDITION
        ..Default::default()
    };

    // tonic's client, with its prost codec over the examples' message types.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let status = grpc
        .unary::<_, EchoReply, _>(
            tonic::Request::new(request.clone()),
            http::uri::PathAndQuery::from_static("/echo.Echo/Echo"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert_eq!(status.message(), "failed as requested");
    assert_eq!(status.details(), &details[..]);
    assert_eq!(status.metadata().get("x-failed").unwrap(), "yes");

    // This framework's client over grpc://.
    let endpoint: Endpoint = format!("grpc://127.0.0.1:{port}").parse().unwrap();
    let conn = rdmarpc_transport::connect(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let client = examples::echo::echo_client::EchoClient::new(rdmarpc_core::Channel::new(conn));
    let status = client.echo(request).await.unwrap_err();
    assert_eq!(status.code(), rdmarpc_core::Code::FailedPrecondition);
    assert_eq!(status.details(), &details[..]);
    assert_eq!(status.metadata().get("x-failed"), Some("yes"));

    // The handler sees a gRPC client's peer as gRPC.
    grpc.ready().await.unwrap();
    let reply = grpc
        .unary::<_, EchoReply, _>(
            tonic::Request::new(EchoRequest {
                describe_peer: true,
                ..Default::default()
            }),
            http::uri::PathAndQuery::from_static("/echo.Echo/Echo"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap();
    let seen = String::from_utf8(reply.into_inner().payload.to_vec()).unwrap();
    assert!(seen.starts_with("transport=grpc addr=127.0.0.1:"), "{seen}");
}

/// tonic's client compressing its requests (gzip) and reading compressed responses
/// (zstd, as this server is configured to send) against this server: large unary and
/// client-streaming calls come back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonics_client_with_compression_both_ways() {
    use grpc_interop::grpc_testing::test_service_client::TestServiceClient;
    use grpc_interop::grpc_testing::{Payload, SimpleRequest, StreamingInputCallRequest};
    use tonic::codec::CompressionEncoding;
    let mut settings = TransportSettings::default();
    settings.grpc.send_compression = Some(rdmarpc_grpc::Encoding::Zstd);
    let port = start("tcp://127.0.0.1:0", &settings).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = TestServiceClient::new(channel)
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    let reply = client
        .unary_call(SimpleRequest {
            response_size: 314_159,
            payload: Some(Payload {
                r#type: 0,
                body: vec![0; 271_828],
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload.unwrap().body.len(), 314_159);
    let requests = [27_182usize, 8, 1_828, 45_904].map(|n| StreamingInputCallRequest {
        payload: Some(Payload {
            r#type: 0,
            body: vec![0; n],
        }),
        ..Default::default()
    });
    let reply = client
        .streaming_input_call(futures_util::stream::iter(requests))
        .await
        .unwrap();
    assert_eq!(reply.into_inner().aggregated_payload_size, 74_922);
}
