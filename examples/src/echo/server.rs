//! `echo-server --addr URL`: serves the echo service until Ctrl-C.

use clap::Parser;
use examples::echo::echo_server::EchoServer;
use examples::transport::TransportArgs;
use examples::EchoService;
use rpc_core::{Server, ServerConfig};

/// Serves the echo service.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    let resolved = args.transport.resolve("auto://127.0.0.1:50051", 16 << 20)?;
    let listener = resolved.listen().await?;
    let mut config = ServerConfig::default();
    config.max_message_size(resolved.max_message_size);
    let server = Server::builder()
        .add_service(EchoServer::new(EchoService))
        .map_err(anyhow::Error::msg)?
        .config(config)
        .build();
    server
        .serve_with_shutdown(listener, async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down");
        })
        .await?;
    Ok(())
}
