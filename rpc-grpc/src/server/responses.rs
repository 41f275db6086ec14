//! A call's response side, the I/O shell of the translator (`translate.rs`): performs
//! its HTTP/2 actions, waits for HTTP/2 flow control and hands it what the translator
//! lets go.

use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use http::Response;
use rdmarpc_core::account::Charge;
use rdmarpc_core::wire::{FrameKind, Header};
use rdmarpc_core::Status;
use tokio::sync::mpsc;

use super::call::{Call, Stop, Wait};
use super::translate::H2;
use super::ToCall;

impl Call {
    /// After the request: the server's frames until its final one went out.
    pub(super) async fn respond_until_done(
        &mut self,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
    ) -> Result<(), Stop> {
        loop {
            self.finish()?;
            if self.response.is_done() {
                return Ok(());
            }
            tokio::select! {
                frame = frames.recv() => {
                    let Some(frame) = frame else { return Err(Stop::ServerGone) };
                    // (Window updates for a request stream that ended: nothing to do.)
                    self.on_server_frames(frame, frames)?;
                }
                wait = Self::wait_stream(&mut self.respond, &mut self.sending, self.response.waiting(), &mut self.waiting, self.shared.config.stream_idle_timeout) => {
                    self.sent(wait).await?;
                }
            }
        }
    }

    /// Waits until HTTP/2 lets the first queued message (or part of it) go (`queued`
    /// bytes wait), the client resets the call, or the queued messages waited for the
    /// client's window `idle` since `waiting` (set when a wait with none granted begins:
    /// the only clock read).
    pub(super) async fn wait_stream(
        respond: &mut SendResponse<Bytes>,
        sending: &mut Option<SendStream<Bytes>>,
        queued: usize,
        waiting: &mut Option<tokio::time::Instant>,
        idle: Duration,
    ) -> Wait {
        let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        std::future::poll_fn(|cx| match sending {
            Some(stream) => {
                if stream.poll_reset(cx).is_ready() {
                    return Poll::Ready(Wait::Reset);
                }
                if queued > 0 {
                    stream.reserve_capacity(queued);
                    match stream.poll_capacity(cx) {
                        Poll::Ready(Some(Ok(0))) | Poll::Pending => {}
                        Poll::Ready(Some(Ok(n))) => {
                            *waiting = None;
                            return Poll::Ready(Wait::Capacity(n));
                        }
                        Poll::Ready(_) => return Poll::Ready(Wait::Reset),
                    }
                    let since = *waiting.get_or_insert_with(tokio::time::Instant::now);
                    let timer = timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + idle)));
                    if std::future::Future::poll(timer.as_mut(), cx).is_ready() {
                        return Poll::Ready(Wait::Idle);
                    }
                }
                Poll::Pending
            }
            None => match respond.poll_reset(cx) {
                Poll::Ready(_) => Poll::Ready(Wait::Reset),
                Poll::Pending => Poll::Pending,
            },
        })
        .await
    }

    /// Sends what HTTP/2 now allows of the queued messages (short ones joined into one
    /// DATA frame: clients refuse floods of small ones); each message that went out whole
    /// gives the server its window back.
    pub(super) async fn sent(&mut self, wait: Wait) -> Result<(), Stop> {
        let capacity = match wait {
            Wait::Capacity(capacity) => capacity,
            Wait::Reset => return Err(Stop::Cancelled),
            Wait::Idle => {
                tracing::debug!("call {}: reset, its response idle", self.call_id);
                if let Some(stream) = self.sending.as_mut() {
                    stream.send_reset(h2::Reason::CANCEL);
                }
                return Err(Stop::Idle);
            }
        };
        let stream = self.sending.as_mut().expect("capacity needs a stream");
        let mut frames = Vec::new();
        let granted = self.response.take_frames(capacity, &mut frames);
        for data in frames {
            if stream.send_data(data, false).is_err() {
                return Err(Stop::Cancelled);
            }
        }
        if granted > 0 {
            let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
            grant.credits = granted.min(u32::MAX as usize) as u32;
            self.to_server(Bytes::copy_from_slice(&grant.encode()), Charge::none())
                .await?;
        }
        Ok(())
    }

    /// `first` and the server's frames that came along with it (short messages of a run
    /// go out together in one DATA frame); the window they grant the request stream.
    pub(super) fn on_server_frames(
        &mut self,
        first: ToCall,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
    ) -> Result<i64, Stop> {
        let mut granted = 0;
        let mut actions = Vec::new();
        let mut next = Some(first);
        while let Some((frame, held)) = next.take().or_else(|| frames.try_recv().ok()) {
            if let Some(credits) = self.response.on_frame(frame, held, &mut actions) {
                granted += i64::from(credits);
            }
        }
        self.apply(actions)?;
        Ok(granted)
    }

    /// The final status once every queued message went out, if the server sent it.
    pub(super) fn finish(&mut self) -> Result<(), Stop> {
        let mut actions = Vec::new();
        self.response.finish(&mut actions);
        self.apply(actions)
    }

    /// Ends the call with `status`: trailers-only if nothing was sent yet.
    pub(super) fn fail(&mut self, status: &Status) {
        let mut actions = Vec::new();
        self.response.fail(status, &mut actions);
        let _ = self.apply(actions);
    }

    /// Performs the translator's actions on the HTTP/2 stream.
    fn apply(&mut self, actions: Vec<H2>) -> Result<(), Stop> {
        for action in actions {
            match action {
                H2::Headers(headers) => {
                    let mut response = Response::new(());
                    *response.headers_mut() = headers;
                    let stream = self
                        .respond
                        .send_response(response, false)
                        .map_err(|_| Stop::Cancelled)?;
                    self.sending = Some(stream);
                }
                H2::Trailers(trailers) => {
                    let stream = self.sending.as_mut().expect("headers sent");
                    stream
                        .send_trailers(trailers)
                        .map_err(|_| Stop::Cancelled)?;
                }
                H2::TrailersOnly(headers) => {
                    let mut response = Response::new(());
                    *response.headers_mut() = headers;
                    let _ = self.respond.send_response(response, true);
                }
                H2::Refuse => self.respond.send_reset(h2::Reason::REFUSED_STREAM),
            }
        }
        Ok(())
    }
}
