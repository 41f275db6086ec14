//! The floor that scripts/bench measures unary calls against: a plain blocking-socket
//! ping-pong over TCP (one message each way per round trip, `TCP_NODELAY`, a thread per
//! connection, no framing beyond a fixed size), timed as rpc-load times a call (two
//! clock reads per round trip).
//!
//!   socket-pingpong server 127.0.0.1:47100
//!   socket-pingpong client 127.0.0.1:47100 --size 64 --duration 5s --warmup 2000
//!
//! The client prints one CSV header line and one line of figures, with rpc-load's
//! `-O csv-summary` column names: `count,rps,p50_ns,p99_ns,client_cpu_s` (the round
//! trips counted after the warm-up; `client_cpu_s` is the whole process's user and
//! system time, from `/proc/self/stat`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("server") if args.len() == 2 => serve(&args[1]),
        Some("client") if args.len() >= 2 => client(&args[1], &args[2..]),
        _ => Err("usage: socket-pingpong server ADDR | client ADDR [--size N] [--duration 5s] [--warmup N]".into()),
    };
    if let Err(e) = result {
        eprintln!("socket-pingpong: {e}");
        std::process::exit(2);
    }
}

type Result<T> = std::result::Result<T, String>;

/// Echoes each connection's messages (their size is the connection's first 4 bytes,
/// at most 1 MiB) until it closes.
fn serve(addr: &str) -> Result<()> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || {
            let _ = echo(stream);
        });
    }
    Ok(())
}

fn echo(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let size = u32::from_le_bytes(size) as usize;
    if size == 0 || size > 1 << 20 {
        return Ok(());
    }
    let mut buf = vec![0u8; size];
    loop {
        stream.read_exact(&mut buf)?;
        stream.write_all(&buf)?;
    }
}

fn client(addr: &str, options: &[String]) -> Result<()> {
    let (mut size, mut duration, mut warmup) = (64usize, Duration::from_secs(5), 2000u64);
    let mut it = options.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--size" => size = value.parse().map_err(|e| format!("--size: {e}"))?,
            "--warmup" => warmup = value.parse().map_err(|e| format!("--warmup: {e}"))?,
            "--duration" => {
                let secs = value.strip_suffix('s').unwrap_or(value);
                duration =
                    Duration::from_secs_f64(secs.parse().map_err(|e| format!("--duration: {e}"))?);
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if size == 0 || size > 1 << 20 {
        return Err("--size must be 1 to 1048576".into());
    }
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .write_all(&(size as u32).to_le_bytes())
        .map_err(|e| e.to_string())?;
    let mut buf = vec![7u8; size];
    let mut round_trip = |buf: &mut Vec<u8>| -> Result<()> {
        stream.write_all(buf).map_err(|e| e.to_string())?;
        stream.read_exact(buf).map_err(|e| e.to_string())
    };
    for _ in 0..warmup {
        round_trip(&mut buf)?;
    }
    let mut latencies = Vec::with_capacity(1 << 20);
    let started = Instant::now();
    loop {
        let sent = Instant::now();
        round_trip(&mut buf)?;
        let now = Instant::now();
        latencies.push(now.duration_since(sent).as_nanos() as u64);
        if now.duration_since(started) >= duration {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!("count,rps,p50_ns,p99_ns,client_cpu_s");
    println!(
        "{},{:.2},{},{},{:.3}",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        at(0.50),
        at(0.99),
        cpu_seconds()
    );
    Ok(())
}

/// This process's user and system time, in seconds (0 where `/proc` has none).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis: utime and stime are the 12th and
    // 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
