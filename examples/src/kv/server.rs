//! `kv-server --addr URL`: serves an in-memory key-value store until Ctrl-C.

use clap::Parser;
use examples::kv::kv_server::KvServer;
use examples::transport::TransportArgs;
use examples::{KvStore, KV_MAX_MESSAGE_SIZE};
use rpc_core::{Server, ServerConfig};

/// Serves the key-value store.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    let resolved = args
        .transport
        .resolve("auto://127.0.0.1:50052", KV_MAX_MESSAGE_SIZE)?;
    let listener = resolved.listen().await?;
    let mut config = ServerConfig::default();
    config.max_message_size(resolved.max_message_size);
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
