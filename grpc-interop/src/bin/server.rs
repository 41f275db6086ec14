//! `tonic-interop-server --addr HOST:PORT [--tls_cert CERT.pem --tls_key KEY.pem]`: the
//! gRPC interop service on tonic's server, for this framework's client to be checked
//! against (`interop-client --addr grpc://HOST:PORT`).

use clap::Parser;
use grpc_interop::grpc_testing::test_service_server::TestServiceServer;
use grpc_interop::{EchoMetadata, TonicInteropService};
use tonic::transport::{Identity, Server, ServerTlsConfig};

#[derive(Parser)]
struct Args {
    /// Where to listen, e.g. 127.0.0.1:50052.
    #[arg(long)]
    addr: std::net::SocketAddr,
    /// Certificate chain (PEM): serve over TLS.
    #[arg(long = "tls_cert", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// Private key (PEM).
    #[arg(long = "tls_key")]
    tls_key: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut server = Server::builder();
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let identity = Identity::from_pem(std::fs::read(cert)?, std::fs::read(key)?);
        server = server.tls_config(ServerTlsConfig::new().identity(identity))?;
    }
    eprintln!("tonic interop server on {}", args.addr);
    server
        .layer(tower_layer::layer_fn(EchoMetadata))
        .add_service(TestServiceServer::new(TonicInteropService))
        .serve(args.addr)
        .await?;
    Ok(())
}
