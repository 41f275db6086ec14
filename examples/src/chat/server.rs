//! `chat-server --addr URL`: serves one chat room until Ctrl-C.

use clap::Parser;
use examples::chat::chat_server::ChatServer;
use examples::transport::{serve_until_ctrl_c, ObserveArgs, TransportArgs};
use examples::ChatRoom;

/// Serves a chat room.
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
    let service = ChatServer::new(ChatRoom::default());
    serve_until_ctrl_c(
        &args.transport,
        &args.observe,
        "auto://127.0.0.1:50053",
        1 << 20,
        service,
    )
    .await
}
