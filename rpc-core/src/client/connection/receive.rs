//! The receive shell around the demultiplexer (`demux.rs`): received frames from the
//! receive task or the transport's completion path to the demultiplexer; a protocol
//! violation or the transport's end fails every call on the connection.

use std::sync::atomic::{AtomicBool, Ordering};

use super::demux::{Demux, Heard};
use super::Shared;
use crate::transport::{Connection, FrameSink, TransportError};
use crate::violation::Violation;
use crate::Status;

/// Most frames the receive loop handles as one run.
pub(super) const MAX_RUN: usize = 256;

/// Most runs (of frames, then of stream messages in one buffer) the receive loop hands
/// on after one `recv` before it receives again.
pub(super) const MAX_TURNS: usize = 16;

/// The connection's demultiplexer.
fn demux<C: Connection>(shared: &Shared<C>) -> Demux<'_, C::RecvBuf, C> {
    Demux {
        calls: &shared.calls,
        control: &shared.control,
        keep: &*shared.conn,
    }
}

/// What the demultiplexer heard: a first GOAWAY tells the balanced endpoint; a violation
/// becomes the status every call on the connection fails with.
fn heard<C: Connection>(shared: &Shared<C>, heard: Result<Heard, Violation>) -> Result<(), Status> {
    match heard {
        Ok(Heard::Frame) => Ok(()),
        Ok(Heard::Draining) => {
            tracing::debug!(peer = %shared.conn.peer(), "server is going away (GOAWAY)");
            shared.changed();
            Ok(())
        }
        Err(violation) => {
            tracing::warn!(peer = %shared.conn.peer(), "closing connection: {violation}");
            Err(Status::unavailable(format!(
                "protocol violation by the server: {violation}"
            )))
        }
    }
}

/// Hands a run of received frames to their callers.
pub(super) fn dispatch_run<C: Connection>(
    shared: &Shared<C>,
    run: &mut Vec<C::RecvBuf>,
) -> Result<(), Status> {
    shared.heard.store(true, Ordering::Relaxed);
    heard(shared, demux(shared).run(run))
}

/// Hands a run of stream messages in one buffer to their streams.
pub(super) fn dispatch_messages<C: Connection>(
    shared: &Shared<C>,
    run: &[u8],
) -> Result<(), Status> {
    shared.heard.store(true, Ordering::Relaxed);
    heard(shared, demux(shared).messages(run))
}

/// Hands one received frame to its caller, or to the control queue.
pub(super) fn dispatch<C: Connection>(shared: &Shared<C>, buf: C::RecvBuf) -> Result<(), Status> {
    shared.heard.store(true, Ordering::Relaxed);
    heard(shared, demux(shared).frame(buf))
}

/// The connection is gone: every call on it fails with `reason`.
pub(super) fn ended<C: Connection>(shared: &Shared<C>, reason: Status) {
    tracing::debug!(peer = %shared.conn.peer(), "channel closed: {}", reason.message());
    shared.calls.lock().close(reason);
    shared.conn.close();
    shared.changed();
}

/// The receive path for a transport that runs to completion ([`Connection::push_to`]):
/// the transport's completion path hands each response straight to its caller, with no
/// receive task in between.
pub(super) struct Dispatch<C: Connection> {
    shared: std::sync::Weak<Shared<C>>,
    /// Set once the connection ended (frames after that are dropped).
    ended: AtomicBool,
}

impl<C: Connection> Dispatch<C> {
    /// Hands frames to the calls of `shared` while it lives.
    pub(super) fn new(shared: std::sync::Weak<Shared<C>>) -> Dispatch<C> {
        Dispatch {
            shared,
            ended: AtomicBool::new(false),
        }
    }
}

impl<C: Connection> FrameSink<C::RecvBuf> for Dispatch<C> {
    fn frame(&self, buf: C::RecvBuf) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Err(reason) = dispatch(&shared, buf) {
            self.ended.store(true, Ordering::Release);
            ended(&shared, reason);
        }
    }

    fn frames(&self, frames: &mut Vec<C::RecvBuf>) {
        if self.ended.load(Ordering::Acquire) {
            frames.clear();
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            frames.clear();
            return;
        };
        if let Err(reason) = dispatch_run(&shared, frames) {
            frames.clear();
            self.ended.store(true, Ordering::Release);
            ended(&shared, reason);
        }
    }

    fn closed(&self, result: Result<(), TransportError>) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            let reason = match result {
                Ok(()) => Status::unavailable("connection closed by peer"),
                Err(e) => Status::unavailable(e.to_string()),
            };
            ended(&shared, reason);
        }
    }
}
