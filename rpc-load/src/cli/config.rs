//! `--config FILE`: the run's settings from a JSON, TOML or YAML file, under ghz's keys
//! (its `runner.Config`: `"total"`, `"concurrency"`, `"max-duration"`, `"insecure"`,
//! `"data"`, `"metadata"`, `"import-paths"`, `"host"`, ...), merged with the command line.
//!
//! Every key is the long name of a flag (`"host"` is the positional HOST), so rpc-load's
//! own flags have keys too (`"payload-size"`). As in ghz, a flag given on the command
//! line wins over the file. The file becomes flags (`"total": 5000` is `--total=5000`,
//! an object is its JSON text, `"import-paths"` a comma-separated list) that are
//! parsed by the same parser as the command line, so a bad value fails as the flag
//! would, naming the file. Unlike ghz, an unknown key is an error (ghz ignores it).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::Args;

/// The largest config file read.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Parses `argv`; with `--config`, the file's settings come first and the command
/// line's flags override them.
///
/// # Errors
/// A `clap::Error` (usage, `--help`, `--version`) for the command line; a file that
/// cannot be read or parsed, an unknown key or a bad value otherwise.
pub fn parse_with_config(argv: Vec<OsString>) -> anyhow::Result<Args> {
    let matches = match Args::command().try_get_matches_from(&argv) {
        Ok(matches) => matches,
        // A flag another requires (--cert and --key) may come from the file: what the
        // merged settings require is checked on them.
        Err(e) if e.kind() == ErrorKind::MissingRequiredArgument => {
            let lenient = Args::command()
                .ignore_errors(true)
                .try_get_matches_from(&argv)?;
            if lenient.get_one::<PathBuf>("config").is_none() {
                return Err(e.into());
            }
            lenient
        }
        Err(e) => return Err(e.into()),
    };
    let Some(path) = matches.get_one::<PathBuf>("config").cloned() else {
        return Ok(Args::from_arg_matches(&matches)?);
    };
    let settings = read(&path)?;
    let program = argv.first().cloned().unwrap_or_else(|| "rpc-load".into());
    let mut merged = vec![program];
    merged.extend(flags_of(&settings, &matches).with_context(|| in_file(&path))?);
    // The file alone first, so that its errors name it (but for what the command line
    // may complete).
    match Args::command().try_get_matches_from(&merged) {
        Err(e) if e.kind() != ErrorKind::MissingRequiredArgument => {
            bail!("{}: {}", in_file(&path), e.render().to_string().trim())
        }
        _ => {}
    }
    merged.extend(argv.into_iter().skip(1));
    let matches = Args::command().try_get_matches_from(merged)?;
    Ok(Args::from_arg_matches(&matches)?)
}

fn in_file(path: &Path) -> String {
    format!("config file {}", path.display())
}

/// Reads a config file as JSON, TOML or YAML (by its extension; otherwise each is tried).
///
/// # Errors
/// An unreadable or oversized file, a parse error, or a file that is not a table of keys.
pub fn read(path: &Path) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text))
        .with_context(|| format!("cannot read {}", in_file(path)))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        bail!("{} is larger than {MAX_CONFIG_BYTES} bytes", in_file(path));
    }
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let value = match extension.as_deref() {
        Some("json") => from_json(&text),
        Some("toml") => from_toml(&text),
        Some("yaml" | "yml") => from_yaml(&text),
        _ => from_json(&text)
            .or_else(|_| from_toml(&text))
            .or_else(|_| from_yaml(&text))
            .map_err(|_| anyhow!("neither JSON, TOML nor YAML")),
    }
    .with_context(|| in_file(path))?;
    match value {
        serde_json::Value::Object(map) => Ok(map),
        serde_json::Value::Null => Ok(serde_json::Map::new()),
        other => bail!(
            "{}: expected a table of settings, found {}",
            in_file(path),
            kind(&other)
        ),
    }
}

fn from_json(text: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(text).context("not valid JSON")
}

fn from_toml(text: &str) -> anyhow::Result<serde_json::Value> {
    toml::from_str(text).context("not valid TOML")
}

fn from_yaml(text: &str) -> anyhow::Result<serde_json::Value> {
    serde_yaml_ng::from_str(text).context("not valid YAML")
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a table",
    }
}

/// The flags `settings` stand for, leaving out those `cli` has from the command line.
///
/// # Errors
/// An unknown key, or a value of a kind no flag takes.
fn flags_of(
    settings: &serde_json::Map<String, serde_json::Value>,
    cli: &ArgMatches,
) -> anyhow::Result<Vec<OsString>> {
    let command = Args::command();
    let from_cli = |id: &str| cli.value_source(id) == Some(ValueSource::CommandLine);
    let mut flags = Vec::new();
    for (key, value) in settings {
        if key == "host" || key == "addr" {
            if !(from_cli("address") || from_cli("addr")) {
                flags.push(scalar(key, value)?.into());
            }
            continue;
        }
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && !matches!(key.as_str(), "config" | "help" | "version"))
            .ok_or_else(|| anyhow!("unknown key {key:?} (keys are ghz's, the long names of the flags: see docs/ghz.md)"))?;
        if from_cli(arg.get_id().as_str()) || value.is_null() {
            continue;
        }
        let text = match value {
            serde_json::Value::Array(items) if key == "import-paths" => items
                .iter()
                .map(|item| scalar(key, item))
                .collect::<anyhow::Result<Vec<_>>>()?
                .join(","),
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => value.to_string(),
            scalar_value => scalar(key, scalar_value)?,
        };
        flags.push(format!("--{key}={text}").into());
    }
    Ok(flags)
}

/// A string, number or boolean as flag text.
fn scalar(key: &str, value: &serde_json::Value) -> anyhow::Result<String> {
    Ok(match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Bool(b) => b.to_string(),
        other => bail!(
            "{key:?} must be a string, a number or a boolean, not {}",
            kind(other)
        ),
    })
}
