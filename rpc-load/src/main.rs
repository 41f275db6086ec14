//! `rpc-load`: see the crate docs, or `rpc-load --help`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use rdmarpc_load::cli::Args;

fn main() -> ExitCode {
    let args = match Args::from_env() {
        Ok(args) => args,
        Err(e) => match e.downcast_ref::<clap::Error>() {
            // Usage errors, --help and --version, as clap prints them.
            Some(clap_error) => clap_error.exit(),
            None => return fail(&e),
        },
    };
    if let Err(e) = rdmarpc_load::logging::init(args.output.debug.as_deref()) {
        return fail(&e);
    }
    match rdmarpc_load::app::main(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::debug!(error = %format!("{e:#}"), "run failed");
            fail(&e)
        }
    }
}

fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("rpc-load: {e:#}");
    ExitCode::FAILURE
}
