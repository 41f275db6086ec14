//! The connections of a run over each kind of address, and the reflection channel.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{ensure, Context};
use prost_reflect::DescriptorPool;
use rdmarpc_core::{Channel, ClientConfig, Endpoint};

use super::Run;
use crate::cli::{Args, LbStrategy};
use crate::connect::{connect, tls_of, Address, ConnectSettings, RpcConnection};
use crate::grpc::{self, GrpcSettings, GrpcTarget};
use crate::proto::Method;
use crate::runner::RunOutcome;
use crate::target::RpcTarget;

/// Runs `run` over the transport `address` names; returns the outcome and the transport
/// used, for the report.
pub(super) async fn run_on(
    address: &Address,
    run: Run<'_>,
) -> anyhow::Result<(RunOutcome, String)> {
    match address {
        Address::Rpc(endpoint) => run_rpc(run, endpoint).await,
        Address::Balanced(target) => run_balanced(run, target).await,
        Address::Grpc(addrs) => run_grpc(run, addrs).await,
    }
}

/// The connection settings the flags give.
///
/// # Errors
/// Bad TLS flags.
fn settings_of(args: &Args) -> anyhow::Result<ConnectSettings> {
    let (recv, send) = args.connection.message_limits();
    Ok(ConnectSettings {
        connect_timeout: args.connection.connect_timeout,
        max_message_size: recv.max(send),
        tls: tls_of(&args.security)?,
        authority: args.security.authority.clone(),
        gzip: args.connection.enable_compression,
    })
}

/// The channels' settings the flags give (`base` is the environment's or the default).
fn config_of(args: &Args, mut base: ClientConfig) -> ClientConfig {
    let (recv, send) = args.connection.message_limits();
    // A connection that fails is dialed again with back-off; meanwhile calls wait for it
    // (up to the call timeout) rather than fail by the million, and what failed is
    // reported in the error distribution.
    base.max_message_size(recv.max(send)).wait_for_ready(true);
    if let Some(k) = args.connection.keepalive.filter(|k| !k.is_zero()) {
        base.keepalive(Some(k), k);
    }
    base.connect_timeout = args.connection.connect_timeout;
    base
}

/// The descriptors of `call`'s service from the server's reflection service.
///
/// # Errors
/// A failed connect, or what [`crate::reflection::fetch`] fails with.
pub(super) async fn reflect(
    args: &Args,
    address: &Address,
    call: &str,
) -> anyhow::Result<DescriptorPool> {
    let service = crate::proto::service_of(call)?;
    let metadata = super::inputs::reflect_metadata(args)?;
    // The reflection channel's messages are bounded on their own, whatever the load's.
    let mut args = args.clone();
    let most = crate::reflection::MAX_REFLECTION_ANSWER as u64;
    args.connection.max_recv_message_size = Some(most);
    args.connection.max_send_message_size = Some(most);
    let args = &args;
    let settings = settings_of(args)?;
    let timeout = args.connection.connect_timeout;
    let channel = match address {
        Address::Rpc(endpoint) => single_channel(args, endpoint, &settings).await?,
        Address::Grpc(addrs) => {
            let endpoint: Endpoint = format!("grpc://{}", addrs[0])
                .parse()
                .map_err(anyhow::Error::msg)?;
            single_channel(args, &endpoint, &settings).await?
        }
        Address::Balanced(target) => balanced_channel(args, target, &settings).await?.0,
    };
    crate::reflection::fetch(&channel, service, &metadata, timeout).await
}

/// A channel over one connection to `endpoint`, and the transport it uses.
async fn single_channel(
    args: &Args,
    endpoint: &Endpoint,
    settings: &ConnectSettings,
) -> anyhow::Result<Channel<RpcConnection>> {
    let (conn, _) = connect(endpoint, settings).await?;
    Ok(Channel::with_config(
        conn,
        config_of(args, ClientConfig::default()),
    ))
}

/// Runs over `--connections` connections of this framework's transports.
async fn run_rpc(run: Run<'_>, endpoint: &Endpoint) -> anyhow::Result<(RunOutcome, String)> {
    let (args, method, metadata) = (run.args, run.method, run.metadata);
    let settings = settings_of(args)?;
    let config = config_of(args, ClientConfig::default());
    let mut targets = Vec::with_capacity(args.connection.connections);
    let mut transports = BTreeSet::new();
    for _ in 0..args.connection.connections {
        let (conn, transport) = connect(endpoint, &settings).await?;
        transports.insert(transport);
        let (endpoint, dial) = (endpoint.clone(), dialer(&settings));
        let redial = move || dial(&endpoint);
        // The first dial is the connection made above (its transport is reported).
        let first = parking_lot::Mutex::new(Some(conn));
        let channel = Channel::with_reconnect(config.clone(), move || {
            let conn = first.lock().take();
            let redial = redial();
            async move {
                match conn {
                    Some(conn) => Ok(conn),
                    None => redial.await,
                }
            }
        })
        .await?;
        targets.push(rpc_target(args, channel, method, metadata));
    }
    let outcome = run.over(&targets).await;
    Ok((
        outcome,
        transports.into_iter().collect::<Vec<_>>().join("+"),
    ))
}

/// A dial as channels redial it.
type Dial = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<RpcConnection, rdmarpc_core::TransportError>>
            + Send,
    >,
>;

/// Dials an endpoint with [`connect`], as channels redial.
fn dialer(settings: &ConnectSettings) -> impl Fn(&Endpoint) -> Dial + Send + Sync + 'static {
    let settings = settings.clone();
    move |endpoint| {
        let (endpoint, settings) = (endpoint.clone(), settings.clone());
        Box::pin(async move {
            connect(&endpoint, &settings)
                .await
                .map(|(conn, _)| conn)
                .map_err(|e| rdmarpc_core::TransportError::Other(format!("{e:#}")))
        })
    }
}

/// The load target of one channel: `method` with `metadata`, as `args` say.
fn rpc_target(
    args: &Args,
    channel: Channel<RpcConnection>,
    method: &Method,
    metadata: &[(String, String)],
) -> Arc<RpcTarget<RpcConnection>> {
    let (max_recv, max_send) = args.connection.message_limits();
    Arc::new(
        RpcTarget::new(
            channel,
            method.descriptor,
            method.output.clone(),
            metadata,
            args.load.call_timeout(),
        )
        .with_stream_options(args.data.stream_options())
        .with_max_send(max_send)
        .with_max_recv(max_recv),
    )
}

/// What a balanced channel found: endpoints, their schemes, and the strategy it uses.
struct Found {
    endpoints: usize,
    schemes: BTreeSet<String>,
    strategy: rdmarpc_core::LbStrategy,
}

/// A balanced channel over `target` (a list or a DNS name), and what it found.
async fn balanced_channel(
    args: &Args,
    target: &str,
    settings: &ConnectSettings,
) -> anyhow::Result<(Channel<RpcConnection>, Found)> {
    // The balancing settings (RPC_CLIENT_DNS_SCHEME, RPC_CLIENT_DNS_REFRESH_MS,
    // RPC_CLIENT_HEALTH_CHECK_SERVICE, ...) may come from the environment.
    let mut config = ClientConfig::default();
    rdmarpc_transport::FileConfig::from_env()?.apply_client(&mut config);
    let mut config = config_of(args, config);
    let dns = target.starts_with("dns:");
    // As in ghz, a DNS name names gRPC servers, over TLS unless --insecure (unless the
    // environment says otherwise), and they are used pick_first unless --lb-strategy.
    if dns && std::env::var_os("RPC_CLIENT_DNS_SCHEME").is_none() {
        config.balance.dns_scheme = if args.security.insecure {
            "grpc"
        } else {
            "grpcs"
        }
        .into();
    }
    let default = if dns {
        LbStrategy::PickFirst
    } else {
        LbStrategy::P2c
    };
    let strategy = args.connection.lb_strategy.unwrap_or(default).into();
    config.lb_strategy(strategy);
    let channel = Channel::connect_dialing(target, config, dialer(settings))
        .await
        .with_context(|| format!("cannot connect to {target}"))?;
    let endpoints = channel.endpoints();
    let found = Found {
        endpoints: endpoints.len(),
        schemes: endpoints.iter().map(|e| e.endpoint.scheme()).collect(),
        strategy,
    };
    Ok((channel, found))
}

/// Runs over `--connections` balanced channels, each with a connection per endpoint of
/// `target` (a list or a DNS name).
async fn run_balanced(run: Run<'_>, target: &str) -> anyhow::Result<(RunOutcome, String)> {
    let (args, method, metadata) = (run.args, run.method, run.metadata);
    let settings = settings_of(args)?;
    let mut targets = Vec::with_capacity(args.connection.connections);
    let mut endpoints = 0;
    let mut schemes = BTreeSet::new();
    let mut strategy = None;
    for _ in 0..args.connection.connections {
        let (channel, found) = balanced_channel(args, target, &settings).await?;
        endpoints = endpoints.max(found.endpoints);
        schemes.extend(found.schemes);
        strategy = Some(found.strategy);
        targets.push(rpc_target(args, channel, method, metadata));
    }
    let outcome = run.over(&targets).await;
    let schemes = schemes.into_iter().collect::<Vec<_>>().join("+");
    let strategy = strategy.map(|s| s.to_string()).unwrap_or_default();
    Ok((
        outcome,
        format!("{schemes}, balanced over {endpoints} endpoints ({strategy})"),
    ))
}

/// Runs over `--connections` HTTP/2 connections to a gRPC server (tonic's balanced
/// channel over several).
async fn run_grpc(run: Run<'_>, addrs: &[String]) -> anyhow::Result<(RunOutcome, String)> {
    let (args, method, metadata) = (run.args, run.method, run.metadata);
    let settings = GrpcSettings {
        connect_timeout: args.connection.connect_timeout,
        keepalive: args.connection.keepalive.filter(|k| !k.is_zero()),
        authority: args.security.authority.clone(),
    };
    let mut targets = Vec::with_capacity(args.connection.connections);
    for _ in 0..args.connection.connections {
        let channel = match addrs {
            [addr] => grpc::connect(addr, &settings).await?,
            addrs => {
                ensure!(
                    matches!(args.connection.lb_strategy, None | Some(LbStrategy::P2c)),
                    "tonic's balanced channel has p2c only"
                );
                grpc::connect_balanced(addrs, &settings)?
            }
        };
        let target = GrpcTarget::new(
            channel,
            method.descriptor.path,
            method.output.clone(),
            metadata,
            args.load.call_timeout(),
            args.connection.message_limits(),
        )?
        .with_kind(method.descriptor.kind, args.data.stream_options());
        let target = match args.connection.enable_compression {
            true => target.with_gzip(),
            false => target,
        };
        targets.push(Arc::new(target));
    }
    let outcome = run.over(&targets).await;
    let transport = match addrs.len() {
        1 => "grpc".to_owned(),
        n => format!("grpc, tonic's balanced channel over {n} endpoints (p2c)"),
    };
    Ok((outcome, transport))
}
