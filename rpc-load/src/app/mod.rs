//! The `rpc-load` program: from the parsed command line to a written report.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context};
use prost_reflect::DynamicMessage;
use rdmarpc_core::{Channel, ClientConfig};

use crate::cli::{Args, Format};
use crate::connect::{connect, Address, ConnectSettings, RpcConnection};
use crate::data::{self, Messages};
use crate::grpc::{self, GrpcSettings, GrpcTarget};
use crate::proto::{find_method, load_descriptors, Method};
use crate::report::{Report, ReportOptions};
use crate::runner::{self, LoadPlan, Monitor, RunOutcome};
use crate::target::RpcTarget;
use crate::template::{MethodFacts, Template};

/// Runs `rpc-load` with `args` on a runtime of its own and writes the report.
///
/// # Errors
/// Bad arguments, a proto or data error, a failed connect, or an unwritable output.
pub fn main(args: &Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads(args))
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let report = runtime.block_on(run(args))?;
    write_report(&report, args.format, args.output.as_deref())
}

/// Threads of the runtime: `--cpus`, or every CPU this process may use.
pub fn threads(args: &Args) -> usize {
    args.cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// Makes the run `args` describes, on the current tokio runtime, and reports it.
///
/// # Errors
/// As [`main`], except for writing the report.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let address = Address::parse(
        args.address()?,
        args.grpc_client == crate::cli::GrpcClient::Tonic,
    )?;
    let plan = args.plan()?;
    let pool = load_descriptors(&args.proto, &args.import_paths)?;
    let method = find_method(&pool, &args.call)?;

    let metadata = match &args.metadata {
        Some(json) => data::metadata_from_json(&data::read_data_arg(json)?)?,
        None => Vec::new(),
    };
    let (messages, payload_field) = messages_of(args, &method)?;
    let messages = Arc::new(messages);

    let monitor = Arc::new(Monitor::new());
    let on_ctrl_c = tokio::spawn(cancel_on_ctrl_c(monitor.clone()));
    let progress = crate::progress::spawn(monitor.clone(), &plan);
    let run = Run {
        args,
        method: &method,
        metadata: &metadata,
        messages,
        plan: &plan,
        monitor: monitor.clone(),
    };
    let result = run_on(&address, run).await;
    on_ctrl_c.abort();
    monitor.finish();
    let _ = progress.await;
    let (outcome, transport) = result?;

    ensure!(
        outcome.sent == outcome.stats.count(),
        "internal error: {} requests sent but {} replies and {} errors counted",
        outcome.sent,
        outcome.stats.ok(),
        outcome.stats.errors()
    );
    let mut options = ReportOptions::new(
        args,
        method.name.clone(),
        plan.total,
        payload_field,
        &metadata,
        threads(args),
    );
    // With a concurrency schedule, the most workers it had (not -c).
    options.concurrency = plan.concurrency;
    Ok(Report::new(&outcome, options, transport))
}

/// One run: what to call, with what, on which plan, and where it is counted; the same
/// over every transport.
struct Run<'a> {
    args: &'a Args,
    method: &'a Method,
    metadata: &'a [(String, String)],
    messages: Arc<Messages>,
    plan: &'a LoadPlan,
    monitor: Arc<Monitor>,
}

impl Run<'_> {
    /// Runs the plan over `targets`.
    async fn over<T: crate::target::Target>(self, targets: &[Arc<T>]) -> RunOutcome {
        runner::run(targets, self.messages, self.plan, self.monitor).await
    }
}

/// Runs `run` over the transport `address` names.
async fn run_on(address: &Address, run: Run<'_>) -> anyhow::Result<(RunOutcome, String)> {
    match address {
        Address::Rpc(endpoint) => run_rpc(run, endpoint).await,
        Address::Balanced(target) => run_balanced(run, target).await,
        Address::Grpc(addrs) => run_grpc(run, addrs).await,
    }
}

/// The messages to send (every call's, or a template rendered per call) and the payload
/// field `--payload-size` fills, if any.
fn messages_of(args: &Args, method: &Method) -> anyhow::Result<(Messages, Option<String>)> {
    let text = args.data.as_deref().map(data::read_data_arg).transpose()?;
    Ok(match text {
        // `{{...}}` actions: rendered for every call.
        Some(text) if Template::is_template(&text) => {
            let (service, name) = method.name.split_once('/').unwrap_or(("", &method.name));
            let facts = MethodFacts {
                service: service.to_owned(),
                method: name.to_owned(),
                input: method.input.full_name().to_owned(),
                output: method.output.full_name().to_owned(),
                client_streaming: method.descriptor.kind.client_streams(),
                server_streaming: method.descriptor.kind.server_streams(),
            };
            let template = Template::parse(&text, facts)?;
            let payload = args
                .payload_size
                .map(|size| data::payload_value(&method.input, size, args.payload_field.as_deref()))
                .transpose()?;
            let field = payload.as_ref().map(|(f, _)| f.name().to_owned());
            let messages = Messages::templated(
                template,
                method.input.clone(),
                payload,
                args.stream_dynamic_messages,
            )?;
            (messages, field)
        }
        text => {
            let mut messages = match (text, &args.binary_file) {
                (Some(json), _) => data::messages_from_json(&method.input, &json)?,
                (None, Some(file)) => {
                    let bytes = std::fs::read(file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    vec![data::message_from_binary(&method.input, &bytes)?]
                }
                (None, None) => vec![DynamicMessage::new(method.input.clone())],
            };
            let field = args
                .payload_size
                .map(|size| {
                    data::set_payload(
                        &mut messages,
                        &method.input,
                        size,
                        args.payload_field.as_deref(),
                    )
                })
                .transpose()?;
            (Messages::new(messages)?, field)
        }
    })
}

/// Cancels the run on Ctrl-C.
async fn cancel_on_ctrl_c(monitor: Arc<Monitor>) {
    if tokio::signal::ctrl_c().await.is_ok() {
        monitor.cancel();
    }
}

/// Runs over `--connections` connections of this framework's transports.
async fn run_rpc(
    run: Run<'_>,
    endpoint: &rdmarpc_core::Endpoint,
) -> anyhow::Result<(RunOutcome, String)> {
    let (args, method, metadata) = (run.args, run.method, run.metadata);
    let settings = ConnectSettings {
        connect_timeout: args.connect_timeout,
        max_message_size: args.max_message_size,
    };
    let mut config = ClientConfig::default();
    // A connection that fails is dialed again with back-off; meanwhile calls wait for it
    // (up to the call timeout) rather than fail by the million, and what failed is
    // reported in the error distribution.
    config
        .max_message_size(args.max_message_size)
        .wait_for_ready(true);
    let mut targets = Vec::with_capacity(args.connections);
    let mut transports = BTreeSet::new();
    for _ in 0..args.connections {
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

/// Dials an endpoint with [`connect`], as channels redial.
fn dialer(
    settings: &ConnectSettings,
) -> impl Fn(
    &rdmarpc_core::Endpoint,
) -> std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<RpcConnection, rdmarpc_core::TransportError>>
            + Send,
    >,
> + Send
       + Sync
       + 'static {
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
    Arc::new(
        RpcTarget::new(
            channel,
            method.descriptor,
            method.output.clone(),
            metadata,
            args.call_timeout(),
        )
        .with_stream_options(args.stream_options()),
    )
}

/// Runs over `--connections` balanced channels, each with a connection per endpoint of
/// `target` (a list or a DNS name).
async fn run_balanced(run: Run<'_>, target: &str) -> anyhow::Result<(RunOutcome, String)> {
    let (args, method, metadata) = (run.args, run.method, run.metadata);
    let settings = ConnectSettings {
        connect_timeout: args.connect_timeout,
        max_message_size: args.max_message_size,
    };
    // The balancing settings (RPC_CLIENT_DNS_SCHEME, RPC_CLIENT_DNS_REFRESH_MS,
    // RPC_CLIENT_HEALTH_CHECK_SERVICE, ...) may come from the environment.
    let mut config = ClientConfig::default();
    rdmarpc_transport::FileConfig::from_env()?.apply_client(&mut config);
    config
        .max_message_size(args.max_message_size)
        .wait_for_ready(true)
        .lb_strategy(args.lb_strategy.into());
    config.connect_timeout = args.connect_timeout;
    let mut targets = Vec::with_capacity(args.connections);
    let mut endpoints = 0;
    let mut schemes = BTreeSet::new();
    for _ in 0..args.connections {
        let channel = Channel::connect_dialing(target, config.clone(), dialer(&settings))
            .await
            .with_context(|| format!("cannot connect to {target}"))?;
        let found = channel.endpoints();
        endpoints = endpoints.max(found.len());
        schemes.extend(found.iter().map(|e| e.endpoint.scheme()));
        targets.push(rpc_target(args, channel, method, metadata));
    }
    let outcome = run.over(&targets).await;
    let schemes = schemes.into_iter().collect::<Vec<_>>().join("+");
    let strategy = rdmarpc_core::LbStrategy::from(args.lb_strategy);
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
        connect_timeout: args.connect_timeout,
        max_message_size: args.max_message_size,
    };
    let mut targets = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let channel = match addrs {
            [addr] => grpc::connect(addr, &settings).await?,
            addrs => {
                ensure!(
                    args.lb_strategy == crate::cli::LbStrategy::P2c,
                    "tonic's balanced channel has p2c only"
                );
                grpc::connect_balanced(addrs, &settings)?
            }
        };
        targets.push(Arc::new(
            GrpcTarget::new(
                channel,
                method.descriptor.path,
                method.output.clone(),
                metadata,
                args.call_timeout(),
                args.max_message_size,
            )?
            .with_kind(method.descriptor.kind, args.stream_options()),
        ));
    }
    let outcome = run.over(&targets).await;
    let transport = match addrs.len() {
        1 => "grpc".to_owned(),
        n => format!("grpc, tonic's balanced channel over {n} endpoints (p2c)"),
    };
    Ok((outcome, transport))
}

/// Renders `report` as `format` into `output`, or to standard output.
///
/// # Errors
/// An unwritable output file.
pub fn write_report(report: &Report, format: Format, output: Option<&Path>) -> anyhow::Result<()> {
    let text = match format {
        Format::Summary => report.to_summary(),
        Format::Json => report.to_json(false),
        Format::Pretty => report.to_json(true),
        Format::Csv => report.to_csv_details(),
        Format::CsvSummary => report.to_csv(),
        Format::Html => report.to_html(),
    };
    match output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
        }
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            Ok(stdout.flush()?)
        }
    }
}
