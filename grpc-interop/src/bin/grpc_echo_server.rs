//! `grpc-echo-server --addr HOST:PORT`: serves `proto/echo.proto`'s Echo over tonic (gRPC,
//! HTTP/2) until Ctrl-C or SIGTERM. The baseline of the benchmarks (`scripts/bench`).
#![forbid(unsafe_code)]

use clap::Parser;
use grpc_interop::echo::GrpcEchoServer;

/// Serves the echo service over gRPC (tonic).
#[derive(Parser, Debug)]
struct Args {
    /// Address to listen on: HOST:PORT or grpc://HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:50052")]
    addr: String,
    /// Largest message accepted or sent, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    max_message_size: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let addr = args.addr.trim_start_matches("grpc://").parse()?;
    let server = GrpcEchoServer::bind(addr, args.max_message_size)?;
    eprintln!(
        "grpc-echo-server listening on grpc://{}",
        server.local_addr()?
    );
    server
        .serve(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await?;
    Ok(())
}
