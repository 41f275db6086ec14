//! Two sessions against each other, with no NIC: a simulated wire (reliable, in order,
//! random delays), simulated receive queues, send slots, READs and applications, in
//! simulated time, under thousands of seeded random schedules. What a schedule draws:
//! ring sizes, credit thresholds, lending limits on both sides, READ chunking and budget,
//! frame sizes on both sides of the eager limit and of the receiver's size limit, how long
//! applications hold received frames, when READs complete (out of order), and whether a
//! side freezes (peer loss) or closes while READs are in flight.
//!
//! Invariants checked at every step or at the end:
//! - no SEND meets an empty receive queue (no RNR), whatever the order of events;
//! - a READ only ever reads a buffer still lent (the lender never reuses a buffer early);
//! - every frame goes up exactly once, in the order sent (a refused one as its header);
//! - an honest peer is never taken for a liar (no `Violation`), no timeout fires between
//!   live peers, and once the applications stop, traffic dies out with every loan ended;
//! - a frozen peer is detected within the ping or loan timeout (unless it holds every
//!   credit, which the runtime's keepalive covers);
//! - after a close, nothing more goes up, held frames are given back, late READ
//!   completions are absorbed.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rdmarpc_core::wire::{FrameKind, Header, HEADER_LEN};

use super::*;
use crate::protocol::{Kind, Lie, LoanLimit, Prefix, Rendezvous};

const SLOT_BODY: usize = 200;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A frame as the simulated application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AppFrame {
    pub(super) id: u64,
    pub(super) len: usize,
}

/// A received frame handed up by a session.
#[derive(Debug)]
pub(super) enum Up {
    /// In a receive slot (re-posted when consumed).
    Eager(u64),
    /// READ into a local buffer (read-done due when consumed).
    Large { id: u64, token: u64, len: usize },
    /// Refused for its size: its header alone.
    Refused(u64),
}

impl Up {
    fn id(&self) -> u64 {
        match self {
            Up::Eager(id) | Up::Refused(id) | Up::Large { id, .. } => *id,
        }
    }
}

#[derive(Debug)]
enum Body {
    Data(AppFrame),
    Descriptor(Rendezvous),
    Control(Vec<u64>),
}

#[derive(Debug)]
struct Message {
    at: Instant,
    prefix: Prefix,
    body: Body,
}

struct Side {
    s: Session<Up>,
    cfg: SessionConfig,
    free_send: usize,
    /// Send slots in all (the ring grows to match the peer's grants).
    send_slots: usize,
    posted_recv: usize,
    /// Receive slots in all (the ring grows when the peer asks).
    recv_slots: usize,
    /// Send completions due: when the slot comes back.
    completions: Vec<Instant>,
    /// The application's frames still to send, in order.
    to_send: VecDeque<AppFrame>,
    /// Lending reserved for the frame at the front of `to_send`.
    reserved: bool,
    /// Buffers lent, by verbs key (the frame in them).
    lent: HashMap<u32, AppFrame>,
    next_key: u32,
    /// READs posted: (completes at, read, frame found in the lender's buffer).
    reads: Vec<(Instant, Read, AppFrame)>,
    /// Frames handed up and held by the application until a time.
    held: Vec<(Instant, Up)>,
    /// Ids in the order they went up; whether each was refused.
    got: Vec<(u64, bool)>,
    frozen: bool,
    closed_at: Option<Instant>,
    sent_messages: u64,
}

impl Side {
    fn new(cfg: SessionConfig, send_slots: usize, now: Instant) -> Side {
        Side {
            s: Session::new(cfg.clone(), now),
            posted_recv: cfg.own_slots as usize,
            recv_slots: cfg.own_slots as usize,
            cfg,
            free_send: send_slots,
            send_slots,
            completions: Vec::new(),
            to_send: VecDeque::new(),
            reserved: false,
            lent: HashMap::new(),
            next_key: 1,
            reads: Vec::new(),
            held: Vec::new(),
            got: Vec::new(),
            frozen: false,
            closed_at: None,
            sent_messages: 0,
        }
    }

    fn active(&self) -> bool {
        !self.frozen && !self.s.is_closed()
    }

    fn close(&mut self, why: Close, now: Instant) {
        if let Some(held) = self.s.close(why) {
            drop(held);
            self.closed_at = Some(now);
        }
        // Closing gives nothing back to the peer: the QP is in the error state.
        self.held.clear();
    }
}

struct World {
    now: Instant,
    sides: [Side; 2],
    /// Messages in flight, per direction: wires[i] carries side i's messages.
    wires: [VecDeque<Message>; 2],
    eager_limit: usize,
    max_delay: u64,
}

pub(super) fn header_bytes(frame: AppFrame) -> [u8; HEADER_LEN] {
    let mut h = Header::new(FrameKind::Request, frame.id);
    h.payload_len = (frame.len - HEADER_LEN) as u32;
    h.encode()
}

impl World {
    fn post(&mut self, i: usize, prefix: Prefix, body: Body, rng: &mut Rng) {
        let at = self.now + Duration::from_micros(rng.below(self.max_delay));
        // The wire keeps order (RC): a message never overtakes the one before it.
        let at = self.wires[i].back().map_or(at, |last| at.max(last.at));
        self.wires[i].push_back(Message { at, prefix, body });
        self.sides[i].sent_messages += 1;
    }

    /// Side `i` sends what its application has, as far as slots, credits and lending allow.
    fn send_app(&mut self, i: usize, rng: &mut Rng) {
        loop {
            let side = &mut self.sides[i];
            if !side.active() || !side.s.is_open() {
                return;
            }
            let Some(&frame) = side.to_send.front() else {
                return;
            };
            let large = frame.len > self.eager_limit;
            if large && !side.reserved {
                if !side.s.try_reserve_lending(frame.len) {
                    return;
                }
                side.reserved = true;
            }
            if side.free_send == 0 || !side.s.try_take_data() {
                return;
            }
            side.free_send -= 1;
            side.to_send.pop_front();
            let body = if large {
                side.reserved = false;
                let key = side.next_key;
                side.next_key += 1;
                side.lent.insert(key, frame);
                let token = side.s.lend(key, self.now);
                Body::Descriptor(Rendezvous {
                    offset: 0,
                    len: frame.len as u64,
                    rkey: key,
                    token,
                    header: header_bytes(frame),
                    head: Vec::new(),
                })
            } else {
                Body::Data(frame)
            };
            let kind = if large { Kind::Rendezvous } else { Kind::Data };
            let prefix = side.s.advertise().prefix(kind, 0);
            self.post(i, prefix, body, rng);
        }
    }

    /// The driver's pump after any event on side `i`: READs, control, frames up.
    fn pump(&mut self, i: usize, rng: &mut Rng) {
        let peer_lent = self.sides[1 - i].lent.clone();
        let side = &mut self.sides[i];
        if !side.active() {
            return;
        }
        // The rings grow with use, as the driver's `grow` does.
        if side.s.take_grow() {
            let n = side
                .recv_slots
                .min(side.cfg.max_slots as usize - side.recv_slots);
            side.recv_slots += n;
            side.posted_recv += n;
            side.s.grown(n as u32);
        }
        let max = side.cfg.max_slots as usize;
        while side.s.peer_slots() as usize > side.send_slots && side.send_slots < max {
            let n = side.send_slots.min(max - side.send_slots);
            side.send_slots += n;
            side.free_send += n;
        }
        while let Some(read) = side.s.poll_read() {
            assert!(read.chunk > 0 && read.len.div_ceil(read.chunk) <= MAX_CHUNKS.max(1));
            let frame = *peer_lent
                .get(&read.rkey)
                .expect("a READ of a buffer the peer no longer lends");
            assert_eq!(frame.len, read.len);
            let at = self.now + Duration::from_micros(rng.below(self.max_delay * 2));
            side.reads.push((at, read, frame));
        }
        let mut controls = Vec::new();
        while side.s.control_due() && side.free_send > 0 {
            let Some(control) = side.s.poll_control() else {
                break;
            };
            assert!(control.tokens.len() <= side.cfg.max_tokens);
            side.free_send -= 1;
            controls.push(control);
        }
        while let Some(up) = side.s.poll_deliver() {
            side.got.push((up.id(), matches!(up, Up::Refused(_))));
            let hold = Duration::from_micros(rng.below(self.max_delay * 3));
            side.held.push((self.now + hold, up));
        }
        for c in controls {
            let prefix = c.advert.prefix(Kind::Control, c.tokens.len() as u16);
            self.post(i, prefix, Body::Control(c.tokens), rng);
        }
    }

    fn repost(&mut self, i: usize) {
        let side = &mut self.sides[i];
        side.posted_recv += 1;
        assert!(side.posted_recv <= side.recv_slots);
        side.s.handle_reposted();
    }

    /// Side `i` receives message `m` (from the other side).
    fn arrive(&mut self, i: usize, m: Message, honest: bool) {
        let side = &mut self.sides[i];
        assert!(
            side.posted_recv > 0,
            "RNR: a message met an empty receive queue"
        );
        side.posted_recv -= 1;
        if !side.active() {
            // A frozen process: the NIC takes the message, nobody handles it.
            return;
        }
        let result = self.handle(i, m);
        if let Err(why) = result {
            assert!(!honest, "an honest peer was closed: {why}");
            let now = self.now;
            self.sides[i].close(why, now);
        }
    }

    fn handle(&mut self, i: usize, m: Message) -> Result<(), Close> {
        self.sides[i].s.handle_message(&m.prefix)?;
        match m.body {
            Body::Data(frame) => {
                let mut bytes = vec![0u8; frame.len.min(self.eager_limit)];
                bytes[..HEADER_LEN].copy_from_slice(&header_bytes(frame));
                if self.sides[i].s.classify_eager(&bytes)?.is_some() {
                    self.repost(i);
                    self.sides[i].s.deliver(Up::Refused(frame.id))?;
                } else {
                    self.sides[i].s.deliver(Up::Eager(frame.id))?;
                }
            }
            Body::Descriptor(d) => {
                let id = Header::decode(&d.header).unwrap().unwrap().call_id;
                self.repost(i);
                if self.sides[i].s.handle_descriptor(d)?.is_some() {
                    self.sides[i].s.deliver(Up::Refused(id))?;
                }
            }
            Body::Control(tokens) => {
                assert_eq!(tokens.len(), usize::from(m.prefix.n_tokens));
                let keys = self.sides[i].s.handle_read_dones(tokens)?;
                for key in keys {
                    let frame = self.sides[i].lent.remove(&key).expect("lent");
                    self.sides[i].s.release_lending(frame.len);
                }
                self.repost(i);
            }
        }
        Ok(())
    }

    /// One step of simulated time on both sides.
    fn step(&mut self, rng: &mut Rng, honest: bool) {
        self.now += Duration::from_micros(rng.range(0, self.max_delay / 2));
        let now = self.now;
        for i in [rng.below(2) as usize, 0, 1] {
            // Messages due on the wire towards side i.
            while self.wires[1 - i].front().is_some_and(|m| m.at <= now) {
                let m = self.wires[1 - i].pop_front().expect("checked");
                // The sender's slot comes back some time after the peer took the message.
                let back = now + Duration::from_micros(rng.below(self.max_delay));
                self.sides[1 - i].completions.push(back);
                self.arrive(i, m, honest);
                self.pump(i, rng);
            }
            let side = &mut self.sides[i];
            if side.frozen {
                continue;
            }
            let before = side.completions.len();
            side.completions.retain(|&at| at > now);
            side.free_send += before - side.completions.len();
            if side.s.is_closed() {
                // Late READ completions after a close are absorbed.
                let reads = std::mem::take(&mut side.reads);
                for (_, read, frame) in reads {
                    side.s
                        .handle_read_complete(read.tag, |token, len, _| Up::Large {
                            id: frame.id,
                            token,
                            len,
                        })
                        .expect("a posted READ");
                }
                assert!(
                    side.s.poll_deliver().is_none(),
                    "nothing goes up after close"
                );
                drop(side.s.take_discarded());
                continue;
            }
            // READs complete in any order.
            let mut k = 0;
            while k < side.reads.len() {
                if side.reads[k].0 <= now && rng.chance(70) {
                    let (_, read, frame) = side.reads.swap_remove(k);
                    side.s
                        .handle_read_complete(read.tag, |token, len, _| Up::Large {
                            id: frame.id,
                            token,
                            len,
                        })
                        .expect("a posted READ");
                } else {
                    k += 1;
                }
            }
            // The application lets go of frames it is done with.
            let (done, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut side.held)
                .into_iter()
                .partition(|(at, _)| *at <= now);
            side.held = kept;
            for (_, up) in done {
                match up {
                    Up::Eager(_) => self.repost(i),
                    Up::Large { token, len, .. } => self.sides[i].s.frame_consumed(token, len),
                    Up::Refused(_) => {}
                }
            }
            let peer_frozen = self.sides[1 - i].frozen || self.sides[1 - i].s.is_closed();
            let side = &mut self.sides[i];
            if now >= side.s.poll_timeout() {
                if let Err(why) = side.s.handle_timeout(now) {
                    assert!(
                        !honest || peer_frozen,
                        "a timeout between live peers: {why}"
                    );
                    side.close(why, now);
                    continue;
                }
            }
            self.send_app(i, rng);
            self.pump(i, rng);
        }
    }

    fn quiet(&self) -> bool {
        self.wires.iter().all(VecDeque::is_empty)
            && self.sides.iter().all(|s| {
                s.to_send.is_empty()
                    && s.reads.is_empty()
                    && s.held.is_empty()
                    && s.completions.is_empty()
                    && !s.s.control_due()
            })
    }
}

fn config(rng: &mut Rng) -> (SessionConfig, usize) {
    let own_slots = rng.range(4, 16) as u32;
    let send_slots = rng.range(2, 20) as usize;
    let max_slots = own_slots * rng.range(1, 8) as u32;
    let max_message_size = rng.range(100, 4000) as usize;
    (
        SessionConfig {
            peer_slots: 0,
            own_slots,
            max_slots,
            credit_threshold: rng.range(2, u64::from(own_slots)) as u32,
            lend: LoanLimit { bytes: 0, loans: 0 },
            borrow: LoanLimit {
                bytes: rng.range(HEADER_LEN as u64, 6000) as usize,
                loans: rng.range(1, 6) as usize,
            },
            max_frame: HEADER_LEN + max_message_size,
            max_message_size,
            read_chunk: rng.range(64, 2048) as usize,
            read_wr_budget: rng.range(MAX_CHUNKS as u64, 32) as usize,
            max_tokens: rng.range(1, (SLOT_BODY / 8) as u64) as usize,
            ping_interval: Duration::from_millis(200),
            ping_timeout: Duration::from_millis(600),
            loan_timeout: Duration::from_millis(rng.range(700, 1500)),
        },
        send_slots,
    )
}

/// A connected pair, as the handshake leaves it: each lends within the smaller of both
/// sides' figures and counts the peer's slots.
fn world(rng: &mut Rng) -> World {
    let now = Instant::now();
    let (mut a, sa) = config(rng);
    let (mut b, sb) = config(rng);
    a.peer_slots = b.own_slots;
    b.peer_slots = a.own_slots;
    let lend = |own: LoanLimit, peer: LoanLimit| LoanLimit {
        bytes: own.bytes.min(peer.bytes),
        loans: own.loans.min(peer.loans),
    };
    a.lend = lend(a.borrow, b.borrow);
    b.lend = lend(b.borrow, a.borrow);
    World {
        now,
        sides: [Side::new(a, sa, now), Side::new(b, sb, now)],
        wires: [VecDeque::new(), VecDeque::new()],
        eager_limit: SLOT_BODY,
        max_delay: rng.range(50, 20_000),
    }
}

fn frames(rng: &mut Rng, n: usize, first_id: u64) -> VecDeque<AppFrame> {
    (0..n)
        .map(|k| AppFrame {
            id: first_id + k as u64,
            len: match rng.below(4) {
                0 => rng.range(HEADER_LEN as u64, SLOT_BODY as u64),
                1 => rng.range(SLOT_BODY as u64 + 1, 1000),
                2 => rng.range(1000, 5000),
                _ => rng.range(HEADER_LEN as u64, 5000),
            } as usize,
        })
        .collect()
}

/// What side `to` should have received from `from`'s list, in order: refused when over
/// `to`'s limit.
fn expected(sent: &VecDeque<AppFrame>, to: &SessionConfig) -> Vec<(u64, bool)> {
    sent.iter()
        .map(|f| {
            (
                f.id,
                f.len - HEADER_LEN > to.max_message_size || f.len > to.max_frame,
            )
        })
        .collect()
}

#[test]
fn honest_pairs_deliver_everything_in_order_and_go_quiet() {
    let mut grew = 0;
    for seed in 1..=1_500u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut w = world(&mut rng);
        let n = [rng.range(0, 60) as usize, rng.range(0, 60) as usize];
        let sent = [frames(&mut rng, n[0], 1), frames(&mut rng, n[1], 1_000)];
        w.sides[0].to_send = sent[0].clone();
        w.sides[1].to_send = sent[1].clone();
        let mut steps = 0;
        while !w.quiet() {
            w.step(&mut rng, true);
            steps += 1;
            assert!(steps < 200_000, "seed {seed}: no progress (a stall)");
        }
        for i in 0..2 {
            let side = &w.sides[i];
            assert_eq!(
                side.got,
                expected(&sent[1 - i], &side.cfg),
                "seed {seed}: side {i} got frames out of order or lost"
            );
            assert!(
                side.lent.is_empty() && side.s.loans() == 0,
                "seed {seed}: a loan never ended"
            );
            assert!(side.s.lent.is_empty() && side.s.reading.is_empty());
            assert_eq!(
                side.s.borrower,
                Borrower::new(side.cfg.borrow),
                "seed {seed}"
            );
            assert_eq!(side.posted_recv, side.recv_slots, "seed {seed}");
            assert!(
                side.recv_slots <= side.cfg.max_slots as usize,
                "seed {seed}"
            );
            grew += usize::from(side.recv_slots > side.cfg.own_slots as usize);
            assert!(side.s.closed().is_none(), "seed {seed}");
        }
        // Idle, the pair exchanges at most a ping and a pong per interval.
        let (before, until) = (
            w.sides[0].sent_messages + w.sides[1].sent_messages,
            w.now + Duration::from_millis(1_000),
        );
        while w.now < until {
            w.step(&mut rng, true);
        }
        let idle = w.sides[0].sent_messages + w.sides[1].sent_messages - before;
        assert!(
            idle <= 20,
            "seed {seed}: {idle} messages while idle for 1 s"
        );
    }
    assert!(
        grew > 300,
        "only {grew} rings grew: growth is not exercised"
    );
}

#[test]
fn a_frozen_peer_is_detected_within_the_timeouts() {
    for seed in 1..=800u64 {
        let mut rng = Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03) | 1);
        let mut w = world(&mut rng);
        let n = [rng.range(0, 40) as usize, rng.range(0, 40) as usize];
        w.sides[0].to_send = frames(&mut rng, n[0], 1);
        w.sides[1].to_send = frames(&mut rng, n[1], 1_000);
        let freeze_after = rng.range(0, 300);
        for _ in 0..freeze_after {
            w.step(&mut rng, true);
        }
        w.sides[1].frozen = true;
        let frozen_at = w.now;
        let cfg = w.sides[0].cfg.clone();
        let bound = frozen_at
            + cfg.ping_timeout.max(cfg.loan_timeout)
            + cfg.ping_interval
            + Duration::from_micros(w.max_delay * 4);
        while w.now < bound && !w.sides[0].s.is_closed() {
            w.step(&mut rng, true);
        }
        let a = &w.sides[0];
        match a.s.closed() {
            Some(Close::PeerSilent { .. } | Close::LoanTimeout(_)) => {}
            Some(other) => panic!("seed {seed}: closed for {other}"),
            // Only a side the frozen peer left without the credit to ping may not see it.
            None => assert!(
                !a.s.credits.can_ping() && a.s.lent.is_empty(),
                "seed {seed}: a frozen peer went unnoticed"
            ),
        }
    }
}

#[test]
fn a_close_in_the_middle_of_reads_gives_everything_back() {
    let mut closed_mid_read = 0;
    for seed in 1..=800u64 {
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        let mut w = world(&mut rng);
        // Mostly large frames towards side 1.
        w.sides[0].to_send = (0..30)
            .map(|k| AppFrame {
                id: k,
                len: rng.range(SLOT_BODY as u64 + 1, 3000) as usize,
            })
            .collect();
        let mut steps = 0;
        while w.sides[1].reads.is_empty() && steps < 5_000 {
            w.step(&mut rng, true);
            steps += 1;
        }
        if w.sides[1].reads.is_empty() {
            continue;
        }
        closed_mid_read += 1;
        let now = w.now;
        // A failure (a clean close keeps what is already in order for the receiver).
        w.sides[1].close(Close::Failed("cancelled".into()), now);
        let got = w.sides[1].got.len();
        assert!(w.sides[1].s.in_order.is_empty() && w.sides[1].s.ready.is_empty());
        for _ in 0..200 {
            w.step(&mut rng, true);
        }
        let b = &w.sides[1];
        assert_eq!(
            b.got.len(),
            got,
            "seed {seed}: frames went up after the close"
        );
        assert!(b.reads.is_empty() && b.s.reading.is_empty(), "seed {seed}");
        assert!(!b.s.control_due(), "seed {seed}");
    }
    assert!(
        closed_mid_read > 400,
        "only {closed_mid_read} schedules closed mid-READ"
    );
}

/// A drawn configuration with the limits a unit test relies on set.
pub(super) fn fixed(seed: u64, borrow: LoanLimit, max_message_size: usize) -> SessionConfig {
    let (mut cfg, _) = config(&mut Rng(seed));
    cfg.peer_slots = 4;
    cfg.own_slots = 4;
    cfg.borrow = borrow;
    cfg.max_message_size = max_message_size;
    cfg.max_frame = HEADER_LEN + max_message_size;
    cfg
}

#[test]
fn a_lying_peer_is_caught() {
    let now = Instant::now();
    let borrow = LoanLimit {
        bytes: 1_000,
        loans: 2,
    };
    let mut s: Session<Up> = Session::new(fixed(7, borrow, 500), now);
    let prefix = |reposted| Prefix {
        granted: 0,
        kind: Kind::Data,
        flags: 0,
        n_tokens: 0,
        reposted,
    };
    assert!(
        matches!(s.handle_message(&prefix(1)), Err(Close::Violation(_))),
        "acks for nothing sent"
    );
    let frame = |id, len| AppFrame { id, len };
    let descriptor = |f: AppFrame, len: u64, token| Rendezvous {
        offset: 0,
        len,
        rkey: 1,
        token,
        header: header_bytes(f),
        head: Vec::new(),
    };
    // A length other than the header's.
    assert!(matches!(
        s.handle_descriptor(descriptor(frame(1, 300), 301, 1)),
        Err(Close::Violation(_))
    ));
    // Wrapping offset.
    let mut d = descriptor(frame(1, 300), 300, 1);
    d.offset = u64::MAX - 10;
    assert!(s.handle_descriptor(d).is_err());
    // Oversized: refused unread, its read-done due at once.
    assert!(s
        .handle_descriptor(descriptor(frame(2, 900), 900, 2))
        .unwrap()
        .is_some());
    assert!(s.control_due());
    // Beyond the agreed number of loans (two, one of them the refused frame).
    assert!(s
        .handle_descriptor(descriptor(frame(3, 300), 300, 3))
        .unwrap()
        .is_none());
    assert!(matches!(
        s.handle_descriptor(descriptor(frame(4, 300), 300, 4)),
        Err(Close::Violation(_))
    ));
    // A read-done for a token never lent, and a READ completion never posted.
    assert!(matches!(
        s.handle_read_dones([42]),
        Err(Close::Violation(_))
    ));
    assert!(s
        .handle_read_complete(99, |_, _, _| Up::Refused(0))
        .is_err());
    // A malformed eager header.
    assert!(s.classify_eager(&[0xff; HEADER_LEN]).is_err());
}

#[test]
fn held_frames_are_bounded_and_given_back_on_close() {
    let now = Instant::now();
    let borrow = LoanLimit {
        bytes: 10_000,
        loans: 2,
    };
    // Four receive slots, each of which may hold a batch of frames, and two loans.
    let max = 2 * (4 * usize::from(crate::protocol::MAX_BATCH) + 2);
    let mut s: Session<Up> = Session::new(fixed(11, borrow, 4_000), now);
    let f = AppFrame { id: 1, len: 1_000 };
    let d = Rendezvous {
        offset: 0,
        len: 1_000,
        rkey: 1,
        token: 1,
        header: header_bytes(f),
        head: Vec::new(),
    };
    assert!(s.handle_descriptor(d).unwrap().is_none());
    let read = s.poll_read().expect("within budget");
    // Refused headers behind a slow READ: bounded.
    for k in 0..max - 1 {
        s.deliver(Up::Refused(10 + k as u64)).unwrap();
    }
    assert!(s.poll_deliver().is_none(), "held behind the READ");
    assert!(matches!(
        s.deliver(Up::Refused(0)),
        Err(Close::Violation(_))
    ));
    let held = s.close(Close::Failed("test".into())).expect("first close");
    assert_eq!(
        held.len(),
        max,
        "every held frame is given back, the refused one too"
    );
    assert!(s.close(Close::Local).is_none());
    s.handle_read_complete(read.tag, |token, len, _| Up::Large { id: 1, token, len })
        .unwrap();
    assert!(s.poll_deliver().is_none());
    assert_eq!(
        s.take_discarded().len(),
        1,
        "a READ finished after the close is dropped"
    );
}

#[test]
fn a_clean_close_keeps_what_is_in_order_and_a_failure_drops_it() {
    let now = Instant::now();
    let mut rng = Rng(13);
    let (cfg, _) = config(&mut rng);
    for (why, kept) in [
        (Close::PeerClosed, 2),
        (Close::Violation(Lie::DescriptorWraps), 0),
    ] {
        let mut s: Session<Up> = Session::new(cfg.clone(), now);
        s.deliver(Up::Eager(1)).unwrap();
        s.deliver(Up::Eager(2)).unwrap();
        let held = s.close(why).unwrap();
        assert_eq!(held.len(), 2 - kept);
        let mut got = 0;
        while s.poll_deliver().is_some() {
            got += 1;
        }
        assert_eq!(
            got, kept,
            "what the peer sent before a clean close is still received"
        );
        s.deliver(Up::Eager(3)).unwrap();
        assert!(s.poll_deliver().is_none(), "nothing new after the close");
        assert_eq!(s.take_discarded().len(), 1);
    }
}

#[test]
fn close_reasons_map_to_typed_transport_errors() {
    use rdmarpc_core::TransportError as E;
    let silent = Close::PeerSilent {
        silence: Duration::from_secs(6),
        timeout: Duration::from_secs(5),
    };
    assert!(matches!(E::from(&silent), E::PeerSilent(d) if d == Duration::from_secs(6)));
    assert!(matches!(E::from(&Close::PeerClosed), E::Closed));
    assert!(matches!(E::from(&Close::Local), E::Closed));
    let lie = E::from(&Close::Violation(Lie::UnknownToken { token: 7 }));
    let what = "read-done for token 7, which is not lent";
    assert!(matches!(&lie, E::Protocol(w) if w == what), "{lie}");
    assert_eq!(
        lie.to_string(),
        format!("protocol violation by the peer: {what}")
    );
    assert!(matches!(
        E::from(&Close::LoanTimeout(Duration::from_secs(60))),
        E::Protocol(_)
    ));
    assert!(matches!(
        E::from(&Close::Failed("posting".into())),
        E::Other(_)
    ));
}

#[test]
fn a_peer_grows_our_rings_only_up_to_their_maximum_and_cannot_claim_absurd_grants() {
    let now = Instant::now();
    let borrow = LoanLimit {
        bytes: 1_000,
        loans: 2,
    };
    let mut cfg = fixed(17, borrow, 500);
    cfg.max_slots = 16;
    let mut s: Session<Up> = Session::new(cfg, now);
    let want = |granted| Prefix {
        kind: Kind::Control,
        flags: Prefix::WANT,
        n_tokens: 0,
        granted,
        reposted: 0,
    };
    // A peer asking for slots on every message: the ring doubles to its maximum, no more.
    let mut own = 4;
    for _ in 0..20 {
        s.handle_message(&want(0)).unwrap();
        if s.take_grow() {
            let n = own.min(16 - own);
            own += n;
            s.grown(n);
        }
    }
    assert_eq!(own, 16);
    assert!(!s.growth_due(16), "at the maximum, nothing more is due");
    assert_eq!(s.advertise().granted, 16);
    // Grants only ever raise what we may send, and an absurd one closes.
    s.handle_message(&want(64)).unwrap();
    assert_eq!(s.peer_slots(), 64);
    s.handle_message(&want(8)).unwrap();
    assert_eq!(s.peer_slots(), 64, "a grant never shrinks");
    // More granted than our send slots: the send ring grows, unless at its maximum.
    assert!(s.growth_due(8));
    assert!(!s.growth_due(16));
    assert!(matches!(
        s.handle_message(&want(MAX_GRANT + 1)),
        Err(Close::Violation(_))
    ));
}

#[test]
fn a_descriptor_may_carry_the_frame_start_inline_and_lies_about_it_close() {
    let now = Instant::now();
    let borrow = LoanLimit {
        bytes: 100_000,
        loans: 8,
    };
    let mut s: Session<Up> = Session::new(fixed(13, borrow, 50_000), now);
    let f = AppFrame { id: 1, len: 10_000 };
    let mut head = header_bytes(f).to_vec();
    head.resize(100, 7);
    let d = Rendezvous {
        offset: 64,
        len: 9_900,
        rkey: 1,
        token: 5,
        header: header_bytes(f),
        head: head.clone(),
    };
    assert!(s.handle_descriptor(d.clone()).unwrap().is_none());
    let read = s.poll_read().expect("within budget");
    assert_eq!(
        (read.offset, read.len),
        (64, 9_900),
        "only the lent bytes are READ"
    );
    assert_eq!(read.head, head, "the head is written before them");
    let mut sizes = None;
    s.handle_read_complete(read.tag, |token, len, lent| {
        sizes = Some((len, lent));
        Up::Large { id: 1, token, len }
    })
    .unwrap();
    assert_eq!(
        sizes,
        Some((10_000, 9_900)),
        "frame length, bytes acknowledged"
    );
    assert!(s.poll_deliver().is_some());

    // Lies: head and lent bytes that do not add up to the header's frame, a head that
    // is not the frame's start, a head with nothing lent.
    let lie = |edit: fn(&mut Rendezvous)| {
        let mut s: Session<Up> = Session::new(fixed(13, borrow, 50_000), now);
        let mut d = d.clone();
        edit(&mut d);
        s.handle_descriptor(d)
    };
    assert!(matches!(lie(|d| d.len += 1), Err(Close::Violation(_))));
    assert!(matches!(
        lie(|d| {
            d.head.truncate(50);
            d.len = 9_950;
            d.head[3] ^= 1;
        }),
        Err(Close::Violation(_))
    ));
    assert!(matches!(
        lie(|d| {
            d.head.truncate(20);
            d.len = 9_980;
        }),
        Err(Close::Violation(_))
    ));
    assert!(matches!(
        lie(|d| {
            d.head.resize(10_000, 0);
            d.len = 0;
        }),
        Err(Close::Violation(_))
    ));
}
