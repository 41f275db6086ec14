//! [`Session`]: the protocol state of one RDMA connection, sans-IO (in the manner of
//! quinn-proto). It owns credits, lent and borrowed rendezvous buffers, the READs to
//! post and in flight, read-done tokens, the order in which received frames go up,
//! pings, liveness and the loan timeout. It posts nothing and reads no clock: the
//! connection's driver feeds it what happened (messages received, READs completed,
//! frames consumed, the time) and carries out what it asks for (control messages, READs,
//! frames to hand up), all under the connection's one lock.
//!
//! ```text
//!   inputs                                   outputs
//!   handle_message(prefix)                   poll_read()      -> READ to post
//!   classify_eager(frame) / deliver(frame)   poll_control()   -> control message to send
//!   handle_descriptor(rendezvous)            poll_deliver()   -> frame to hand up, in order
//!   handle_pushed_descriptor / handle_piece
//!   handle_read_complete(tag, ..)            poll_timeout()   -> when handle_timeout is due
//!   handle_read_dones(tokens)                closed()         -> why the session ended
//!   frame_consumed(token, len)
//!   handle_reposted() / handle_timeout(now)
//!   send side: try_take_data, try_reserve_lending, lend, advertise
//! ```
//!
//! `tests` drives two sessions against each other over a simulated wire and NIC with
//! seeded random schedules and checks the invariants the transport relies on.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::protocol::{Borrower, Credits, Lender, LoanLimit, Prefix, Rendezvous};
mod close;
mod pushed;
mod receive;
mod send;

pub(crate) use self::close::Close;
pub(crate) use self::receive::{refused, MAX_CHUNKS};

/// Limits and timers of one session, from the configuration and the handshake.
#[derive(Debug, Clone)]
pub(crate) struct SessionConfig {
    /// Receive slots the peer posted (our credits).
    pub(crate) peer_slots: u32,
    /// Receive slots we post at first (the peer's credits); the ring grows when the
    /// peer runs out of credit (it says so: `Prefix::WANT`), doubling up to `max_slots`.
    pub(crate) own_slots: u32,
    pub(crate) max_slots: u32,
    /// Unadvertised re-posts that make an explicit credit message due.
    pub(crate) credit_threshold: u32,
    /// What we may lend the peer at once (the smaller of both sides' figures).
    pub(crate) lend: LoanLimit,
    /// What we accept to borrow at once (what we announced).
    pub(crate) borrow: LoanLimit,
    /// Largest frame accepted.
    pub(crate) max_frame: usize,
    /// Largest payload accepted; larger frames are refused (their header goes up).
    pub(crate) max_message_size: usize,
    /// READ chunk size (a frame is split into at most `MAX_CHUNKS` chunks).
    pub(crate) read_chunk: usize,
    /// READ work requests in flight at most.
    pub(crate) read_wr_budget: usize,
    /// Read-done tokens that fit one control message.
    pub(crate) max_tokens: usize,
    pub(crate) ping_interval: Duration,
    pub(crate) ping_timeout: Duration,
    pub(crate) loan_timeout: Duration,
}

/// A READ the driver is to post: write `head` at the start of a buffer, then pull `len`
/// bytes at `offset` under `rkey` after it, in chunks of `chunk`, tagged `tag` (given
/// back to [`Session::handle_read_complete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) tag: u64,
    pub(crate) offset: u64,
    pub(crate) rkey: u32,
    pub(crate) len: usize,
    pub(crate) chunk: usize,
    /// The frame's first bytes, carried inline by the descriptor (often empty).
    pub(crate) head: Vec<u8>,
}

/// A control message the driver is to send (a send slot and a credit are taken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Control {
    pub(crate) tokens: Vec<u64>,
    pub(crate) advert: Advert,
}

/// What every outgoing message's prefix carries besides its kind and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Advert {
    pub(crate) flags: u8,
    pub(crate) granted: u32,
    pub(crate) reposted: u64,
}

impl Advert {
    /// The prefix of a message of `kind` carrying this advert.
    pub(crate) fn prefix(self, kind: crate::protocol::Kind, n_tokens: u16) -> Prefix {
        Prefix {
            kind,
            flags: self.flags,
            n_tokens,
            granted: self.granted,
            reposted: self.reposted,
        }
    }
}

/// Receive slots a peer may claim to have posted at most.
const MAX_GRANT: u32 = 1 << 16;

/// A place in the arrival order of received frames.
#[derive(Debug)]
enum InOrder<F> {
    /// Received, waiting for an earlier frame's READ.
    Ready(F),
    /// A frame being READ under this tag.
    Reading(u64),
}

#[derive(Debug)]
struct Loan {
    /// The loan's key in the verbs layer (which owns the buffer).
    key: u32,
    at: Instant,
}

#[derive(Debug)]
struct Reading {
    token: u64,
    /// The frame's length (inline head and lent bytes).
    frame_len: usize,
    /// Bytes lent (what the borrower counts for the loan).
    lent: usize,
    chunks: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Open,
    /// A graceful close started: no new frames, what is under way finishes.
    Closing,
    Closed(Close),
}

/// The protocol state of one connection. `F` is a received frame as the driver hands it
/// up (the transport's `RecvBuf`; tests use plain values).
#[derive(Debug)]
pub(crate) struct Session<F> {
    cfg: SessionConfig,
    credits: Credits,
    lender: Lender,
    borrower: Borrower,
    next_token: u64,
    lent: HashMap<u64, Loan>,
    /// Loans finished here (read and consumed, or refused unread), to acknowledge, with
    /// the bytes the borrower counted for each.
    done: Vec<(u64, usize)>,
    /// Descriptors waiting for READ budget, with their tags.
    pending_reads: VecDeque<(u64, Rendezvous)>,
    reading: HashMap<u64, Reading>,
    /// Pushed frames whose pieces are still coming, by token.
    pushed: HashMap<u64, pushed::Pushed>,
    /// Of them, those that go up (not refused).
    pushing: usize,
    /// Messages copied out behind pushed frames since none was being pushed.
    copied_behind: usize,
    next_tag: u64,
    read_wrs: usize,
    /// Frames held back behind a frame still being READ.
    in_order: VecDeque<InOrder<F>>,
    /// Frames to hand up, in order.
    ready: VecDeque<F>,
    /// Frames that will not go up (they arrived after the close, or broke a bound), for
    /// the driver to drop outside its lock (dropping a frame re-enters the connection).
    discarded: Vec<F>,
    ping_due: bool,
    /// We ran out of data credit: the next message asks for more slots.
    want: bool,
    /// The peer asked for more slots and the ring may still grow.
    grow_due: bool,
    /// Own receive slots the peer was last told of.
    granted_advertised: u32,
    /// When a ping was last asked for: at most one per ping interval.
    pinged: Option<Instant>,
    pong_due: bool,
    /// When a message was last seen to have arrived, as of the last `handle_timeout`.
    last_heard: Instant,
    /// Messages received in all, and as of the last `handle_timeout`: the receive path
    /// only counts (no clock read per message; liveness is judged at timer resolution,
    /// which only ever makes the measured silence shorter than the real one).
    heard: u64,
    heard_seen: u64,
    phase: Phase,
}

impl<F> Session<F> {
    pub(crate) fn new(cfg: SessionConfig, now: Instant) -> Session<F> {
        Session {
            credits: Credits::new(cfg.peer_slots, cfg.own_slots, cfg.credit_threshold),
            lender: Lender::new(cfg.lend),
            borrower: Borrower::new(cfg.borrow),
            cfg,
            next_token: 1,
            lent: HashMap::new(),
            done: Vec::new(),
            pending_reads: VecDeque::new(),
            reading: HashMap::new(),
            pushed: HashMap::new(),
            pushing: 0,
            copied_behind: 0,
            next_tag: 1,
            read_wrs: 0,
            in_order: VecDeque::new(),
            ready: VecDeque::new(),
            discarded: Vec::new(),
            ping_due: false,
            want: false,
            grow_due: false,
            granted_advertised: 0,
            pinged: None,
            pong_due: false,
            last_heard: now,
            heard: 0,
            heard_seen: 0,
            phase: Phase::Open,
        }
    }

    // ---- state -------------------------------------------------------------------

    /// Why the session ended, once it has.
    #[cfg(test)]
    pub(crate) fn closed(&self) -> Option<&Close> {
        match &self.phase {
            Phase::Closed(why) => Some(why),
            _ => None,
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed(_))
    }

    /// Open for new frames: neither closing nor closed.
    pub(crate) fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Starts a graceful close; false if one already started or the session ended.
    pub(crate) fn start_closing(&mut self) -> bool {
        let open = self.is_open();
        if open {
            self.phase = Phase::Closing;
        }
        open
    }

    /// Ends the session. Returns the frames it held (to drop outside the lock, since
    /// dropping a frame re-enters the connection), or `None` if it had already ended.
    /// After a clean close, frames already in order stay for [`Session::poll_deliver`]
    /// (what the peer sent before it closed is still received); after a failure they go.
    pub(crate) fn close(&mut self, why: Close) -> Option<Vec<F>> {
        if self.is_closed() {
            return None;
        }
        let clean = why.is_clean();
        self.phase = Phase::Closed(why);
        let mut held = std::mem::take(&mut self.discarded);
        if !clean {
            held.extend(self.ready.drain(..));
        }
        held.extend(self.in_order.drain(..).filter_map(|place| match place {
            InOrder::Ready(frame) => Some(frame),
            InOrder::Reading(_) => None,
        }));
        self.pending_reads.clear();
        self.done.clear();
        Some(held)
    }

    /// Loans this side has outstanding (lent, or reserved for frames being built).
    pub(crate) fn loans(&self) -> usize {
        self.lender.loans()
    }

    // ---- sending -----------------------------------------------------------------

    /// Whether a control message is due (credits, read-dones, ping or pong).
    pub(crate) fn control_due(&self) -> bool {
        !self.is_closed()
            && (!self.done.is_empty()
                || self.pong_due
                || self.ping_due
                || self.granted_advertised < self.cfg.own_slots
                || self.credits.should_return())
    }

    /// The control message to send now, if one is due and credit allows; the caller
    /// holds a free send slot for it.
    pub(crate) fn poll_control(&mut self) -> Option<Control> {
        let grants = self.granted_advertised < self.cfg.own_slots;
        if !self.control_due() || !self.credits.try_take_control_granting(grants) {
            return None;
        }
        let n = self.done.len().min(self.cfg.max_tokens);
        let mut tokens = Vec::with_capacity(n);
        for (token, counted) in self.done.drain(..n) {
            // From here the loan is the peer's to end (see loans.rs).
            self.borrower.acknowledged(counted);
            tokens.push(token);
        }
        let mut advert = self.advertise();
        if std::mem::take(&mut self.pong_due) {
            advert.flags |= Prefix::PONG;
        }
        if std::mem::take(&mut self.ping_due) {
            advert.flags |= Prefix::PING;
        }
        Some(Control { tokens, advert })
    }

    /// Runs the timers: the loan timeout, pings after silence, the ping timeout.
    ///
    /// # Errors
    /// Why the session must end (the caller closes it).
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Result<(), Close> {
        if self.is_closed() {
            return Ok(());
        }
        if let Some(oldest) = self.lent.values().map(|loan| loan.at).min() {
            if now.saturating_duration_since(oldest) > self.cfg.loan_timeout {
                return Err(Close::LoanTimeout(self.cfg.loan_timeout));
            }
        }
        self.check_pushes(now, self.cfg.loan_timeout)?;
        if self.heard != self.heard_seen {
            self.heard_seen = self.heard;
            self.last_heard = now;
        }
        if self.ping_due && !self.credits.can_ping() {
            // The peer holds every credit but the reserve, which a ping may not spend:
            // we cannot ask, so its silence proves nothing (the runtime's keepalive,
            // whose PING waits for credit under its own timeout, covers a peer that is
            // really gone).
            self.last_heard = now;
        }
        let silence = now.saturating_duration_since(self.last_heard);
        if silence >= self.cfg.ping_timeout {
            return Err(Close::PeerSilent {
                silence,
                timeout: self.cfg.ping_timeout,
            });
        }
        let pinged_recently = self
            .pinged
            .is_some_and(|at| now.saturating_duration_since(at) < self.cfg.ping_interval);
        if silence >= self.cfg.ping_interval && !pinged_recently {
            self.ping_due = true;
            self.pinged = Some(now);
        }
        Ok(())
    }

    /// When [`Session::handle_timeout`] must run next.
    pub(crate) fn poll_timeout(&self) -> Instant {
        let mut next_ping = self.last_heard + self.cfg.ping_interval;
        if let Some(at) = self.pinged {
            next_ping = next_ping.max(at + self.cfg.ping_interval);
        }
        let ping = next_ping.min(self.last_heard + self.cfg.ping_timeout);
        match self.lent.values().map(|loan| loan.at).min() {
            Some(oldest) => ping.min(oldest + self.cfg.loan_timeout + Duration::from_millis(1)),
            None => ping,
        }
    }
}

#[cfg(test)]
mod pushed_tests;
#[cfg(test)]
mod tests;
