//! `greeter-server --addr URL`: serves the services ghz's documentation calls
//! (`helloworld.Greeter`, `routeguide.RouteGuide`, `wrapped.WrappedService`,
//! `bytes.ImageService`) with health and reflection until Ctrl-C.

use clap::Parser;
use examples::transport::{shutdown_signal, TransportArgs};

/// Serves ghz's example services.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    let resolved = args.transport.resolve("tcp://127.0.0.1:50051", 4 << 20)?;
    let listener = resolved.listen().await?;
    let (server, _reporter) = examples::ghz::ghz_server(resolved.server.clone())?;
    server
        .serve_with_shutdown(listener, async {
            shutdown_signal().await;
            tracing::info!("shutting down");
        })
        .await?;
    Ok(())
}
