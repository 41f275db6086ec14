//! `echo-client --addr URL --count N --concurrency C --size BYTES`: makes N echo calls, C at
//! a time, checks every reply's content, prints how many succeeded. Exits non-zero if
//! any failed. `--max-size M` gives each call a size drawn from 0..=M instead (a soak:
//! `scripts/soak`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use examples::echo::echo_client::EchoClient;
use examples::echo::EchoRequest;
use examples::transport::TransportArgs;

/// Drives the echo service and verifies every reply.
#[derive(Parser, Debug)]
struct Args {
    #[command(flatten)]
    transport: TransportArgs,
    /// Number of calls.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Calls in flight at once (all on one connection).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// When set, each call's payload size is drawn (seeded by the call number) from
    /// 0..=MAX_SIZE instead of `--size`.
    #[arg(long)]
    max_size: Option<usize>,
    /// Per-call timeout in milliseconds (0 = none).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

/// The size of call `i`: `size`, or drawn from 0..=max (splitmix64 of `i`).
fn size_of(i: usize, size: usize, max: Option<usize>) -> usize {
    let Some(max) = max else { return size };
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % (max as u64 + 1)) as usize
}

/// The payload of call `i`: distinct per call, so a reply routed to the wrong caller shows.
fn payload(i: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7)) as u8)
        .collect()
}

#[tokio::main]
async fn main() {
    examples::init_tracing();
    if let Err(e) = run(Args::parse()).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let resolved = args.transport.resolve("auto://127.0.0.1:50051", 16 << 20)?;
    let timeout = (args.timeout_ms > 0).then(|| Duration::from_millis(args.timeout_ms));
    let channel = resolved.connect(timeout).await?;
    let transport = channel.connection().expect("connected").transport();
    let client = EchoClient::new(channel.clone());
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let wrong = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (client, next, ok) = (client.clone(), next.clone(), ok.clone());
        let (wrong, bytes) = (wrong.clone(), bytes.clone());
        let (count, size, max_size) = (args.count, args.size, args.max_size);
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let sent = payload(i, size_of(i, size, max_size));
                let request = EchoRequest {
                    payload: sent.clone().into(),
                    delay_ms: 0,
                    ..Default::default()
                };
                match client.echo(request).await {
                    Ok(reply) if reply.get_ref().payload == sent => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(sent.len(), Ordering::Relaxed);
                    }
                    Ok(_) => {
                        wrong.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(call = i, "reply content differs from the request")
                    }
                    Err(status) => tracing::error!(call = i, "call failed: {status}"),
                }
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    let elapsed = start.elapsed();
    let ok = ok.load(Ordering::Relaxed);
    let wrong = wrong.load(Ordering::Relaxed);
    let sizes = match args.max_size {
        Some(max) => format!(
            "0..={max} bytes, {} MiB in all",
            bytes.load(Ordering::Relaxed) >> 20
        ),
        None => format!("{} bytes each", args.size),
    };
    println!(
        "{ok} of {} calls succeeded over {} ({sizes}, concurrency {}) in {:.3}s: {:.0} calls/s; {wrong} wrong replies, {} failed",
        args.count,
        transport.scheme(),
        args.concurrency,
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64(),
        args.count - ok - wrong
    );
    #[cfg(feature = "rdma")]
    if let Some(counters) = channel.connection().and_then(|c| c.rdma_counters()) {
        println!("rdma counters: {counters:?}");
    }
    if ok != args.count {
        anyhow::bail!("{} calls failed", args.count - ok);
    }
    Ok(())
}
