//! `interop-server --addr URL`: serves the gRPC interop test service
//! (`grpc.testing.TestService`) and the health service until Ctrl-C.

use clap::Parser;
use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::interop::InteropService;
use examples::transport::{serve_until_ctrl_c, ObserveArgs, TransportArgs};

/// Serves the interop test service.
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
    let service = TestServiceServer::new(InteropService::default());
    serve_until_ctrl_c(
        &args.transport,
        &args.observe,
        "auto://127.0.0.1:50052",
        4 << 20,
        service,
    )
    .await
}
