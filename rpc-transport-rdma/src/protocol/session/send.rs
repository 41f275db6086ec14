//! The send side of a session: data credits, the lending limit, loans and the adverts
//! that give the peer its credits back; the receive ring's growth.

use std::time::Instant;

use super::{Advert, Loan, Session};
use crate::protocol::Prefix;

impl<F> Session<F> {
    /// Takes a credit for a data message (keeping the reserve for control).
    #[must_use]
    pub(crate) fn try_take_data(&mut self) -> bool {
        let taken = self.credits.try_take_data();
        self.want |= !taken;
        taken
    }

    /// Gives back a credit taken for a message that was never posted.
    pub(crate) fn untake(&mut self) {
        self.credits.untake();
    }

    /// Reserves room in the lending limit for a frame of `len` bytes.
    #[must_use]
    pub(crate) fn try_reserve_lending(&mut self, len: usize) -> bool {
        self.lender.try_reserve(len)
    }

    /// Gives back a reservation (a frame never sent, or a loan that ended).
    pub(crate) fn release_lending(&mut self, len: usize) {
        self.lender.release(len);
    }

    /// Records a buffer lent under verbs key `key`; returns the token for its descriptor.
    pub(crate) fn lend(&mut self, key: u32, now: Instant) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.lent.insert(token, Loan { key, at: now });
        token
    }

    /// What to put on an outgoing message: re-posts, slots granted, whether we want
    /// more (marks them advertised).
    pub(crate) fn advertise(&mut self) -> Advert {
        self.granted_advertised = self.cfg.own_slots;
        Advert {
            flags: if std::mem::take(&mut self.want) {
                Prefix::WANT
            } else {
                0
            },
            granted: self.cfg.own_slots,
            reposted: self.credits.advertise(),
        }
    }

    /// Receive slots the peer has posted for us, as far as we know.
    pub(crate) fn peer_slots(&self) -> u64 {
        self.credits.peer_slots()
    }

    /// Whether either ring is to grow: the peer asked for slots, or granted more than
    /// `send_slots` while the send ring may still grow (both rings grow to `max_slots`;
    /// the driver then runs its growth, which takes the flags).
    pub(crate) fn growth_due(&self, send_slots: u32) -> bool {
        let send_short =
            self.peer_slots() > u64::from(send_slots) && send_slots < self.cfg.max_slots;
        (self.grow_due || send_short) && !self.is_closed()
    }

    /// Whether the receive ring is to grow now (the peer asked); clears it.
    pub(crate) fn take_grow(&mut self) -> bool {
        std::mem::take(&mut self.grow_due) && !self.is_closed()
    }

    /// The receive ring grew by `n` posted slots: the peer is told on the next message.
    pub(crate) fn grown(&mut self, n: u32) {
        self.cfg.own_slots += n;
        self.credits.grow_own(u64::from(self.cfg.own_slots));
    }

    // ---- receiving ---------------------------------------------------------------
}
