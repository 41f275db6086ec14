//! The sending half of a stream: the window the peer granted, waited on while spent.

use std::task::{Poll, Waker};

use parking_lot::Mutex;

use crate::violation::Violation;
use crate::wire::{INITIAL_STREAM_WINDOW, MAX_STREAM_WINDOW};
use crate::Status;

/// The send half of one stream: the window the peer granted.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<OutboxState>,
}

#[derive(Default)]
pub(super) struct OutboxState {
    pub(super) window: i64,
    /// Set when the call ended or failed: the sender stops.
    pub(super) closed: Option<Status>,
    pub(super) waker: Option<Waker>,
}

impl Outbox {
    /// An outbox with the peer's initial window (`0` = [`INITIAL_STREAM_WINDOW`]).
    pub(crate) fn new(window: u32) -> Outbox {
        let window = if window == 0 {
            INITIAL_STREAM_WINDOW
        } else {
            window
        };
        Outbox {
            state: Mutex::new(OutboxState {
                window: i64::from(window).min(MAX_STREAM_WINDOW),
                closed: None,
                waker: None,
            }),
        }
    }

    /// An outbox with no window yet (a client's request stream, until the server starts
    /// the call).
    pub(crate) fn closed_window() -> Outbox {
        Outbox::default()
    }

    /// The peer granted `credits` more bytes.
    ///
    /// # Errors
    /// The window would exceed [`MAX_STREAM_WINDOW`] (a protocol violation).
    pub(crate) fn grant(&self, credits: u32) -> Result<(), Violation> {
        let mut state = self.state.lock();
        let window = state.window + i64::from(credits);
        if window > MAX_STREAM_WINDOW {
            return Err(Violation::WindowOverflow { credits });
        }
        state.window = window;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        Ok(())
    }

    /// Whether the call is over (a sender stops).
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed.is_some()
    }

    /// The call is over: a waiting sender stops with `status`.
    pub(crate) fn close(&self, status: Status) {
        let mut state = self.state.lock();
        if state.closed.is_none() {
            state.closed = Some(status);
        }
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// The window now (0 once the stream is closed): messages may be sent while it is
    /// positive.
    pub(crate) fn window(&self) -> i64 {
        let state = self.state.lock();
        if state.closed.is_some() {
            0
        } else {
            state.window
        }
    }

    /// Takes `len` bytes from the window: messages sent while [`Outbox::window`] (less
    /// what they took before) was positive.
    pub(crate) fn take(&self, len: usize) {
        self.state.lock().window -= len as i64;
    }

    /// Waits until the window is positive, then takes `len` bytes from it.
    ///
    /// # Errors
    /// The status the stream was closed with.
    pub(crate) async fn reserve(&self, len: usize) -> Result<(), Status> {
        std::future::poll_fn(|cx| {
            let mut state = self.state.lock();
            if let Some(status) = &state.closed {
                return Poll::Ready(Err(status.clone()));
            }
            if state.window > 0 {
                state.window -= len as i64;
                return Poll::Ready(Ok(()));
            }
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}
