//! `rpc-fuzz`: runs the fuzz targets on stable Rust, deterministically.
//!
//! ```text
//! rpc-fuzz <TARGET|all> [--runs N] [--seed S] [--corpus DIR] [--artifacts DIR]
//! rpc-fuzz <TARGET> --input FILE...      replay files (a crash artifact) only
//! rpc-fuzz <TARGET|all> --write-seeds    write the targets' seeds into the corpus
//! ```
//! Prints one line per target and then `N passed, M failed`; exits non-zero on a crash,
//! after saving the input to `<artifacts>/<target>/crash-<hash>` and printing it as hex.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Parser;
use rpc_fuzz::runner::{self, Crash, Options, Origin};
use rpc_fuzz::{Target, TARGETS};

/// Runs the fuzz targets: replays each one's corpus, then N mutated inputs.
#[derive(Debug, Parser)]
#[command(name = "rpc-fuzz", version, args_override_self = true)]
struct Args {
    /// The target (frame, metadata, rdma_control, handshake) or `all`.
    target: String,
    /// Mutated inputs per target, after the corpus.
    #[arg(long, default_value_t = 200_000)]
    runs: u64,
    /// Seed of the mutations: the same seed runs the same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Corpus root (inputs of target T are the files of DIR/T/).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus"))]
    corpus: PathBuf,
    /// Where crashing inputs are saved (DIR/T/crash-<hash>).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/artifacts"))]
    artifacts: PathBuf,
    /// Longest input the mutations make, in bytes.
    #[arg(long, default_value_t = 128 * 1024)]
    max_len: usize,
    /// Replay these files only (no corpus, no mutations).
    #[arg(long, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Write each target's seed inputs into its corpus folder, then exit.
    #[arg(long)]
    write_seeds: bool,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rpc-fuzz: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs what `args` ask; `Ok(false)` when a target crashed.
fn run(args: Args) -> anyhow::Result<bool> {
    let targets: Vec<&Target> = if args.target == "all" {
        TARGETS.iter().collect()
    } else {
        let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
        vec![rpc_fuzz::target(&args.target).with_context(|| {
            format!(
                "no target {:?} (targets: {}, all)",
                args.target,
                names.join(", ")
            )
        })?]
    };
    if args.write_seeds {
        for target in targets {
            write_seeds(target, &args.corpus)?;
        }
        return Ok(true);
    }
    runner::quiet_panics();
    let options = Options {
        runs: args.runs,
        seed: args.seed,
        corpus: args.corpus,
        artifacts: args.artifacts,
        max_len: args.max_len,
    };
    let (mut passed, mut failed) = (0, 0);
    for target in targets {
        let crash = if args.input.is_empty() {
            let outcome = runner::run(target, &options)?;
            let secs = outcome.elapsed.as_secs_f64();
            let tail = format!(
                "{} corpus inputs, {} mutated (seed {}), {secs:.2} s",
                outcome.replayed, outcome.generated, options.seed
            );
            summary(target.name, outcome.crash.as_ref(), &tail);
            outcome.crash
        } else {
            let mut files = Vec::new();
            for path in &args.input {
                let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
                files.push((path.clone(), bytes));
            }
            let crash = runner::replay(target, &files);
            summary(
                target.name,
                crash.as_ref(),
                &format!("{} files", files.len()),
            );
            crash
        };
        if crash.is_some() {
            failed += 1;
        } else {
            passed += 1;
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(failed == 0)
}

/// Prints the target's line, and the crash's details if it crashed.
fn summary(name: &str, crash: Option<&Crash>, tail: &str) {
    let Some(crash) = crash else {
        println!("{name}: ok, {tail}");
        return;
    };
    let origin = match &crash.origin {
        Origin::File(path) => path.display().to_string(),
        Origin::Generated(n) => format!("mutated input #{n}"),
    };
    println!("{name}: FAILED on {origin}: {}", crash.message);
    println!("{name}:   {tail}");
    println!(
        "{name}:   input ({} bytes): {}",
        crash.input.len(),
        runner::hex(&crash.input, 4096)
    );
    if let Some(path) = &crash.artifact {
        println!("{name}:   saved to {}", path.display());
        println!(
            "{name}:   replay: cargo run --release -p rpc-fuzz -- {name} --input {}",
            path.display()
        );
    }
}

/// Writes `target`'s seeds to `corpus/<target>/<seed name>`.
fn write_seeds(target: &Target, corpus: &std::path::Path) -> anyhow::Result<()> {
    let dir = corpus.join(target.name);
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let seeds = (target.seeds)();
    for (name, bytes) in &seeds {
        if name.contains(['/', '\\']) {
            bail!("bad seed name {name:?}");
        }
        std::fs::write(dir.join(name), bytes)
            .with_context(|| format!("{}/{name}", dir.display()))?;
    }
    println!(
        "{}: {} seeds written to {}",
        target.name,
        seeds.len(),
        dir.display()
    );
    Ok(())
}
