//! Target `rdma_session`: the RDMA session (`protocol/session/`) fed by a hostile peer's
//! script, the way the completion driver feeds it (`driver.rs`), with the invariants the
//! transport relies on checked.
//!
//! A script: byte 0 picks the limits (bits 0-1: receive slots, 2-3: loans accepted, 4-5:
//! the largest message, 6-7: the READ chunk); then steps of `[op u8][n u16 LE]`, with `n`
//! bytes after op 0:
//! - 0: a message from the peer (prefix and body, as a receive slot holds it);
//! - 1: post the READs the session asks for;
//! - 2: the oldest READ posted completes;
//! - 3: the application takes every frame handed up (consuming READ ones);
//! - 4: `n` milliseconds pass, and the timers run;
//! - 5: send the control messages due (read-dones, credits, pings);
//! - 6: lend the peer a frame of `n` bytes;
//! - 7: a receive slot is re-posted.
//!
//! A message may be a descriptor flagged PUSHED and PIECE messages after it: the model
//! follows each pushed frame's bytes, and checks it goes up whole, in its place.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use rdmarpc_core::wire::HEADER_LEN;

use crate::protocol::session::{Close, Session, SessionConfig, MAX_CHUNKS};
use crate::protocol::{split_batch, Kind, Lie, LoanLimit, Prefix, Rendezvous, PREFIX_LEN};

/// Where the steps start.
pub const STEPS_AT: usize = 1;

/// The steps of `script`: where each one's bytes start, its op, and `n`.
pub fn steps(script: &[u8]) -> Vec<(usize, u8, usize)> {
    rdmarpc_core::fuzzing::op_steps(script, STEPS_AT)
}

/// A frame handed to the session: its place in the arrival order, and for one READ,
/// its token and the bytes lent.
#[derive(Debug)]
struct Up {
    seq: u64,
    read: Option<(u64, usize)>,
}

/// What the test knows of the session's state.
struct Play {
    cfg: SessionConfig,
    s: Session<Up>,
    now: Instant,
    /// Arrival numbers handed out, and the last one handed up.
    arrived: u64,
    last_up: Option<u64>,
    /// Descriptors accepted for READ, in arrival order, not yet posted.
    to_read: VecDeque<u64>,
    /// READs posted: tag, arrival number, work requests.
    posted: VecDeque<(u64, u64, usize)>,
    /// Loans the peer made to us, by token (a lying peer may repeat one): the bytes each
    /// counts, until its read-done went out.
    borrowed: HashMap<u64, Vec<usize>>,
    /// Our loans to the peer: token to (key, bytes).
    lent: HashMap<u64, (u32, usize)>,
    next_key: u32,
    /// Pushed frames whose pieces are coming, by token: arrival number (`None`:
    /// refused), bytes still to come, and the frame's bytes so far (head, then pieces).
    pushing: HashMap<u64, (Option<u64>, usize, Vec<u8>)>,
}

/// Plays `script` against a session.
///
/// # Panics
/// When the session breaks an invariant: frames handed up out of arrival order, READs
/// beyond the work-request budget, loans accepted past what was announced, a read-done
/// for a token never lent to it or twice, a read-done accepted for a token not lent, a
/// reason to close other than the peer's lie or a timer, or anything handed up after a
/// failure.
pub fn rdma_session(script: &[u8]) {
    let Some(&setting) = script.first() else {
        return;
    };
    let mut play = Play::new(setting);
    for (at, op, n) in steps(script) {
        let result = match op {
            0 => play.message(&script[at..(at + n).min(script.len())]),
            1 => {
                play.post_reads();
                Ok(())
            }
            2 => play.complete_read(),
            3 => {
                play.take_frames();
                Ok(())
            }
            4 => play.time(n),
            5 => {
                play.send_controls();
                Ok(())
            }
            6 => {
                play.lend(n);
                Ok(())
            }
            7 => {
                play.s.handle_reposted();
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(why) = result {
            play.failed(why);
            return;
        }
    }
}

impl Play {
    fn new(setting: u8) -> Play {
        let own_slots = [4, 8, 16, 64][usize::from(setting & 3)];
        let max_message_size = [0, 100, 4000, 1 << 20][usize::from((setting >> 4) & 3)];
        let cfg = SessionConfig {
            peer_slots: 8,
            own_slots,
            max_slots: own_slots * 4,
            credit_threshold: own_slots / 2,
            lend: LoanLimit {
                bytes: 1 << 20,
                loans: 8,
            },
            borrow: LoanLimit {
                bytes: [HEADER_LEN, 4096, 1 << 16, 1 << 22][usize::from((setting >> 2) & 3)],
                loans: 1 + usize::from((setting >> 2) & 3) * 3,
            },
            max_frame: HEADER_LEN + max_message_size,
            max_message_size,
            read_chunk: [64, 1024, 8192, 1 << 16][usize::from(setting >> 6)],
            read_wr_budget: MAX_CHUNKS * 2,
            max_tokens: 16,
            ping_interval: Duration::from_millis(200),
            ping_timeout: Duration::from_millis(600),
            loan_timeout: Duration::from_millis(1000),
        };
        let now = Instant::now();
        Play {
            s: Session::new(cfg.clone(), now),
            cfg,
            now,
            arrived: 0,
            last_up: None,
            to_read: VecDeque::new(),
            posted: VecDeque::new(),
            borrowed: HashMap::new(),
            lent: HashMap::new(),
            next_key: 1,
            pushing: HashMap::new(),
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.arrived += 1;
        self.arrived
    }

    /// A message from the peer, handled as the driver handles it; after it, frames wait
    /// behind a push exactly while an accepted pushed frame is incomplete.
    fn message(&mut self, slot: &[u8]) -> Result<(), Close> {
        self.handle(slot)?;
        let pushing = self.pushing.values().any(|(seq, ..)| seq.is_some());
        assert_eq!(self.s.behind_push(), pushing, "frames behind a push");
        Ok(())
    }

    fn handle(&mut self, slot: &[u8]) -> Result<(), Close> {
        let prefix = Prefix::decode(slot).map_err(Close::Violation)?;
        self.s.handle_message(&prefix)?;
        let body = &slot[PREFIX_LEN..];
        match prefix.kind {
            Kind::Data if prefix.n_tokens >= 2 => {
                let ranges = split_batch(body, prefix.n_tokens).map_err(Close::Violation)?;
                self.behind_push()?;
                for range in ranges {
                    self.eager(&body[range], false)?;
                }
                Ok(())
            }
            Kind::Data => self.eager(body, true),
            Kind::Rendezvous if prefix.flags & Prefix::PUSHED != 0 => {
                self.pushed_descriptor(Rendezvous::decode(body))
            }
            Kind::Rendezvous => self.descriptor(Rendezvous::decode(body)),
            Kind::Piece => {
                let token = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
                self.piece(token, &body[8..])
            }
            Kind::Control => {
                let tokens = body
                    .chunks_exact(8)
                    .map(|t| u64::from_le_bytes(t.try_into().expect("8 bytes")));
                self.read_dones(tokens.collect())
            }
        }
    }

    /// An eager frame (`alone`: a message of its own, which is copied out behind a push
    /// unless refused, as the driver does).
    fn eager(&mut self, frame: &[u8], alone: bool) -> Result<(), Close> {
        let header = self.s.classify_eager(frame)?;
        if let Some(header) = header {
            assert!(header.payload_len as usize > self.cfg.max_message_size);
        } else if alone {
            self.behind_push()?;
        }
        let seq = self.next_seq();
        self.s.deliver(Up { seq, read: None })
    }

    /// A DATA message arrived: copied out behind a push, as the driver does, within the
    /// bound an honest pusher keeps.
    fn behind_push(&mut self) -> Result<(), Close> {
        let pushing = self.pushing.values().any(|(seq, ..)| seq.is_some());
        match self.s.copy_behind_push() {
            Ok(copied) => assert_eq!(copied, pushing, "copied out behind a push"),
            Err(why) => {
                assert!(pushing, "a bound behind no push: {why}");
                return Err(why);
            }
        }
        Ok(())
    }

    fn descriptor(&mut self, d: Rendezvous) -> Result<(), Close> {
        let token = d.token;
        let lent = usize::try_from(d.len).unwrap_or(usize::MAX);
        let result = self.s.handle_descriptor(d);
        let refused_unread = self.loan_accepted(token, lent, result)?;
        let seq = self.next_seq();
        match refused_unread {
            Some(_) => self.s.deliver(Up { seq, read: None }),
            None => {
                self.to_read.push_back(seq);
                Ok(())
            }
        }
    }

    /// Checks the session's verdict on a loan of `lent` bytes against the limits, and
    /// counts it borrowed: whether the frame was refused unread.
    fn loan_accepted(
        &mut self,
        token: u64,
        lent: usize,
        result: Result<Option<rdmarpc_core::wire::Header>, Close>,
    ) -> Result<Option<rdmarpc_core::wire::Header>, Close> {
        if let Err(Close::Violation(Lie::OverLent { .. })) = &result {
            let (loans, bytes) = self.borrowed_now();
            let limit = &self.cfg.borrow;
            // A frame larger than the byte limit goes alone.
            let over_bytes = loans > 0 && bytes.saturating_add(lent) > limit.bytes;
            assert!(
                loans + 1 > limit.loans || over_bytes,
                "a loan refused within the limits: {loans} of {bytes} bytes, +{lent}"
            );
        }
        let refused_unread = result?;
        let counted = if refused_unread.is_some() { 0 } else { lent };
        self.borrowed.entry(token).or_default().push(counted);
        let (loans, bytes) = self.borrowed_now();
        assert!(loans <= self.cfg.borrow.loans, "loans past the limit");
        // A frame larger than the byte limit goes alone.
        assert!(
            bytes <= self.cfg.borrow.bytes || loans == 1,
            "bytes borrowed past the limit beside another loan"
        );
        Ok(refused_unread)
    }

    fn pushed_descriptor(&mut self, d: Rendezvous) -> Result<(), Close> {
        let (token, head) = (d.token, d.head.clone());
        let lent = usize::try_from(d.len).unwrap_or(usize::MAX);
        let in_use = self.pushing.contains_key(&token);
        let result = self.s.handle_pushed_descriptor(d);
        if let Err(Close::Violation(Lie::TokenInUse { .. })) = &result {
            assert!(in_use, "a token refused as in use that is not");
        }
        assert!(!in_use || result.is_err(), "a token pushed twice at once");
        let refused_unread = self.loan_accepted(token, lent, result)?;
        let seq = self.next_seq();
        match refused_unread {
            Some(_) => {
                self.pushing.insert(token, (None, lent, Vec::new()));
                self.s.deliver(Up { seq, read: None })
            }
            None => {
                self.pushing.insert(token, (Some(seq), lent, head));
                Ok(())
            }
        }
    }

    fn piece(&mut self, token: u64, bytes: &[u8]) -> Result<(), Close> {
        let expected = self.pushing.remove(&token);
        let result = self.s.handle_piece(token, bytes);
        let Some((seq, left, mut so_far)) = expected else {
            assert!(result.is_err(), "a piece for no pushed frame accepted");
            return result.map(drop);
        };
        if bytes.len() > left {
            assert!(result.is_err(), "a piece past its frame's end accepted");
            return result.map(drop);
        }
        let whole = result.expect("a piece within its frame refused");
        let left = left - bytes.len();
        if seq.is_some() {
            so_far.extend_from_slice(bytes);
        }
        if left > 0 {
            assert!(whole.is_none(), "a frame whole before its last piece");
            self.pushing.insert(token, (seq, left, so_far));
            return Ok(());
        }
        match (seq, whole) {
            (Some(seq), Some((tag, frame))) => {
                assert!(
                    frame == so_far,
                    "a pushed frame's bytes: its head, then its pieces"
                );
                self.s
                    .handle_read_complete(tag, |token, _frame_len, lent| Up {
                        seq,
                        read: Some((token, lent)),
                    })
            }
            (None, None) => Ok(()),
            (seq, whole) => panic!(
                "a pushed frame refused: {}, went up whole: {}",
                seq.is_none(),
                whole.is_some()
            ),
        }
    }

    fn read_dones(&mut self, tokens: Vec<u64>) -> Result<(), Close> {
        let known = tokens.iter().all(|t| self.lent.contains_key(t));
        let keys = match self.s.handle_read_dones(tokens.iter().copied()) {
            Ok(keys) => keys,
            Err(why) => {
                assert!(
                    !known || has_duplicates(&tokens),
                    "a read-done refused: {why}"
                );
                return Err(why);
            }
        };
        for (token, key) in tokens.iter().zip(keys) {
            let (lent_key, len) = self.lent.remove(token).expect("a token lent");
            assert_eq!(key, lent_key, "the key of token {token}");
            self.s.release_lending(len);
        }
        Ok(())
    }

    fn post_reads(&mut self) {
        while let Some(read) = self.s.poll_read() {
            let seq = self.to_read.pop_front().expect("a READ for a descriptor");
            let wrs = read.len.div_ceil(read.chunk.max(1)).max(1);
            assert!(wrs <= MAX_CHUNKS, "a READ in {wrs} chunks");
            self.posted.push_back((read.tag, seq, wrs));
            let in_flight: usize = self.posted.iter().map(|p| p.2).sum();
            assert!(
                in_flight <= self.cfg.read_wr_budget,
                "READs past the budget"
            );
        }
    }

    fn complete_read(&mut self) -> Result<(), Close> {
        let Some((tag, seq, _)) = self.posted.pop_front() else {
            return Ok(());
        };
        self.s
            .handle_read_complete(tag, |token, _frame_len, lent| Up {
                seq,
                read: Some((token, lent)),
            })
    }

    fn take_frames(&mut self) {
        while let Some(up) = self.s.poll_deliver() {
            assert!(self.last_up < Some(up.seq), "frames out of order");
            self.last_up = Some(up.seq);
            if let Some((token, lent)) = up.read {
                self.s.frame_consumed(token, lent);
            }
        }
    }

    fn time(&mut self, ms: usize) -> Result<(), Close> {
        self.now += Duration::from_millis(ms as u64);
        match self.s.handle_timeout(self.now) {
            Err(why @ (Close::PeerSilent { .. } | Close::LoanTimeout(_))) => Err(why),
            other => other,
        }
    }

    fn send_controls(&mut self) {
        while let Some(control) = self.s.poll_control() {
            assert!(control.tokens.len() <= self.cfg.max_tokens);
            for token in control.tokens {
                assert!(
                    self.borrowed.get(&token).is_none_or(|l| l.len() > 1)
                        || !self.pushing.contains_key(&token),
                    "a read-done for token {token} before its last piece"
                );
                let loans = self.borrowed.get_mut(&token);
                let returned = loans.and_then(|l| (!l.is_empty()).then(|| l.remove(0)));
                assert!(
                    returned.is_some(),
                    "a read-done for token {token}, not borrowed"
                );
            }
        }
    }

    /// Loans borrowed and their bytes, now.
    fn borrowed_now(&self) -> (usize, usize) {
        let loans = self.borrowed.values().map(Vec::len).sum();
        let bytes = self.borrowed.values().flatten().sum();
        (loans, bytes)
    }

    fn lend(&mut self, len: usize) {
        if self.s.try_reserve_lending(len) {
            let key = self.next_key;
            self.next_key += 1;
            let token = self.s.lend(key, self.now);
            self.lent.insert(token, (key, len));
        }
    }

    /// The session must close: with the peer's lie or a timer, never a local failure;
    /// nothing is handed up after it.
    fn failed(&mut self, why: Close) {
        assert!(!matches!(why, Close::Failed(_)), "a local failure: {why}");
        self.s.close(why);
        assert!(self.s.poll_deliver().is_none(), "a frame after the failure");
        assert!(self.s.poll_read().is_none(), "a READ after the failure");
        assert!(
            self.s.poll_control().is_none(),
            "a control message after the failure"
        );
    }
}

fn has_duplicates(tokens: &[u64]) -> bool {
    let mut seen = HashSet::new();
    !tokens.iter().all(|t| seen.insert(*t))
}
