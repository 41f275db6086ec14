//! `rpc-load`: see the crate docs, or `rpc-load --help`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use rdmarpc_load::cli::Args;

fn main() -> ExitCode {
    let args = match Args::from_env() {
        Ok(args) => args,
        Err(e) => match e.downcast_ref::<clap::Error>() {
            // --help and --version, as clap prints them (exit status 0).
            Some(clap_error) if !clap_error.use_stderr() => clap_error.exit(),
            // Usage errors as clap prints them, with status 1 as ghz's (kingpin's).
            Some(clap_error) => {
                let _ = clap_error.print();
                return ExitCode::FAILURE;
            }
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
