//! Room on the connection's account for a request stream's next chunk, taken before
//! the chunk is read.

use rdmarpc_core::account::{Account, Charge, Resource};

/// The largest DATA frame a client may send under HTTP/2's default
/// `SETTINGS_MAX_FRAME_SIZE`: the most one chunk of a body can be unless the server
/// advertised more ([`Room::chunks_up_to`]).
pub(super) const CHUNK: usize = 16 * 1024;

/// Room on the connection's account for a request stream's next body chunk, taken
/// before the chunk is read; when there is none, waited for without holding up the rest
/// of the call (the server's frames, its responses), so that a call never waits for room
/// that only its own queued messages could free.
pub(crate) struct Room {
    pub(super) account: Account,
    pub(super) reserved: Charge,
    pub(super) waiting: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Charge> + Send>>>,
    /// The largest chunk a client may send (its frames may be this long).
    chunk: usize,
    /// The room taken before each read: [`CHUNK`] until a longer chunk came, then
    /// `chunk` (a stream that has not sent long frames does not hold room for them).
    want: usize,
}

impl Room {
    pub(crate) fn new(account: Account) -> Room {
        Room {
            account,
            reserved: Charge::none(),
            waiting: None,
            chunk: CHUNK,
            want: CHUNK,
        }
    }

    /// Chunks of up to `max_frame_size` bytes (what the server advertised as
    /// `SETTINGS_MAX_FRAME_SIZE`): once a chunk longer than [`CHUNK`] came, the room taken
    /// before a read covers the largest.
    pub(crate) fn chunks_up_to(&mut self, max_frame_size: usize) {
        self.chunk = max_frame_size.max(CHUNK);
    }

    /// Whether a chunk may be read now, `held` being what the call's message in
    /// progress holds; if not, a wait for room has started ([`Room::granted`]).
    pub(crate) fn ready(&mut self, held: &Charge) -> bool {
        if self.waiting.is_some() {
            return false;
        }
        let limit = self.account.limit(Resource::Bytes);
        let room = limit.saturating_sub(held.amount() + self.reserved.amount());
        if self.reserved.amount() >= self.want || room == 0 {
            // Room for a chunk, or a message charged as the whole of the limit already.
            return true;
        }
        let want = (self.want - self.reserved.amount()).min(room);
        match self.account.try_charge(Resource::Bytes, want) {
            Ok(more) => {
                self.reserved.merge(more);
                true
            }
            Err(_) => {
                let account = self.account.clone();
                self.waiting = Some(Box::pin(async move {
                    account.charge(Resource::Bytes, want).await
                }));
                false
            }
        }
    }

    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// Resolves once the room waited for is granted.
    pub(crate) async fn granted(&mut self) {
        if let Some(waiting) = self.waiting.as_mut() {
            let more = waiting.await;
            self.reserved.merge(more);
            self.waiting = None;
        }
    }

    /// A chunk of `n` bytes arrived: its room moves to `held`. A chunk longer than the
    /// room (the stream's first long frame) is charged for the rest as far as the
    /// account allows (its bytes were in memory already, within the HTTP/2 windows), and
    /// from then on the room taken covers the longest frame.
    pub(crate) fn take(&mut self, held: &mut Charge, n: usize) {
        let reserved = self.reserved.amount();
        held.merge(self.reserved.split(n));
        if n > reserved {
            self.want = self.chunk;
            let limit = self.account.limit(Resource::Bytes);
            let more = (n - reserved).min(limit.saturating_sub(held.amount()));
            if let Ok(charge) = self.account.try_charge(Resource::Bytes, more) {
                held.merge(charge);
            }
        }
    }
}
