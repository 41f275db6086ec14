//! Frames echoed at the transport level, with no RPC runtime above: the round trip of
//! the transport alone, to set against perftest's raw verbs below it and an RPC echo
//! above it (`scripts/bench-rdma` reports the three side by side).
//!
//! ```text
//! pingpong serve rdma://10.77.0.2:47300
//! pingpong ping rdma://10.77.0.2:47300 [ROUND_TRIPS] [PAYLOAD_BYTES]
//! ```
//!
//! `ping` sends one frame at a time (a request frame of PAYLOAD_BYTES, 64 by default),
//! waits for it to come back, and prints the round trip's median, 99th percentile and
//! mean in microseconds, after 10% of ROUND_TRIPS (10,000 by default) as warm-up.

use std::time::{Duration, Instant};

use bytes::BufMut;
use rdmarpc_core::wire::{FrameKind, Header};
use rdmarpc_core::{Connection, Endpoint, Listener};
use rdmarpc_transport::{AnyConnection, AnyListener, TransportSettings};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: pingpong serve URL | pingpong ping URL [ROUND_TRIPS] [PAYLOAD_BYTES]";
    let (mode, url) = match (args.first(), args.get(1)) {
        (Some(mode), Some(url)) => (mode.as_str(), url),
        _ => return Err(usage.into()),
    };
    let endpoint: Endpoint = url.parse()?;
    let settings = TransportSettings::default();
    match mode {
        "serve" => serve(&endpoint, &settings).await,
        "ping" => {
            let number = |i: usize, default: usize| -> Result<usize, Error> {
                Ok(args
                    .get(i)
                    .map(|s| s.parse())
                    .transpose()?
                    .unwrap_or(default))
            };
            let conn = rdmarpc_transport::connect(&endpoint, &settings).await?;
            let (round_trips, payload) = (number(2, 10_000)?, number(3, 64)?);
            // On a worker of the runtime, as an application's tasks run (the main
            // future runs on the main thread: each reply would cross threads).
            tokio::spawn(async move { ping(&conn, round_trips, payload).await }).await?
        }
        _ => Err(usage.into()),
    }
}

/// Echoes every frame of every connection back on it.
async fn serve(endpoint: &Endpoint, settings: &TransportSettings) -> Result<(), Error> {
    let mut listener = AnyListener::bind(endpoint, settings).await?;
    println!("pingpong: serving {}", listener.local_addr());
    loop {
        let conn = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = echo(&conn).await {
                eprintln!("pingpong: connection ended: {e}");
            }
        });
    }
}

async fn echo(conn: &AnyConnection) -> Result<(), Error> {
    while let Some(frame) = conn.recv().await? {
        let mut out = conn.alloc(frame.len()).await?;
        out.put_slice(&frame);
        drop(frame);
        conn.send(out).await?;
    }
    Ok(())
}

async fn ping(conn: &AnyConnection, round_trips: usize, payload: usize) -> Result<(), Error> {
    let warmup = round_trips / 10;
    let mut times = Vec::with_capacity(round_trips);
    let body = vec![0x5a_u8; payload];
    for i in 0..warmup + round_trips {
        let mut header = Header::new(FrameKind::Request, i as u64 + 1);
        header.payload_len = u32::try_from(payload)?;
        let start = Instant::now();
        let mut out = conn.alloc(header.frame_len()).await?;
        out.put_slice(&header.encode());
        out.put_slice(&body);
        conn.send(out).await?;
        let back = conn
            .recv()
            .await?
            .ok_or("the server closed the connection")?;
        let elapsed = start.elapsed();
        if back.len() != header.frame_len() || back[..8] != header.encode()[..8] {
            return Err(format!("round trip {i}: a different frame came back").into());
        }
        if i >= warmup {
            times.push(elapsed);
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "pingpong: {round_trips} round trips of {payload} B: p50 {:.1} us, p99 {:.1} us, mean {:.1} us",
        us(at(0.5)),
        us(at(0.99)),
        us(mean)
    );
    Ok(())
}
