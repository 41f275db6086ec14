//! A request stream fed by hand, for the clients' streaming calls.

use futures_util::Stream;
use tokio::sync::mpsc;

use crate::{code, Failure};

/// A request stream fed by hand: messages sent on the sender go out in order; dropping
/// the sender half-closes.
pub fn request_channel<T: Send + 'static>(
) -> (mpsc::Sender<T>, impl Stream<Item = T> + Send + 'static) {
    let (tx, mut rx) = mpsc::channel(16);
    (
        tx,
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)),
    )
}

/// The sending end of a call's request stream, until it is half-closed.
#[derive(Debug)]
pub struct Requests<T>(Option<mpsc::Sender<T>>);

impl<T> Requests<T> {
    /// `tx`, already half-closed if `closed`.
    pub fn new(tx: mpsc::Sender<T>, closed: bool) -> Requests<T> {
        Requests((!closed).then_some(tx))
    }

    /// Sends one more request.
    ///
    /// # Errors
    /// `CANCELLED`: the stream was half-closed, or the call went.
    pub async fn send(&self, request: T) -> Result<(), Failure> {
        let closed = || Failure {
            code: code::CANCELLED,
            message: "the request stream is closed".into(),
        };
        let tx = self.0.as_ref().ok_or_else(closed)?;
        tx.send(request).await.map_err(|_| closed())
    }

    /// Half-closes the stream.
    pub fn close(&mut self) {
        self.0 = None;
    }
}
