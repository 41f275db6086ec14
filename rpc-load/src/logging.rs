//! Logging: warnings (or `RUST_LOG`'s filter) on standard error, and with `--debug FILE`
//! every debug event of the run (its start with the plan, each call's end, the run's
//! end, and this framework's crates' debug events; not those of the libraries below
//! them) as JSON lines in FILE, as ghz writes its debug log; the lines are
//! tracing-subscriber's JSON (`timestamp`, `level`, `fields`, `target`), not zap's
//! (`ts`, `level`, `msg`, ... that ghz writes), so a reader of ghz's debug log needs
//! adapting.

use std::path::Path;

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Installs the process's logging; with `debug`, debug events also go to that file as
/// JSON lines (it is created, or truncated).
///
/// # Errors
/// The debug file cannot be created.
pub fn init(debug: Option<&Path>) -> anyhow::Result<()> {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")));
    let file = match debug {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create the debug log {}", path.display()))?;
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::sync::Mutex::new(file))
                    // This framework's events (rdmarpc_load, rdmarpc_core, ...), not the
                    // libraries' below it (h2 logs every frame at debug).
                    .with_filter(
                        tracing_subscriber::filter::Targets::new()
                            .with_target("rdmarpc", tracing::Level::DEBUG),
                    ),
            )
        }
        None => None,
    };
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
    Ok(())
}
