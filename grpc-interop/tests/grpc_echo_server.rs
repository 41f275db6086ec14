//! `grpc-echo-server`, the benchmarks' gRPC baseline, as the scripts run it: it prints
//! its address and serves `echo.Echo` (unary and the `Repeat` stream) to a gRPC client
//! (this framework's generated client over `grpc://`).

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
    server.kill().unwrap();
    let _ = server.wait();
    assert_eq!(reply.payload, payload);
    assert_eq!(repeated, 3);
}
