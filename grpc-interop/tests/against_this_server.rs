//! tonic's client runs every interop case against this framework's interop service, over
//! HTTP/2 on the server's one port.

use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::interop::InteropService;
use rpc_core::{Endpoint, Server};
use rpc_transport_rdma::{AnyListener, TransportSettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interop_case_passes_with_tonics_client() {
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let port = listener.port();
    let server = Server::builder()
        .add_service(TestServiceServer::new(InteropService::default()))
        .unwrap()
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
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
