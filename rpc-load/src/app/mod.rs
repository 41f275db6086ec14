//! The `rpc-load` program: from the parsed command line to a written report.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Context};

use crate::cli::{Args, Format, GrpcClient};
use crate::connect::{url_of, Address};
use crate::data::{self, Messages};
use crate::proto::{find_method, Method};
use crate::report::{Report, ReportOptions};
use crate::runner::{self, LoadPlan, Monitor, RunOutcome};

mod inputs;
mod runs;

/// Runs `rpc-load` with `args` on a runtime of its own and writes the report.
///
/// # Errors
/// Bad arguments, a proto or data error, a failed connect, or an unwritable output.
pub fn main(args: &Args) -> anyhow::Result<()> {
    // -o is opened before the run, so that an unwritable path does not lose it.
    let output = args
        .output
        .output
        .as_deref()
        .map(Output::open)
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads(args))
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let report = match runtime.block_on(run(args)) {
        Ok(report) => report,
        Err(e) => {
            if let Some(output) = output {
                output.abandon();
            }
            return Err(e);
        }
    };
    match output {
        Some(output) => output.write(&report, args.output.format),
        None => write_report(&report, args.output.format, None),
    }
}

/// The `-o` file, opened before the run: created if need be, emptied only when the
/// report is written.
struct Output {
    path: std::path::PathBuf,
    file: std::fs::File,
    created: bool,
}

impl Output {
    /// Opens (or creates) `path` for writing, leaving what it holds.
    fn open(path: &Path) -> anyhow::Result<Output> {
        let created = !path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot write the output -o {}", path.display()))?;
        Ok(Output {
            path: path.to_owned(),
            file,
            created,
        })
    }

    /// The run failed: a file created for it is removed, an existing one left as it was.
    fn abandon(self) {
        drop(self.file);
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Replaces what the file holds with `report` as `format`.
    fn write(self, report: &Report, format: Format) -> anyhow::Result<()> {
        let cannot = || format!("cannot write the output -o {}", self.path.display());
        self.file.set_len(0).with_context(cannot)?;
        let mut out = std::io::BufWriter::new(&self.file);
        render(report, format, &mut out)
            .and_then(|()| out.flush())
            .with_context(cannot)
    }
}

/// Threads of the runtime: `--cpus`, or every CPU this process may use.
pub fn threads(args: &Args) -> usize {
    args.connection
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// The address `args` name, a bare `HOST:PORT` resolved as ghz does.
///
/// # Errors
/// No address, or one that does not parse.
pub fn address_of(args: &Args) -> anyhow::Result<Address> {
    let url = url_of(args.address()?, args.security.insecure)?;
    Address::parse(&url, args.connection.grpc_client == GrpcClient::Tonic)
}

/// Makes the run `args` describe, on the current tokio runtime, and reports it.
///
/// # Errors
/// As [`main`], except for writing the report.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let address = address_of(args)?;
    let plan = args.plan()?;
    let call = args.call()?;
    let tags = inputs::tags(args)?;
    inputs::one_stdin_reader(args)?;
    let metadata_text = inputs::metadata_text(args)?;
    let metadata = inputs::fixed_metadata(args, metadata_text.as_deref())?;
    let pool = match inputs::local_descriptors(args)? {
        Some(pool) => pool,
        None => runs::reflect(args, &address, call).await?,
    };
    let method = find_method(&pool, call)?;
    inputs::check_stream_flags(args, &method)?;
    let (messages, payload_field, data_text) =
        inputs::messages_of(args, &method, metadata_text.as_deref())?;
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
    tracing::debug!(?plan, call, "start run");
    let result = runs::run_on(&address, run).await;
    on_ctrl_c.abort();
    monitor.finish();
    let _ = progress.await;
    let (outcome, transport) = result?;
    tracing::debug!(sent = outcome.sent, "run finished");

    ensure!(
        outcome.sent == outcome.stats.count() + outcome.skipped,
        "internal error: {} requests sent but {} replies, {} errors and {} skipped counted",
        outcome.sent,
        outcome.stats.ok(),
        outcome.stats.errors(),
        outcome.skipped
    );
    // The metadata as given: rendered per call, its template, as ghz records it.
    let given = match metadata_text.as_deref() {
        Some(text) if metadata.is_empty() => data::metadata_from_json(text).unwrap_or_default(),
        _ => metadata,
    };
    // The method as given, as ghz reports it.
    let mut options = ReportOptions::new(
        args,
        call.to_owned(),
        plan.total,
        payload_field,
        &given,
        threads(args),
    );
    if let Some(text) = data_text {
        options.data = serde_json::from_str(&text).ok();
    }
    Ok(Report::new(outcome, options, tags, transport))
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

/// Cancels the run on Ctrl-C.
async fn cancel_on_ctrl_c(monitor: Arc<Monitor>) {
    if tokio::signal::ctrl_c().await.is_ok() {
        monitor.cancel();
    }
}

/// Renders `report` as `format` into `output`, or to standard output, streaming it (a
/// report with a million details is not built in memory as text first).
///
/// # Errors
/// An unwritable output file.
pub fn write_report(report: &Report, format: Format, output: Option<&Path>) -> anyhow::Result<()> {
    match output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            let mut out = std::io::BufWriter::new(file);
            render(report, format, &mut out)
                .and_then(|()| out.flush())
                .with_context(|| format!("cannot write {}", path.display()))
        }
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            render(report, format, &mut out).and_then(|()| out.flush())?;
            Ok(())
        }
    }
}

/// Writes `report` as `format` into `out`.
fn render(report: &Report, format: Format, out: &mut impl Write) -> std::io::Result<()> {
    let text = match format {
        Format::Json | Format::Pretty => {
            let pretty = format == Format::Pretty;
            return report.write_json(out, pretty);
        }
        Format::Summary => report.to_summary(),
        // Line by line: a million details are not built as one text first.
        Format::Csv => return report.write_csv_details(out),
        Format::CsvSummary => report.to_csv(),
        Format::Html => report.to_html(),
        Format::InfluxSummary => report.to_influx_summary(),
        Format::InfluxDetails => return report.write_influx_details(out),
        Format::Prometheus => report.to_prometheus(),
    };
    out.write_all(text.as_bytes())
}
