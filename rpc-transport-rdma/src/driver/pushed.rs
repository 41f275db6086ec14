//! Pieces of pushed rendezvous frames as they arrive (the session's `pushed.rs` keeps
//! their state; the descriptor goes through `received_descriptor`): each copied out and
//! its slot re-posted at once; the whole frame goes up in heap memory, in its place in the
//! arrival order.

use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::connection::{Inner, Received, State};
use crate::counters::Counters;
use crate::protocol::session::Close;
use crate::protocol::{PIECE_TOKEN_LEN, PREFIX_LEN};
use crate::verbs::RecvSlot;

/// A piece of a pushed frame: copied into the frame, the slot re-posted; the last piece
/// makes the frame, whose read-done goes out when it is dropped (as a READ frame's).
pub(super) fn received_piece(
    inner: &Arc<Inner>,
    mut state: MutexGuard<'_, State>,
    slot: RecvSlot,
) -> Result<(), Close> {
    let body = &inner.rings.received(&slot)[PREFIX_LEN..];
    let token = u64::from_le_bytes(body[..PIECE_TOKEN_LEN].try_into().expect("8 bytes"));
    let result = match state.session.handle_piece(token, &body[PIECE_TOKEN_LEN..]) {
        Ok(Some((tag, bytes))) => {
            Counters::bump(&inner.counters.pushed_receives, 1);
            super::reads::frame_completed(inner, &mut state, tag, |token, _len, lent| {
                Received::Copied {
                    inner: inner.clone(),
                    bytes,
                    lent,
                    token,
                }
            })
        }
        Ok(None) => Ok(()),
        Err(why) => Err(why),
    };
    drop(state);
    // The piece's message carried credit back.
    inner.space.notify_waiters();
    inner.repost(slot);
    result
}
