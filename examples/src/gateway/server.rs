//! `gateway-server --addr URL --backend TARGET`: the front end of the two-service
//! example, serving `gateway.Gateway` from the key-value back end (`kv-server`) at
//! TARGET until Ctrl-C.
//!
//! TARGET is any channel target: `tcp://`, `rdma://` or `auto://HOST:PORT`, a list of
//! replicas (`tcp://H1:P1,H2:P2`), or a DNS name (`dns:///kv-backend:50052`, re-resolved;
//! the replicas' transport from `RPC_CLIENT_DNS_SCHEME`, default `auto`). Calls to the
//! back end carry the caller's trace (`traceparent`) and are counted in
//! `rpc_client_*` metrics (with `--metrics-addr`).

use clap::Parser;
use examples::gateway::gateway_server::GatewayServer;
use examples::kv::kv_client::KvClient;
use examples::transport::{serve_until_ctrl_c, ObserveArgs, TransportArgs};
use examples::GatewayService;
use rdmarpc_core::Channel;

/// Serves the gateway.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
    #[command(flatten)]
    observe: ObserveArgs,
    /// The key-value back end: a URL, a list of replicas or a dns: target.
    #[arg(
        long,
        default_value = "auto://127.0.0.1:50052",
        env = "GATEWAY_BACKEND"
    )]
    backend: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    examples::init_tracing();
    let args = Args::parse();
    args.observe.install()?;
    let resolved = args
        .transport
        .resolve("auto://127.0.0.1:50054", examples::KV_MAX_MESSAGE_SIZE)?;
    // Connects on the first call: the gateway may start before its back end.
    let mut backend = Channel::connect_lazy_with(&args.backend, resolved.client.clone())?;
    if args.observe.metrics_addr.is_some() {
        backend = backend.layer(rdmarpc_core::metered::ClientMetricsLayer);
    }
    backend = if args.observe.trace_calls {
        // A span per back-end call, continuing the caller's trace.
        backend.layer(rdmarpc_core::trace::ClientTraceLayer)
    } else {
        // The caller's trace goes on to the back end all the same.
        backend.with_interceptor(rdmarpc_core::trace::propagate)
    };
    let service = GatewayServer::new(GatewayService::new(KvClient::new(backend)));
    serve_until_ctrl_c(
        &args.transport,
        &args.observe,
        "auto://127.0.0.1:50054",
        examples::KV_MAX_MESSAGE_SIZE,
        service,
    )
    .await
}
