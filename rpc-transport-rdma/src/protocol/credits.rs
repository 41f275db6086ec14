//! [`Credits`]: receive-slot accounting so that no SEND ever meets an empty receive queue.
//!
//! Counts are cumulative (never reset), so reordering of the `reposted` values between
//! concurrent senders is harmless: the receiver keeps the maximum.
//!
//! Rules (each side runs the same):
//! - The peer has `peer_slots` receive slots. Credits available =
//!   `peer_slots - (sent - peer_reposted)`.
//! - A DATA or RENDEZVOUS message needs 2 credits available and uses 1: the last credit is
//!   reserved for CONTROL messages, which need 1. So a side can always return credits,
//!   acknowledge reads and answer pings, whatever its data traffic did.
//! - Every message carries this side's `reposted` count; a CONTROL message is sent on its
//!   own only when at least `threshold` (>= 2) re-posts are unadvertised (or read-done
//!   tokens or a pong wait). Since a CONTROL message costs the peer one slot and returns
//!   at least two, control traffic between idle peers dies out instead of ping-ponging.

/// Credit state of one connection. Sans-IO: the driver calls it under a lock.
#[derive(Debug, Clone)]
pub(crate) struct Credits {
    peer_slots: u64,
    sent: u64,
    peer_reposted: u64,
    reposted: u64,
    advertised: u64,
    threshold: u64,
}

impl Credits {
    /// Fresh accounting towards a peer with `peer_slots` receive slots; explicit credit
    /// messages once `threshold` re-posts are unadvertised.
    pub(crate) fn new(peer_slots: u32, threshold: u32) -> Credits {
        Credits {
            peer_slots: u64::from(peer_slots),
            sent: 0,
            peer_reposted: 0,
            reposted: 0,
            advertised: 0,
            threshold: u64::from(threshold.max(2)),
        }
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

    /// Takes a credit for a control message (may use the reserve).
    #[must_use]
    pub(crate) fn try_take_control(&mut self) -> bool {
        if self.available() >= 1 {
            self.sent += 1;
            true
        } else {
            false
        }
    }

    /// Gives back a credit that was taken but not used (nothing was posted).
    pub(crate) fn untake(&mut self) {
        self.sent -= 1;
    }

    /// The peer says it has re-posted `reposted` of our messages in all.
    ///
    /// # Errors
    /// If the peer claims more re-posts than messages were sent (a broken peer).
    pub(crate) fn handle_peer_reposted(&mut self, reposted: u64) -> Result<(), String> {
        if reposted > self.sent {
            return Err(format!(
                "peer acknowledges {reposted} messages of {} sent",
                self.sent
            ));
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
        let mut a = Credits::new(4, 2);
        assert!(a.try_take_data());
        assert!(a.try_take_data());
        assert!(a.try_take_data());
        assert!(!a.try_take_data(), "last credit is reserved");
        assert!(a.try_take_control());
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
        let mut b = Credits::new(4, 2);
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
        let mut a = Credits::new(slots, threshold);
        let mut b = Credits::new(slots, threshold);
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
                // A re-posts B's control slot; one re-post alone is not returned.
                a.handle_reposted();
                assert!(!a.should_return() || a.reposted - a.advertised >= 2);
                if a.should_return() && a.try_take_control() {
                    b.handle_peer_reposted(a.advertise()).unwrap();
                    b.handle_reposted();
                }
            }
        }
        assert!(data_sent > 10_000, "A stalled after {data_sent} messages");
        assert!(control_from_b <= 10_000);
    }
}
