//! `kv-server --addr URL`: serves an in-memory key-value store until Ctrl-C.

use clap::Parser;
use examples::kv::kv_server::KvServer;
use examples::transport::{self, Settings};
use examples::{KvStore, KV_MAX_MESSAGE_SIZE};
use rpc_core::{Server, ServerConfig};

/// Serves the key-value store.
#[derive(Parser, Debug)]
struct Args {
    /// Address to listen on: tcp://HOST:PORT.
    #[arg(long, default_value = "tcp://127.0.0.1:50052")]
    addr: String,
    /// Largest message accepted, in bytes (values up to 64 MiB by default).
    #[arg(long, default_value_t = KV_MAX_MESSAGE_SIZE)]
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
        .add_service(KvServer::new(KvStore::default()))
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
