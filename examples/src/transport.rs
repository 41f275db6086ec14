//! Turning `--addr URL` / `--config FILE` into a listener or a channel.
//!
//! `URL` is `tcp://HOST:PORT`, `rdma://HOST:PORT` or `auto://HOST:PORT`; the TOML file
//! (see `rdmarpc_transport::FileConfig`) can give the address and the transport's
//! tunables. A flag wins over the file. No rebuild switches transport.

use std::path::PathBuf;
use std::time::Duration;

use rdmarpc_core::{Channel, ClientConfig, Endpoint, ServerConfig};
use rdmarpc_transport::{AnyConnection, AnyListener, FileConfig, TransportSettings};

/// The connection type the examples use.
pub type ClientConnection = AnyConnection;

/// Transport flags shared by every example binary.
#[derive(Debug, Clone, clap::Args)]
pub struct TransportArgs {
    /// Address: tcp://HOST:PORT, rdma://HOST:PORT or auto://HOST:PORT (RDMA where both
    /// ends have a device, else TCP).
    #[arg(long)]
    pub addr: Option<String>,
    /// TOML file with `address`, `max_message_size` and an `[rdma]` table of tunables.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Largest message sent or accepted, in bytes.
    #[arg(long)]
    pub max_message_size: Option<usize>,
}

/// Observability flags of the example servers: metrics and traces, both off by default
/// (each costs a little per call).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ObserveArgs {
    /// Serve Prometheus metrics at http://HOST:PORT/metrics: per-method call counts and
    /// latencies (`rpc_server_*`, and `rpc_client_*` of a server's own calls).
    #[arg(long, value_name = "HOST:PORT", env = "METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Log a span per call (INFO, `rpc.server`) with its method, status and latency,
    /// continuing the caller's W3C trace context (`traceparent`).
    #[arg(long)]
    pub trace_calls: bool,
}

impl ObserveArgs {
    /// Installs the Prometheus exporter (the process's `metrics` recorder), serving
    /// `/metrics` at `--metrics-addr`, if given. Call it once, inside the runtime.
    ///
    /// # Errors
    /// The port cannot be bound, or a recorder is already installed.
    pub fn install(&self) -> anyhow::Result<()> {
        if let Some(addr) = self.metrics_addr {
            use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
            // Latencies as histograms (buckets from 100 µs to 10 s), which Prometheus can
            // aggregate across pods, rather than per-process quantiles.
            const BUCKETS: &[f64] = &[
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0,
            ];
            PrometheusBuilder::new()
                .with_http_listener(addr)
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .map_err(|e| anyhow::anyhow!("metrics buckets: {e}"))?
                .install()
                .map_err(|e| anyhow::anyhow!("cannot serve metrics at {addr}: {e}"))?;
            // The RDMA transport's counters too (rpc_rdma_*), refreshed every second.
            rdmarpc_transport::spawn_rdma_metrics(Duration::from_secs(1));
            tracing::info!(%addr, "serving Prometheus metrics at /metrics");
        }
        Ok(())
    }
}

/// A resolved address and transport settings.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Where.
    pub endpoint: Endpoint,
    /// How.
    pub settings: TransportSettings,
    /// Largest message.
    pub max_message_size: usize,
    /// Server limits and timeouts (`[server]`, `RPC_SERVER_*`).
    pub server: ServerConfig,
    /// Client keepalive and retries (`[client]`, `RPC_CLIENT_*`).
    pub client: ClientConfig,
}

impl TransportArgs {
    /// Combines defaults, the config file, `RPC_*` environment variables and the flags (in
    /// rising priority).
    ///
    /// # Errors
    /// A bad URL or config file.
    pub fn resolve(&self, default_addr: &str, default_max: usize) -> anyhow::Result<Resolved> {
        let mut settings = TransportSettings::default();
        settings.max_message_size(default_max);
        let mut addr = default_addr.to_owned();
        let mut max = default_max;
        let (mut server, mut client) = (ServerConfig::default(), ClientConfig::default());
        if let Some(path) = &self.config {
            let file = FileConfig::load(path)?;
            file.apply(&mut settings)?;
            file.apply_server(&mut server);
            file.apply_client(&mut client);
            if let Some(a) = file.address {
                addr = a;
            }
            max = file.max_message_size.unwrap_or(max);
        }
        let env = FileConfig::from_env()?;
        env.apply(&mut settings)?;
        env.apply_server(&mut server);
        env.apply_client(&mut client);
        if let Some(a) = env.address {
            addr = a;
        }
        max = env.max_message_size.unwrap_or(max);
        if let Some(a) = &self.addr {
            addr = a.clone();
        }
        if let Some(m) = self.max_message_size {
            max = m;
            settings.max_message_size(m);
        }
        let endpoint: Endpoint = addr.parse().map_err(anyhow::Error::msg)?;
        server.max_message_size = max;
        client.max_message_size = max;
        Ok(Resolved {
            endpoint,
            settings,
            max_message_size: max,
            server,
            client,
        })
    }
}

impl Resolved {
    /// Binds a listener.
    ///
    /// # Errors
    /// Bind failure, or `rdma://` where there is no RDMA device.
    pub async fn listen(&self) -> anyhow::Result<AnyListener> {
        Ok(AnyListener::bind(&self.endpoint, &self.settings).await?)
    }

    /// Connects a channel that reconnects after a failure; `timeout` is the default
    /// per-call timeout.
    ///
    /// # Errors
    /// Connect or handshake failure.
    pub async fn connect(
        &self,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Channel<AnyConnection>> {
        let mut config = self.client.clone();
        if let Some(t) = timeout {
            config.timeout(t);
        }
        let (endpoint, settings) = (self.endpoint.clone(), self.settings.clone());
        Channel::with_reconnect(config, move || {
            let (endpoint, settings) = (endpoint.clone(), settings.clone());
            async move { rdmarpc_transport::connect(&endpoint, &settings).await }
        })
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", self.endpoint))
    }
}

/// The reflection service of an example server running the services named `served`
/// (`package.Service`) and health: it serves the examples' descriptors and health's, and
/// lists those services, health and itself.
///
/// # Errors
/// A name no example `.proto` defines.
pub fn reflection(served: &[&str]) -> anyhow::Result<rdmarpc_reflection::ReflectionService> {
    let builder = rdmarpc_reflection::Builder::new()
        .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(rdmarpc_health::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health");
    let builder = served
        .iter()
        .fold(builder, |builder, name| builder.with_service_name(*name));
    Ok(builder.build()?)
}

/// The server every example binary runs: `service`, the standard health service
/// (`grpc.health.v1.Health`, reporting `service` and the server as a whole `SERVING`)
/// and server reflection (`grpc.reflection.v1` and `v1alpha`, see [`reflection`]), with
/// `config`. Returns the server and the health reporter.
///
/// # Errors
/// A method id collision between the services (none among the examples').
pub fn example_server<S>(
    service: S,
    config: ServerConfig,
) -> anyhow::Result<(rdmarpc_core::Server, rdmarpc_health::HealthReporter)>
where
    S: rdmarpc_core::codegen::Service + rdmarpc_core::codegen::NamedService,
{
    observed_server(service, config, &ObserveArgs::default())
}

/// [`example_server`] with the observability `observe` asks for: the service metered
/// ([`rdmarpc_core::MeteredService`]) with `--metrics-addr`, every call traced
/// ([`rdmarpc_core::trace::ServerTraceLayer`]) with `--trace-calls`.
///
/// # Errors
/// As [`example_server`].
pub fn observed_server<S>(
    service: S,
    config: ServerConfig,
    observe: &ObserveArgs,
) -> anyhow::Result<(rdmarpc_core::Server, rdmarpc_health::HealthReporter)>
where
    S: rdmarpc_core::codegen::Service + rdmarpc_core::codegen::NamedService,
{
    let (reporter, health) = rdmarpc_health::health_reporter();
    reporter.set_serving::<S>();
    let reflection = reflection(&[S::NAME])?;
    let mut builder = rdmarpc_core::Server::builder();
    if observe.trace_calls {
        builder = builder.layer(rdmarpc_core::trace::ServerTraceLayer);
    }
    let builder = if observe.metrics_addr.is_some() {
        builder.add_service(rdmarpc_core::MeteredService::new(service))
    } else {
        builder.add_service(service)
    };
    let server = builder
        .map_err(anyhow::Error::msg)?
        .add_service(health)
        .map_err(anyhow::Error::msg)?
        .add_service(reflection.v1())
        .map_err(anyhow::Error::msg)?
        .add_service(reflection.v1alpha())
        .map_err(anyhow::Error::msg)?
        .config(config)
        .build();
    Ok((server, reporter))
}

/// Serves [`example_server`] of `service` on the address from `args` (default
/// `default_addr`) until Ctrl-C, then reports `NOT_SERVING` and shuts down gracefully:
/// what every example server's `main` does.
///
/// # Errors
/// A bad address or config, a bind failure, or a listener error.
pub async fn serve_until_ctrl_c<S>(
    args: &TransportArgs,
    observe: &ObserveArgs,
    default_addr: &str,
    default_max: usize,
    service: S,
) -> anyhow::Result<()>
where
    S: rdmarpc_core::codegen::Service + rdmarpc_core::codegen::NamedService,
{
    let resolved = args.resolve(default_addr, default_max)?;
    let listener = resolved.listen().await?;
    let (server, reporter) = observed_server(service, resolved.server.clone(), observe)?;
    server
        .serve_with_shutdown(listener, async {
            shutdown_signal().await;
            tracing::info!("shutting down");
            reporter.set_not_serving::<S>();
            reporter.set_service_status("", rdmarpc_health::ServingStatus::NotServing);
        })
        .await?;
    Ok(())
}

/// Ctrl-C (SIGINT) or, on Unix, SIGTERM (what Kubernetes and systemd send to stop a
/// process): an example server then drains gracefully.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
