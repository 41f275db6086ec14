// src/bin/server.rs: `cargo run --bin server -- auto://0.0.0.0:50051`
use hello_rpc::{hello::greeter_server::GreeterServer, MyGreeter};
use rdmarpc_core::{Endpoint, Server};
use rdmarpc_transport::{AnyListener, TransportSettings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The transports log through `tracing` (which transport auto:// chose, refused
    // connections): without a subscriber those lines go nowhere. RUST_LOG=debug for more.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let url = std::env::args().nth(1);
    let endpoint: Endpoint = url.as_deref().unwrap_or("auto://0.0.0.0:50051").parse()?;
    // Defaults, then any RPC_* environment variables (RPC_TLS_CERT, RPC_TCP_..., see
    // rdmarpc_transport::FileConfig).
    let settings = TransportSettings::from_env()?;
    let listener = AnyListener::bind(&endpoint, &settings).await?;
    let server = Server::builder()
        .add_service(GreeterServer::new(MyGreeter))?
        .build();
    println!("serving on port {}", listener.port());
    server
        .serve_with_shutdown(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
