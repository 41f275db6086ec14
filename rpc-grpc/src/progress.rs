//! A connection's progress, watched: its socket writes (a connection with bytes to write
//! whose writes make no progress for [`GrpcConfig::write_timeout`] is closed) and its
//! reads (after [`GrpcConfig::keepalive_interval`] without a byte from the peer, a PING;
//! no byte within [`GrpcConfig::keepalive_timeout`] after it, the connection is closed).
//!
//! The I/O wrapper ([`Watched`]) only notes events in atomics, reading no clock: the
//! driver's coarse timer reads them ([`Activity::snapshot`]) and the sans-IO
//! [`Watchdog`] turns them, with the tick's time, into what to do.
//!
//! [`GrpcConfig::write_timeout`]: crate::GrpcConfig::write_timeout
//! [`GrpcConfig::keepalive_interval`]: crate::GrpcConfig::keepalive_interval
//! [`GrpcConfig::keepalive_timeout`]: crate::GrpcConfig::keepalive_timeout

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// What the I/O did, as counters.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Reads that returned bytes.
    reads: AtomicU64,
    /// The stall under way (a write or flush returned `Pending` with no progress since),
    /// by number; 0 when none.
    stalled: AtomicU64,
    /// Stalls so far (numbers them).
    stalls: AtomicU64,
}

/// [`Activity`] at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Snapshot {
    /// Reads that returned bytes so far.
    pub(crate) reads: u64,
    /// The write stall under way, by number; 0 when none.
    pub(crate) stalled: u64,
}

impl Activity {
    /// The counters now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            reads: self.reads.load(Ordering::Relaxed),
            stalled: self.stalled.load(Ordering::Relaxed),
        }
    }

    fn read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    fn progress(&self) {
        if self.stalled.load(Ordering::Relaxed) != 0 {
            self.stalled.store(0, Ordering::Relaxed);
        }
    }

    fn pending(&self) {
        if self.stalled.load(Ordering::Relaxed) == 0 {
            let n = self.stalls.fetch_add(1, Ordering::Relaxed) + 1;
            self.stalled.store(n, Ordering::Relaxed);
        }
    }
}

/// An I/O object whose reads and write stalls are noted in an [`Activity`].
#[derive(Debug)]
pub(crate) struct Watched<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    /// `io`, its reads and write stalls noted in `activity`.
    pub(crate) fn new(io: T, activity: Arc<Activity>) -> Watched<T> {
        Watched { io, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        match &polled {
            Poll::Pending => self.activity.pending(),
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.progress(),
            Poll::Ready(_) => {}
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        match &polled {
            Poll::Pending => self.activity.pending(),
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.progress(),
            Poll::Ready(_) => {}
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        match &polled {
            Poll::Pending => self.activity.pending(),
            Poll::Ready(Ok(())) => self.activity.progress(),
            Poll::Ready(Err(_)) => {}
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What the driver is to do at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing.
    Fine,
    /// Send a keepalive PING.
    Ping,
    /// Close the connection, for this reason.
    Close(&'static str),
}

/// The connection's timers, sans-IO: fed a [`Snapshot`] and the time at each tick.
#[derive(Debug)]
pub(crate) struct Watchdog {
    write_timeout: Duration,
    keepalive: Option<(Duration, Duration)>,
    last: Snapshot,
    /// When a read last came (when first seen).
    heard: Instant,
    /// When the PING unanswered went.
    pinged: Option<Instant>,
    /// The write stall under way and when it was first seen.
    stall: Option<(u64, Instant)>,
}

impl Watchdog {
    /// A watchdog from `now` on: writes may stall `write_timeout`; `keepalive` is the
    /// silence before a PING and how long its answer may take, if keepalives are on.
    pub(crate) fn new(
        now: Instant,
        write_timeout: Duration,
        keepalive: Option<(Duration, Duration)>,
    ) -> Watchdog {
        Watchdog {
            write_timeout,
            keepalive,
            last: Snapshot::default(),
            heard: now,
            pinged: None,
            stall: None,
        }
    }

    /// How often to tick: a quarter of the shortest timeout (the timeouts fire up to a
    /// tick late), from 10 ms to 1 s.
    pub(crate) fn tick(&self) -> Duration {
        let mut shortest = self.write_timeout;
        if let Some((interval, timeout)) = self.keepalive {
            shortest = shortest.min(interval).min(timeout);
        }
        (shortest / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// What to do at `now`, the I/O having done `seen` so far.
    pub(crate) fn check(&mut self, now: Instant, seen: Snapshot) -> Verdict {
        if seen.reads != self.last.reads {
            self.heard = now;
            self.pinged = None;
        }
        self.last = seen;
        self.stall = match (seen.stalled, self.stall) {
            (0, _) => None,
            (n, Some((m, since))) if n == m => Some((m, since)),
            (n, _) => Some((n, now)),
        };
        if let Some((_, since)) = self.stall {
            if now.duration_since(since) >= self.write_timeout {
                return Verdict::Close("socket writes made no progress within the write timeout");
            }
        }
        let Some((interval, timeout)) = self.keepalive else {
            return Verdict::Fine;
        };
        match self.pinged {
            Some(at) if now.duration_since(at) >= timeout => {
                Verdict::Close("no answer to a keepalive PING within the keepalive timeout")
            }
            Some(_) => Verdict::Fine,
            None if now.duration_since(self.heard) >= interval => {
                self.pinged = Some(now);
                Verdict::Ping
            }
            None => Verdict::Fine,
        }
    }
}

/// A connection's timers at work: the [`Watchdog`] on its coarse tick, and the keepalive
/// PINGs it asks for (one at a time, on h2's handle).
pub(crate) struct Timers {
    watchdog: Watchdog,
    ticks: tokio::time::Interval,
    activity: Arc<Activity>,
    ping_pong: Option<h2::PingPong>,
    pinging: bool,
}

impl Timers {
    /// Timers of a connection whose I/O notes `activity`, with `config`'s write timeout
    /// and keepalive: see [`Watchdog::new`].
    pub(crate) fn new(
        config: &crate::GrpcConfig,
        activity: Arc<Activity>,
        ping_pong: Option<h2::PingPong>,
    ) -> Timers {
        let keepalive = config
            .keepalive_interval
            .map(|i| (i, config.keepalive_timeout));
        let now = Instant::now();
        let watchdog = Watchdog::new(now, config.write_timeout, keepalive);
        let mut ticks = tokio::time::interval_at(now + watchdog.tick(), watchdog.tick());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Timers {
            watchdog,
            ticks,
            activity,
            ping_pong,
            pinging: false,
        }
    }

    /// Resolves when the connection is to be closed, with why; sends the keepalive
    /// PINGs meanwhile. Cancel-safe: the driver polls it beside the connection.
    pub(crate) async fn closing(&mut self) -> &'static str {
        loop {
            tokio::select! {
                _ = self.ticks.tick() => {
                    match self.watchdog.check(Instant::now(), self.activity.snapshot()) {
                        Verdict::Fine => {}
                        Verdict::Ping => {
                            if let Some(ping_pong) = self.ping_pong.as_mut().filter(|_| !self.pinging) {
                                self.pinging = ping_pong.send_ping(h2::Ping::opaque()).is_ok();
                            }
                        }
                        Verdict::Close(why) => return why,
                    }
                }
                () = pong(&mut self.ping_pong), if self.pinging => self.pinging = false,
            }
        }
    }
}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timers")
            .field("watchdog", &self.watchdog)
            .finish_non_exhaustive()
    }
}

/// The answer to the keepalive PING sent (never resolves without a PING handle).
async fn pong(ping_pong: &mut Option<h2::PingPong>) {
    match ping_pong {
        Some(ping_pong) => {
            let _ = std::future::poll_fn(|cx| ping_pong.poll_pong(cx)).await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    fn snap(reads: u64, stalled: u64) -> Snapshot {
        Snapshot { reads, stalled }
    }

    #[test]
    fn a_write_stall_closes_after_the_write_timeout_and_progress_restarts_it() {
        let t = Instant::now();
        let mut dog = Watchdog::new(t, Duration::from_millis(1000), None);
        assert_eq!(dog.check(at(t, 100), snap(0, 1)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 900), snap(0, 1)), Verdict::Fine);
        // Progress, then a new stall: counted from when it was seen.
        assert_eq!(dog.check(at(t, 1000), snap(0, 0)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 1050), snap(0, 2)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 2000), snap(0, 2)), Verdict::Fine);
        assert!(matches!(
            dog.check(at(t, 2050), snap(0, 2)),
            Verdict::Close(_)
        ));
        // A stall that ended and another that began between two ticks is a new one.
        let mut dog = Watchdog::new(t, Duration::from_millis(1000), None);
        assert_eq!(dog.check(at(t, 0), snap(0, 1)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 900), snap(0, 2)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 1800), snap(0, 2)), Verdict::Fine);
    }

    #[test]
    fn silence_gets_a_ping_and_an_unanswered_ping_closes() {
        let t = Instant::now();
        let keepalive = Some((Duration::from_millis(500), Duration::from_millis(300)));
        let mut dog = Watchdog::new(t, Duration::from_secs(30), keepalive);
        assert_eq!(dog.check(at(t, 400), snap(0, 0)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 500), snap(0, 0)), Verdict::Ping);
        // Answered (bytes came): quiet again from there.
        assert_eq!(dog.check(at(t, 600), snap(1, 0)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 1000), snap(1, 0)), Verdict::Fine);
        assert_eq!(dog.check(at(t, 1100), snap(1, 0)), Verdict::Ping);
        assert_eq!(dog.check(at(t, 1300), snap(1, 0)), Verdict::Fine);
        assert!(matches!(
            dog.check(at(t, 1400), snap(1, 0)),
            Verdict::Close(_)
        ));
    }

    #[test]
    fn a_talking_peer_gets_no_ping_and_keepalive_off_never_pings() {
        let t = Instant::now();
        let keepalive = Some((Duration::from_millis(500), Duration::from_millis(300)));
        let mut dog = Watchdog::new(t, Duration::from_secs(30), keepalive);
        for n in 1..100 {
            assert_eq!(dog.check(at(t, n * 100), snap(n, 0)), Verdict::Fine);
        }
        let mut dog = Watchdog::new(t, Duration::from_secs(30), None);
        assert_eq!(dog.check(at(t, 100_000), snap(0, 0)), Verdict::Fine);
        assert_eq!(dog.tick(), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn the_wrapper_counts_reads_and_notes_a_stalled_write() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(16);
        let activity = Arc::new(Activity::default());
        let mut watched = Watched::new(a, activity.clone());
        b.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        watched.read_exact(&mut buf).await.unwrap();
        assert_eq!(activity.snapshot(), snap(1, 0));
        // 16 bytes fit; the 17th waits for the peer to read.
        watched.write_all(&[0; 16]).await.unwrap();
        let more = tokio::time::timeout(Duration::from_millis(50), watched.write_all(&[0; 1]));
        assert!(more.await.is_err());
        assert_eq!(activity.snapshot(), snap(1, 1));
        let mut sink = [0u8; 16];
        b.read_exact(&mut sink).await.unwrap();
        watched.write_all(&[0; 1]).await.unwrap();
        assert_eq!(activity.snapshot(), snap(1, 0));
    }
}
