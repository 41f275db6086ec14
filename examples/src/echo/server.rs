//! `echo-server --addr URL`: serves the echo service until Ctrl-C.

use clap::Parser;
use examples::echo::echo_server::EchoServer;
use examples::transport::{serve_until_ctrl_c, ObserveArgs, TransportArgs};
use examples::EchoService;

/// Serves the echo service.
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
    let service = EchoServer::new(EchoService);
    serve_until_ctrl_c(
        &args.transport,
        &args.observe,
        "auto://127.0.0.1:50051",
        16 << 20,
        service,
    )
    .await
}
