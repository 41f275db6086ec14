//! `kv-server --addr URL`: serves an in-memory key-value store until Ctrl-C.

use clap::Parser;
use examples::kv::kv_server::KvServer;
use examples::transport::{serve_until_ctrl_c, ObserveArgs, TransportArgs};
use examples::{KvStore, KV_MAX_MESSAGE_SIZE};

/// Serves the key-value store.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
    #[command(flatten)]
    observe: ObserveArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    args.observe.install()?;
    let service = KvServer::new(KvStore::default());
    serve_until_ctrl_c(
        &args.transport,
        &args.observe,
        "auto://127.0.0.1:50052",
        KV_MAX_MESSAGE_SIZE,
        service,
    )
    .await
}
