//! `kv-client --addr URL put|get|delete|scan ...`: one call to the key-value store. Prints
//! the result; on error prints the status and exits non-zero.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use examples::kv::kv_client::KvClient;
use examples::kv::*;
use examples::transport::TransportArgs;
use examples::KV_MAX_MESSAGE_SIZE;

/// A client of the key-value store.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
    /// Call timeout in milliseconds (0 = none).
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Stores a value: from --value-file, or --value.
    Put {
        /// The key.
        key: String,
        /// File whose contents become the value.
        #[arg(long, conflicts_with = "value")]
        value_file: Option<PathBuf>,
        /// The value as a string.
        #[arg(long)]
        value: Option<String>,
    },
    /// Prints a value (raw bytes to stdout, or to --output).
    Get {
        /// The key.
        key: String,
        /// Write the value to this file instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Removes a key.
    Delete {
        /// The key.
        key: String,
    },
    /// Lists keys with a prefix, one per line with the value's size.
    Scan {
        /// Key prefix ("" for all).
        prefix: String,
        /// Most entries.
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Prints every change of keys with a prefix as it happens (revision, key, size or
    /// "deleted"), until Ctrl-C or --count changes.
    Watch {
        /// Key prefix ("" for all).
        prefix: String,
        /// Stop after this many changes.
        #[arg(long)]
        count: Option<u64>,
    },
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let resolved = args
        .transport
        .resolve("auto://127.0.0.1:50052", KV_MAX_MESSAGE_SIZE)?;
    // A watch runs until stopped: no default timeout for it.
    let watching = matches!(args.command, Command::Watch { .. });
    let timeout =
        (args.timeout_ms > 0 && !watching).then(|| Duration::from_millis(args.timeout_ms));
    let client = KvClient::new(resolved.connect(timeout).await?);
    match args.command {
        Command::Put {
            key,
            value_file,
            value,
        } => {
            let value = match (value_file, value) {
                (Some(path), _) => std::fs::read(&path)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?,
                (None, Some(v)) => v.into_bytes(),
                (None, None) => anyhow::bail!("put needs --value-file or --value"),
            };
            let len = value.len();
            let reply = client
                .put(PutRequest {
                    key: key.clone(),
                    value: value.into(),
                })
                .await?
                .into_inner();
            println!(
                "put {key:?}: {len} bytes{}",
                if reply.replaced { " (replaced)" } else { "" }
            );
        }
        Command::Get { key, output } => {
            let value = client.get(GetRequest { key }).await?.into_inner().value;
            match output {
                Some(path) => std::fs::write(&path, &value)?,
                None => std::io::stdout().write_all(&value)?,
            }
        }
        Command::Delete { key } => {
            client.delete(DeleteRequest { key: key.clone() }).await?;
            println!("deleted {key:?}");
        }
        Command::Scan { prefix, limit } => {
            let reply = client
                .scan(ScanRequest {
                    prefix,
                    limit,
                    keys_only: false,
                })
                .await?
                .into_inner();
            for entry in &reply.entries {
                println!("{}\t{}", entry.key, entry.value.len());
            }
            if reply.truncated {
                println!("(more entries match)");
            }
        }
        Command::Watch { prefix, count } => {
            let mut changes = client.watch(WatchRequest { prefix }).await?.into_inner();
            let mut seen = 0;
            while count.is_none_or(|n| seen < n) {
                let Some(event) = changes.message().await? else {
                    break;
                };
                if event.deleted {
                    println!("{}\t{}\tdeleted", event.revision, event.key);
                } else {
                    println!("{}\t{}\t{}", event.revision, event.key, event.value_size);
                }
                std::io::stdout().flush()?;
                seen += 1;
            }
        }
    }
    Ok(())
}
