// src/bin/client.rs: `cargo run --bin client -- auto://127.0.0.1:50051 Ada`
use std::time::Duration;

use hello_rpc::hello::greeter_client::GreeterClient;
use hello_rpc::hello::{CountdownRequest, HelloRequest};
use rdmarpc_core::Request;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "auto://127.0.0.1:50051".into());
    let name = args.next().unwrap_or_else(|| "world".into());

    // Connects now (RDMA where both ends have a device with auto://), and again by itself
    // after the server restarts. `connect_lazy` would wait for the first call to dial.
    let client = GreeterClient::connect(&url).await?;

    let mut request = Request::new(HelloRequest { name: name.clone() });
    request.set_timeout(Duration::from_secs(1)); // DEADLINE_EXCEEDED after that
    request.metadata_mut().insert("x-trace-id", "abc123");
    let reply = client.say_hello(request).await?;
    println!("{}", reply.into_inner().message);

    let mut countdown = client
        .countdown(CountdownRequest { name, count: 3 })
        .await?
        .into_inner();
    while let Some(reply) = countdown.message().await? {
        println!("{}", reply.message);
    }
    Ok(())
}
