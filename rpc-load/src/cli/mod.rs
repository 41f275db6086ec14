//! The command line: every ghz flag, with ghz's name, meaning and default, plus
//! rpc-load's own (each under a name ghz does not use).
//!
//! The flags are grouped as ghz groups them: [`ProtoFlags`] and [`SecurityFlags`] (what
//! to call and how to trust it), [`LoadFlags`] (rate, workers, count, durations),
//! [`DataFlags`] (what each call sends), [`OutputFlags`] (the report) and
//! [`ConnectionFlags`]. Values parse as ghz (Go) reads them ([`parse_duration`],
//! [`parse_bool`], [`parse_bytes`]); booleans take `--flag`, `--flag=true` and
//! `--flag=false`. `--config FILE` ([`config`]) gives the same settings from a JSON, TOML
//! or YAML file under ghz's keys; flags on the command line win.

use std::path::PathBuf;

use anyhow::Context;
use clap::{ArgAction, Parser};

pub mod config;
mod data;
mod load;
mod output;
mod target;
mod values;

pub use data::DataFlags;
pub use load::{
    LoadFlags, LoadSchedule, DEFAULT_MAX_IN_FLIGHT, DEFAULT_TOTAL, MAX_IN_FLIGHT, MAX_WORKERS,
};
pub use output::{Format, OutputFlags};
pub use target::{ConnectionFlags, GrpcClient, LbStrategy, ProtoFlags, SecurityFlags, MAX_CPUS};
pub use values::{parse_bool, parse_bytes, parse_duration};

use crate::runner::LoadPlan;

/// `rpc-load`: load-tests a method (unary or streaming) of a gRPC server (HOST:PORT,
/// `grpc://`, `grpcs://`) or of an rdmarpc-core service (`tcp://`, `rdma://`, `auto://`),
/// as ghz does, from a .proto, a protoset or the server's reflection.
#[derive(Parser, Debug, Clone)]
#[command(name = "rpc-load", version, about, long_about = None, disable_version_flag = true)]
pub struct Args {
    /// Host and port to test: HOST:PORT is a gRPC server over TLS (plaintext with
    /// --insecure), as in ghz; or a URL: grpc://, grpcs://, tcp://, rdma://, auto:// (each
    /// of the last three also +tls), a list (tcp://H1:P1,H2:P2) or dns:///NAME:PORT.
    #[arg(value_name = "HOST")]
    pub address: Option<String>,
    /// The host, as a flag (instead of the positional HOST).
    #[arg(long = "addr", value_name = "URL", conflicts_with = "address")]
    pub addr: Option<String>,
    /// Path to a JSON, TOML or YAML config file with the run's settings under ghz's keys
    /// (flags on the command line take precedence).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print the version.
    #[arg(short = 'v', long, action = ArgAction::Version)]
    pub version: Option<bool>,
    /// The method and its descriptors.
    #[command(flatten, next_help_heading = "Proto")]
    pub proto: ProtoFlags,
    /// TLS.
    #[command(flatten, next_help_heading = "Security")]
    pub security: SecurityFlags,
    /// Rate, workers, count and durations.
    #[command(flatten, next_help_heading = "Run")]
    pub load: LoadFlags,
    /// Data and metadata.
    #[command(flatten, next_help_heading = "Data")]
    pub data: DataFlags,
    /// The report.
    #[command(flatten, next_help_heading = "Output")]
    pub output: OutputFlags,
    /// The connections.
    #[command(flatten, next_help_heading = "Connection")]
    pub connection: ConnectionFlags,
}

impl Args {
    /// Parses the process's command line, merged with `--config`'s file if given.
    ///
    /// # Errors
    /// A bad flag (clap's message, with usage), or a bad config file.
    pub fn from_env() -> anyhow::Result<Args> {
        Args::from_argv(std::env::args_os())
    }

    /// Parses `argv` (the program's name first), merged with `--config`'s file if given:
    /// a setting of the file applies unless its flag is on the command line.
    ///
    /// # Errors
    /// As [`Args::from_env`].
    pub fn from_argv<I, T>(argv: I) -> anyhow::Result<Args>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
        config::parse_with_config(argv)
    }

    /// The address, from the positional argument or `--addr`.
    ///
    /// # Errors
    /// If neither is given.
    pub fn address(&self) -> anyhow::Result<&str> {
        self.address.as_deref().or(self.addr.as_deref()).context(
            "no host: give HOST:PORT (a gRPC server) or a URL (grpc://, tcp://, rdma://, auto://)",
        )
    }

    /// The method, `--call`.
    ///
    /// # Errors
    /// If it is not given.
    pub fn call(&self) -> anyhow::Result<&str> {
        self.proto
            .call
            .as_deref()
            .context("no method: give --call package.Service/Method")
    }

    /// The run the flags describe.
    ///
    /// # Errors
    /// As [`LoadFlags::plan`].
    pub fn plan(&self) -> anyhow::Result<LoadPlan> {
        self.load.plan(
            self.connection.connections,
            self.output.count_errors,
            self.output.format.lists_calls(),
            self.output.skip_first,
        )
    }
}
