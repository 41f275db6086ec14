//! `grpc-echo-server`, the benchmarks' gRPC baseline, as the scripts run it: it prints
//! its address and serves `echo.Echo` (unary, the `Repeat` stream and the bidirectional
//! `Chat`) to a gRPC client (this framework's generated client over `grpc://`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use examples::echo::echo_client::EchoClient;
use examples::echo::{EchoRequest, RepeatRequest};
use rdmarpc_core::{Channel, Endpoint};
use rdmarpc_transport::{connect, TransportSettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_echo_over_grpc() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_grpc-echo-server"))
        .args(["--addr", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("grpc://127.0.0.1:"), "{line}");

    let endpoint: Endpoint = url.parse().unwrap();
    let connection = connect(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let client = EchoClient::new(Channel::new(connection));
    let payload = bytes::Bytes::from_static(b"baseline");
    let reply = client
        .echo(EchoRequest {
            payload: payload.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut stream = client
        .repeat(RepeatRequest {
            payload: payload.clone(),
            count: 3,
        })
        .await
        .unwrap()
        .into_inner();
    let mut repeated = 0;
    while let Some(message) = stream.message().await.unwrap() {
        assert_eq!(message.payload, payload);
        repeated += 1;
    }
    let chatted = chat_one_at_a_time(&client).await;
    server.kill().unwrap();
    let _ = server.wait();
    assert_eq!(reply.payload, payload);
    assert_eq!(repeated, 3);
    assert_eq!(chatted, 10);
}

/// `Chat` with each request sent after the reply to the one before: each reply carries
/// its request's payload, and the replies end with the requests. Returns the replies.
async fn chat_one_at_a_time(client: &EchoClient<rdmarpc_transport::AnyConnection>) -> usize {
    let request = |i: usize| EchoRequest {
        payload: format!("ping {i}").into_bytes().into(),
        ..Default::default()
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<EchoRequest>(1);
    let requests = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    tx.send(request(0)).await.unwrap();
    let mut replies = client.chat(requests).await.unwrap().into_inner();
    let mut answered = 0;
    for i in 0..10 {
        if i > 0 {
            tx.send(request(i)).await.unwrap();
        }
        let reply = replies
            .message()
            .await
            .unwrap()
            .expect("a reply per request");
        assert_eq!(reply.payload, request(i).payload, "reply {i}");
        answered += 1;
    }
    drop(tx);
    assert!(replies.message().await.unwrap().is_none(), "ends with them");
    answered
}
