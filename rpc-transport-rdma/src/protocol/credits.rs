//! [`Credits`]: receive-slot accounting so that no SEND ever meets an empty receive queue.
//!
//! Counts are cumulative (never reset), so reordering of the `reposted` values between
//! concurrent senders is harmless: the receiver keeps the maximum.
//!
//! Rules (each side runs the same):
//! - The peer has `peer_slots` receive slots. Credits available =
//!   `peer_slots - (sent - peer_reposted)`.
//! - Every message needs 2 credits available and uses 1, except a CONTROL message that
//!   returns credit (it advertises re-posts the peer has not heard of): it may use the
//!   last one. The reserve credit is thus spent only by a message that gives the peer
//!   credit back, so the peer can always answer; two sides at their last credit cannot
//!   both spend it on messages (crossing pings) that leave each other nothing to answer
//!   with.
//! - Every message carries this side's `reposted` count; a CONTROL message is sent on its
//!   own only when at least `threshold` re-posts are unadvertised (or read-done tokens, a
//!   ping or a pong are due), with `2 <= threshold < own slots`. Since a CONTROL message
//!   costs the peer one slot and returns at least two, control traffic between idle peers
//!   dies out instead of ping-ponging; since a peer at its reserve has `own slots - 1 >=
//!   threshold` messages unreturned here, this side returns them once it re-posted them,
//!   so that peer is never left without the credit to ping. `credits::tests::exhaustive_*`
//!   checks these rules on every interleaving of two small peers.

use super::lie::Lie;

/// Credit state of one connection. Sans-IO: the driver calls it under a lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Credits {
    peer_slots: u64,
    /// Our receive slots (the peer's credits towards us).
    own_slots: u64,
    sent: u64,
    peer_reposted: u64,
    reposted: u64,
    advertised: u64,
    threshold: u64,
    /// The threshold asked for; `threshold` is it capped below `own_slots`.
    wanted_threshold: u64,
}

impl Credits {
    /// Fresh accounting towards a peer with `peer_slots` receive slots, from a side with
    /// `own_slots`; explicit credit messages once `threshold` re-posts are unadvertised.
    pub(crate) fn new(peer_slots: u32, own_slots: u32, threshold: u32) -> Credits {
        Credits {
            peer_slots: u64::from(peer_slots),
            own_slots: u64::from(own_slots),
            sent: 0,
            peer_reposted: 0,
            reposted: 0,
            advertised: 0,
            threshold: u64::from(threshold.min(own_slots.saturating_sub(1)).max(2)),
            wanted_threshold: u64::from(threshold),
        }
    }

    /// The peer has posted `slots` receive slots in all (its ring grew); never shrinks.
    pub(crate) fn grow_peer(&mut self, slots: u64) {
        self.peer_slots = self.peer_slots.max(slots);
    }

    /// We posted more receive slots: `slots` in all.
    pub(crate) fn grow_own(&mut self, slots: u64) {
        self.own_slots = self.own_slots.max(slots);
        self.threshold = self
            .wanted_threshold
            .min(self.own_slots.saturating_sub(1))
            .max(2);
    }

    pub(crate) fn peer_slots(&self) -> u64 {
        self.peer_slots
    }

    /// Credits available now.
    pub(crate) fn available(&self) -> u64 {
        self.peer_slots - (self.sent - self.peer_reposted)
    }

    /// Takes a credit for a data message, keeping one in reserve.
    #[must_use]
    pub(crate) fn try_take_data(&mut self) -> bool {
        if self.available() >= 2 {
            self.sent += 1;
            true
        } else {
            false
        }
    }

    /// Takes a credit for a control message: the reserve only if the message returns
    /// credit (its [`Credits::advertise`] must be taken under the same lock).
    #[must_use]
    #[cfg(test)]
    pub(crate) fn try_take_control(&mut self) -> bool {
        self.try_take_control_granting(false)
    }

    /// [`Credits::try_take_control`] for a message that may also grant the peer new
    /// slots (`grants`), which gives it credit as a re-post does.
    #[must_use]
    pub(crate) fn try_take_control_granting(&mut self, grants: bool) -> bool {
        let need = if grants || self.reposted > self.advertised {
            1
        } else {
            2
        };
        if self.available() >= need {
            self.sent += 1;
            true
        } else {
            false
        }
    }

    /// Whether a control message that returns no credit (a bare PING) could go now.
    pub(crate) fn can_ping(&self) -> bool {
        self.reposted > self.advertised || self.available() >= 2
    }

    /// Gives back a credit that was taken but not used (nothing was posted).
    pub(crate) fn untake(&mut self) {
        self.sent -= 1;
    }

    /// The peer says it has re-posted `reposted` of our messages in all.
    ///
    /// # Errors
    /// If the peer claims more re-posts than messages were sent (a broken peer).
    pub(crate) fn handle_peer_reposted(&mut self, reposted: u64) -> Result<(), Lie> {
        if reposted > self.sent {
            return Err(Lie::OverAcknowledged {
                reposted,
                sent: self.sent,
            });
        }
        self.peer_reposted = self.peer_reposted.max(reposted);
        Ok(())
    }

    /// We re-posted one receive slot.
    pub(crate) fn handle_reposted(&mut self) {
        self.reposted += 1;
    }

    /// The count to put on an outgoing message; marks it advertised.
    pub(crate) fn advertise(&mut self) -> u64 {
        self.advertised = self.reposted;
        self.reposted
    }

    /// Whether enough re-posts are unadvertised to send them on their own.
    pub(crate) fn should_return(&self) -> bool {
        self.reposted - self.advertised >= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two peers exchanging only counts, with every message delivered and re-posted at
    /// once: the sans-IO "pair" harness of STYLE rule 13.
    #[test]
    fn data_keeps_one_credit_for_control() {
        let mut a = Credits::new(4, 4, 2);
        assert!(a.try_take_data());
        assert!(a.try_take_data());
        assert!(a.try_take_data());
        assert!(!a.try_take_data(), "last credit is reserved");
        assert!(
            !a.try_take_control(),
            "nothing to return: the reserve stays"
        );
        a.handle_reposted();
        assert!(
            a.try_take_control(),
            "a message that returns credit may use it"
        );
        assert_eq!(a.advertise(), 1);
        assert!(!a.try_take_control());
        a.handle_peer_reposted(3).unwrap();
        assert_eq!(a.available(), 3);
        assert!(a.handle_peer_reposted(9).is_err());
        // Reordered (stale) counts never lower what is known.
        a.handle_peer_reposted(1).unwrap();
        assert_eq!(a.available(), 3);
    }

    #[test]
    fn explicit_returns_need_the_threshold() {
        let mut b = Credits::new(4, 4, 2);
        b.handle_reposted();
        assert!(!b.should_return(), "one re-post does not justify a message");
        b.handle_reposted();
        assert!(b.should_return());
        assert_eq!(b.advertise(), 2);
        assert!(!b.should_return());
    }

    #[test]
    fn one_way_traffic_never_stalls_and_idle_control_dies_out() {
        // A sends data as fast as credits allow; B only answers with control messages
        // when the rules say so. Count how far A gets and how much control B sends.
        let (slots, threshold) = (8u32, 2u32);
        let mut a = Credits::new(slots, slots, threshold);
        let mut b = Credits::new(slots, slots, threshold);
        let mut in_flight_to_b = 0u64;
        let mut data_sent = 0;
        let mut control_from_b = 0;
        for _ in 0..10_000 {
            while a.try_take_data() {
                in_flight_to_b += 1;
                data_sent += 1;
            }
            // B receives and re-posts everything.
            for _ in 0..in_flight_to_b {
                b.handle_reposted();
            }
            in_flight_to_b = 0;
            if b.should_return() && b.try_take_control() {
                control_from_b += 1;
                let count = b.advertise();
                a.handle_peer_reposted(count).unwrap();
                // A re-posts B's control slot; one re-post alone is not returned (B is
                // not at its reserve).
                a.handle_reposted();
                if a.should_return() && a.try_take_control() {
                    b.handle_peer_reposted(a.advertise()).unwrap();
                    b.handle_reposted();
                }
            }
        }
        assert!(data_sent > 10_000, "A stalled after {data_sent} messages");
        assert!(control_from_b <= 10_000);
    }

    /// A message on the model's wire: what it is and the re-post count it advertises.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    struct Msg {
        data: bool,
        ping: bool,
        advertised: u64,
    }

    /// One peer of the model: its credits, its receive slots (posted, or held by the
    /// application after a data message), and what it still wants to send.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    struct Side {
        credits: Credits,
        posted: u32,
        held: u32,
        wants_data: u32,
        pings_left: u32,
        ping_due: bool,
        pong_due: bool,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    struct World {
        sides: [Side; 2],
        /// `wire[i]`: messages from side i to side 1 - i, in order (an RC QP).
        wire: [std::collections::VecDeque<Msg>; 2],
    }

    /// The control-credit rule under test: the real one, or the old "any credit will do".
    type TakeControl = fn(&mut Credits) -> bool;

    fn old_rule(c: &mut Credits) -> bool {
        if c.available() >= 1 {
            c.sent += 1;
            true
        } else {
            false
        }
    }

    /// Every state reachable from `start` under `take_control`; returns the first
    /// violation: a SEND meeting no posted receive (RNR), a peer count the other side
    /// rejects, a stuck state (nothing can happen, yet something is due or in flight), or
    /// control traffic that never dies out (a side sends more than `cap` messages).
    fn explore(start: World, take_control: TakeControl, cap: u64) -> Result<usize, String> {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![start];
        while let Some(world) = stack.pop() {
            if !seen.insert(world.clone()) {
                continue;
            }
            let mut next = Vec::new();
            for i in 0..2 {
                let j = 1 - i;
                let side = &world.sides[i];
                if side.credits.sent > cap {
                    return Err(format!("control traffic does not die out: {world:?}"));
                }
                // Send data.
                if side.wants_data > 0 {
                    let mut w = world.clone();
                    if w.sides[i].credits.try_take_data() {
                        w.sides[i].wants_data -= 1;
                        let advertised = w.sides[i].credits.advertise();
                        w.wire[i].push_back(Msg {
                            data: true,
                            ping: false,
                            advertised,
                        });
                        next.push(w);
                    }
                }
                // Send a control message when one is due.
                let due = side.ping_due || side.pong_due || side.credits.should_return();
                if due {
                    let mut w = world.clone();
                    if take_control(&mut w.sides[i].credits) {
                        let ping = std::mem::take(&mut w.sides[i].ping_due);
                        w.sides[i].pong_due = false;
                        let advertised = w.sides[i].credits.advertise();
                        w.wire[i].push_back(Msg {
                            data: false,
                            ping,
                            advertised,
                        });
                        next.push(w);
                    }
                }
                // Deliver the oldest message from i to j.
                if let Some(msg) = world.wire[i].front() {
                    let mut w = world.clone();
                    w.wire[i].pop_front();
                    let to = &mut w.sides[j];
                    if to.posted == 0 {
                        return Err(format!("receiver not ready (RNR): {world:?}"));
                    }
                    to.posted -= 1;
                    to.credits
                        .handle_peer_reposted(msg.advertised)
                        .map_err(|lie| lie.to_string())?;
                    if msg.data {
                        to.held += 1;
                    } else {
                        // The driver re-posts a control slot at once.
                        to.posted += 1;
                        to.credits.handle_reposted();
                        to.pong_due |= msg.ping;
                    }
                    next.push(w);
                }
                // The application releases a received frame: its slot is re-posted.
                if side.held > 0 {
                    let mut w = world.clone();
                    w.sides[i].held -= 1;
                    w.sides[i].posted += 1;
                    w.sides[i].credits.handle_reposted();
                    next.push(w);
                }
                // The keepalive wants a ping.
                if side.pings_left > 0 && !side.ping_due {
                    let mut w = world.clone();
                    w.sides[i].pings_left -= 1;
                    w.sides[i].ping_due = true;
                    next.push(w);
                }
            }
            if next.is_empty() {
                let idle = world.wire.iter().all(|q| q.is_empty())
                    && world.sides.iter().all(|s| {
                        s.wants_data == 0
                            && !s.ping_due
                            && !s.pong_due
                            && !s.credits.should_return()
                    });
                if !idle {
                    return Err(format!("stuck: {world:?}"));
                }
            }
            stack.extend(next);
        }
        Ok(seen.len())
    }

    fn start(slots: u32, threshold: u32, wants_data: u32, pings: u32) -> World {
        let side = Side {
            credits: Credits::new(slots, slots, threshold),
            posted: slots,
            held: 0,
            wants_data,
            pings_left: pings,
            ping_due: false,
            pong_due: false,
        };
        World {
            sides: [side.clone(), side],
            wire: Default::default(),
        }
    }

    #[test]
    fn exhaustive_credit_rules_never_rnr_never_stall_and_control_dies_out() {
        let mut states = 0;
        for slots in 3..=4 {
            for threshold in 2..slots {
                for wants_data in 0..=2 {
                    for pings in 0..=1 {
                        let world = start(slots, threshold, wants_data, pings);
                        let cap = 4 * u64::from(slots + wants_data + pings) + 8;
                        states += explore(world, Credits::try_take_control, cap).unwrap_or_else(|e| {
                            panic!("slots {slots}, threshold {threshold}, data {wants_data}, pings {pings}: {e}")
                        });
                    }
                }
            }
        }
        assert!(states > 1_000, "explored {states} states");
        eprintln!("credit rules: {states} states explored");
    }

    #[test]
    fn exhaustive_check_finds_the_crossing_pings_of_the_old_rule() {
        // With any credit good enough for a control message, two peers at their last
        // credit can both spend it on a ping and be left unable to answer.
        let found = (3..=4).any(|slots| {
            explore(start(slots, 2, 2, 1), old_rule, 64).is_err_and(|e| e.starts_with("stuck"))
        });
        assert!(found, "the old rule deadlocks somewhere");
    }
}
