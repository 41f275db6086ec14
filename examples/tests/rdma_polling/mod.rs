//! A caller alone on its connection polls the completion queue for its response itself
//! (`Connection::spin_until`): counted by `RdmaCounters::found_by_spin`. The driver
//! stands aside meanwhile (callers' mode), and takes over for everything else on the
//! connection: streams, concurrent calls, a caller whose response outlasts its spin.

use std::time::Duration;

use examples::echo::echo_client::EchoClient;
use examples::echo::echo_server::EchoServer;
use examples::echo::EchoRequest;
use rdmarpc_core::Server;

use examples::interop::request_channel;
use rdmarpc_transport::AnyConnection;

use super::suite::Harness;
use super::{skip, Rdma, BIG, NETWORK};

fn echo_server() -> Server {
    Server::builder()
        .add_service(EchoServer::new(examples::EchoService))
        .unwrap()
        .build()
}

fn request(i: usize, delay_ms: u32) -> EchoRequest {
    EchoRequest {
        payload: format!("call {i}").into_bytes().into(),
        delay_ms,
        ..Default::default()
    }
}

/// The RDMA counters of a client's connection.
fn counters(client: &EchoClient<AnyConnection>) -> rdmarpc_transport_rdma::RdmaCounters {
    client
        .channel()
        .connection()
        .unwrap()
        .rdma_counters()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_caller_polls_for_its_responses_and_streams_still_flow() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = Rdma.start(echo_server()).await;
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    for i in 0..100 {
        let reply = client.echo(request(i, 0)).await.unwrap().into_inner();
        assert_eq!(reply.payload, request(i, 0).payload);
    }
    let polled = counters(&client).found_by_spin;
    assert!(polled > 0, "no response was found by its caller's poll");
    // A response slower than the spin: awaited after it, the driver polling.
    let reply = client.echo(request(100, 30)).await.unwrap().into_inner();
    assert_eq!(reply.payload, request(100, 30).payload);
    // A stream opened after lone calls (the driver stood aside for them), with lone
    // calls and concurrent calls beside it: its replies come from the driver.
    let (tx, requests) = request_channel::<EchoRequest>();
    tx.send(request(0, 0)).await.unwrap();
    let mut replies = client.chat(requests).await.unwrap().into_inner();
    let calls = {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                let pair = tokio::join!(
                    client.echo(request(i, 0)),
                    client.echo(request(i + 1000, 1))
                );
                assert_eq!(pair.0.unwrap().into_inner().payload, request(i, 0).payload);
                let second = pair.1.unwrap().into_inner().payload;
                assert_eq!(second, request(i + 1000, 1).payload);
            }
        })
    };
    for i in 0..50 {
        if i > 0 {
            tx.send(request(i, 0)).await.unwrap();
        }
        let reply = tokio::time::timeout(Duration::from_secs(10), replies.message())
            .await
            .expect("the stream's reply came")
            .unwrap()
            .expect("a reply per request");
        assert_eq!(reply.payload, request(i, 0).payload, "reply {i}");
    }
    drop(tx);
    calls.await.unwrap();
    assert_eq!(counters(&client).errors, 0);
}

/// On a runtime of one thread a spinning caller would hold everything else: no caller
/// polls there, the driver does.
#[tokio::test(flavor = "current_thread")]
async fn no_caller_polls_on_a_runtime_of_one_thread() {
    if skip() {
        return;
    }
    let _net = NETWORK.read().await;
    let addr = Rdma.start(echo_server()).await;
    let client = EchoClient::new(Rdma.connect(&addr, BIG).await);
    for i in 0..50 {
        let reply = client.echo(request(i, 0)).await.unwrap().into_inner();
        assert_eq!(reply.payload, request(i, 0).payload);
    }
    assert_eq!(counters(&client).found_by_spin, 0);
}
