//! What a server's rendezvous loans hold on the connection's account
//! ([`Resource::Sending`]): a frame lent to the peer is bytes queued for it until the
//! peer's read-done, so a peer that never reads its loans, over however many
//! connections, holds at most its share of the server's sending bytes (the lending
//! budget bounds each connection alone). Eager frames go into the connection's
//! registered ring, fixed per connection: not charged.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use rdmarpc_core::account::{Account, Charge, Resource};
use rdmarpc_core::TransportError;
use tokio::sync::watch;

use crate::protocol::session::Close;

/// The account (set when a server starts serving the connection; unset on clients) and
/// the charges of the frames lent now, by loan key.
#[derive(Debug, Default)]
pub(crate) struct LoanCharges {
    account: OnceLock<Account>,
    lent: Mutex<HashMap<u32, Charge>>,
}

impl LoanCharges {
    /// Keeps the server's account of this connection.
    pub(crate) fn serving(&self, account: &Account) {
        let _ = self.account.set(account.clone());
    }

    /// Charges a rendezvous frame of `len` bytes before it is built, waiting while the
    /// connection, its peer or the server has no room, until `closed` says the
    /// connection ended.
    pub(crate) async fn charge(
        &self,
        len: usize,
        closed: &watch::Sender<Option<Close>>,
    ) -> Result<Charge, TransportError> {
        let Some(account) = self.account.get() else {
            return Ok(Charge::none());
        };
        if let Ok(charge) = account.try_charge(Resource::Sending, len) {
            return Ok(charge);
        }
        let mut ended = closed.subscribe();
        tokio::select! {
            charge = account.charge(Resource::Sending, len) => Ok(charge),
            _ = ended.wait_for(Option::is_some) => Err(TransportError::Closed),
        }
    }

    /// The frame's charge is held by the loan `key` from now on.
    pub(crate) fn lent(&self, key: u32, charge: Charge) {
        if charge.amount() > 0 {
            self.lent.lock().insert(key, charge);
        }
    }

    /// The loan `key` ended (its read-done came): its charge goes back.
    pub(crate) fn returned(&self, key: u32) {
        let charge = self.lent.lock().remove(&key);
        drop(charge);
    }

    /// The connection ended: every loan's charge goes back.
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.lent.lock());
        drop(all);
    }
}
