//! `echo-server --addr URL`: serves the echo service until Ctrl-C.

use clap::Parser;
use examples::echo::echo_server::EchoServer;
use examples::transport::{self, Settings};
use examples::EchoService;
use rpc_core::{Server, ServerConfig};

/// Serves the echo service.
#[derive(Parser, Debug)]
struct Args {
    /// Address to listen on: tcp://HOST:PORT.
    #[arg(long, default_value = "tcp://127.0.0.1:50051")]
    addr: String,
    /// Largest message accepted, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    max_message_size: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    let settings = Settings {
        max_message_size: args.max_message_size,
        timeout: None,
    };
    let listener = transport::listen(&args.addr, &settings).await?;
    let mut config = ServerConfig::default();
    config.max_message_size(args.max_message_size);
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
