//! `rpc-load`: see the crate docs, or `rpc-load --help`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use rdmarpc_load::cli::Args;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let args = Args::parse();
    match rdmarpc_load::app::main(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc-load: {e:#}");
            ExitCode::FAILURE
        }
    }
}
