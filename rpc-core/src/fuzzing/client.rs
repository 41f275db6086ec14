//! Target `client_demux`: the client's demultiplexer on a script of frames against a
//! unary call, a client-streaming call, a server-streaming call and a bidirectional one.
//!
//! Played twice: frame by frame, with each frame's outcome checked against the
//! protocol's rules, and with runs (the receive loop's batches, with runs of plain stream
//! messages in one buffer as a byte-stream transport hands them over); both plays must
//! end the same way.

use std::collections::HashSet;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::script::{self, header, payload, Copies, Reader, Step, CALLS};
use crate::client::calls::{CallTable, Outcome, Waiter};
use crate::client::connection::demux::{Demux, Heard};
use crate::control::{Control, ControlQueue};
use crate::stream::{Inbox, Outbox};
use crate::violation::Violation;
use crate::wire::{is_plain_message, Flags, Frame, FrameKind, Header, MAX_STREAM_WINDOW};
use crate::{Code, Metadata, Status};

/// One call of the script, and what its caller saw.
enum Call {
    /// Unary (kind 0) or client-streaming (kind 1, with its request window).
    Once {
        rx: oneshot::Receiver<Outcome<Bytes>>,
        outbox: Option<Arc<Outbox>>,
        outcome: Option<Result<Bytes, Code>>,
    },
    /// Server-streaming (kind 2) or bidirectional (kind 3, with its request window).
    Stream {
        inbox: Arc<Inbox>,
        outbox: Option<Arc<Outbox>>,
        reader: Reader,
    },
}

/// How a play ended, to compare the two plays.
#[derive(Debug, PartialEq)]
struct Trace {
    /// Per call: a unary outcome, or the messages read and the end.
    calls: Vec<String>,
    /// The control frames, taken at each boundary (sorted within it).
    control: Vec<Vec<Control>>,
    /// What each boundary heard.
    heard: Vec<Result<Heard, Violation>>,
}

/// One client connection's calls and the demultiplexer over them.
struct Play {
    table: Mutex<CallTable<Bytes>>,
    control: Arc<ControlQueue>,
    ids: [u64; CALLS],
    calls: Vec<Call>,
    /// Credits granted to each request stream so far (initially 0).
    granted: [i64; CALLS],
    /// Frame bytes of messages each stream accepted.
    accepted: [usize; CALLS],
    window: u32,
    /// Calls whose cancel is due (a kind mismatch, an oversized message).
    cancels: HashSet<u64>,
    last_ping: Option<u64>,
    goaways_acknowledged: usize,
    trace: Trace,
}

/// Plays `script` frame by frame, then with runs, and compares.
///
/// # Panics
/// When a frame's outcome breaks the call protocol's rules (a response delivered to the
/// wrong call, a message out of order or not fed, a violation reported for a frame that
/// keeps the rules or none for one that breaks them, a control frame nobody asked for),
/// or when the plays differ.
pub fn client_demux(script: &[u8]) {
    let one_by_one = Play::new(script, true).run(script, false);
    let runs = Play::new(script, false).run(script, true);
    assert_eq!(one_by_one, runs, "frame by frame and in runs differ");
}

impl Play {
    /// The calls of `script`; `checks`: whether readers check what they read.
    fn new(script: &[u8], checks: bool) -> Play {
        let control = Arc::new(ControlQueue::default());
        let mut table = CallTable::new();
        let window = script::window(script);
        let mut ids = [0; CALLS];
        let mut calls = Vec::new();
        for (i, id) in ids.iter_mut().enumerate() {
            let kind = script::kind(script, i);
            let outbox = (kind & 1 == 1).then(|| Arc::new(Outbox::closed_window()));
            let call = if kind < 2 {
                let (tx, rx) = oneshot::channel();
                *id = table
                    .insert_with(|_| match &outbox {
                        Some(outbox) => Waiter::Upload(tx, outbox.clone()),
                        None => Waiter::Once(tx),
                    })
                    .expect("admitted");
                Call::Once {
                    rx,
                    outbox,
                    outcome: None,
                }
            } else {
                let mut made = None;
                *id = table
                    .insert_with(|id| {
                        let inbox = Arc::new(Inbox::new(id, control.clone(), window, window));
                        made = Some(inbox.clone());
                        Waiter::Stream(inbox, outbox.clone())
                    })
                    .expect("admitted");
                Call::Stream {
                    inbox: made.expect("made"),
                    outbox,
                    reader: Reader {
                        checks,
                        ..Reader::default()
                    },
                }
            };
            let _ = table.sent();
            calls.push(call);
        }
        Play {
            table: Mutex::new(table),
            control,
            ids,
            calls,
            granted: [0; CALLS],
            accepted: [0; CALLS],
            window,
            cancels: HashSet::new(),
            last_ping: None,
            goaways_acknowledged: 0,
            trace: Trace {
                calls: Vec::new(),
                control: Vec::new(),
                heard: Vec::new(),
            },
        }
    }

    fn demux(&self) -> Demux<'_, Bytes, Copies> {
        Demux {
            calls: &self.table,
            control: &self.control,
            keep: &Copies,
        }
    }

    /// Plays the steps; with `runs`, frames marked so go as one run.
    fn run(mut self, script: &[u8], runs: bool) -> Trace {
        let steps = script::steps(script, &self.ids);
        let mut run: Vec<Step> = Vec::new();
        for step in steps {
            if step.in_run() {
                run.push(step);
                continue;
            }
            run.push(step);
            let batch = std::mem::take(&mut run);
            if !self.boundary(batch, runs) {
                break;
            }
        }
        if !run.is_empty() {
            self.boundary(run, runs);
        }
        self.finish()
    }

    /// Feeds a batch of steps (the last one may be a read), then takes the control
    /// frames; whether the connection goes on.
    fn boundary(&mut self, batch: Vec<Step>, runs: bool) -> bool {
        let mut frames = Vec::new();
        let mut read = false;
        for step in batch {
            if step.is_read() {
                read = true;
            } else {
                frames.push(Bytes::from(step.bytes));
            }
        }
        let heard = if runs && !frames.is_empty() {
            self.feed_runs(frames)
        } else {
            let mut heard = Ok(Heard::Frame);
            for frame in frames {
                let got = self.checked(frame);
                heard = match (heard, got) {
                    (Ok(Heard::Draining), Ok(_)) | (Ok(_), Ok(Heard::Draining)) => {
                        Ok(Heard::Draining)
                    }
                    (Ok(_), other) => other,
                    (err, _) => err,
                };
                if heard.is_err() {
                    break;
                }
            }
            heard
        };
        let ok = heard.is_ok();
        self.trace.heard.push(heard);
        if ok && read {
            self.read_all();
        }
        let mut batch = self.control.take_batch().expect("open");
        if !runs {
            self.check_control(&batch);
        }
        batch.sort_unstable_by_key(|&(kind, id, credits)| (kind as u8, id, credits));
        self.trace.control.push(batch);
        ok
    }

    /// Feeds `frames` as the receive loop gets them from a byte-stream transport: runs
    /// of two or more plain stream messages as one buffer
    /// ([`Demux::messages`]), the frames between them as runs ([`Demux::run`]).
    fn feed_runs(&self, frames: Vec<Bytes>) -> Result<Heard, Violation> {
        let plain = |frame: &Bytes| matches!(Header::decode(frame), Ok(Some(h)) if is_plain_message(&h) && h.frame_len() == frame.len());
        let mut heard = Heard::Frame;
        let mut frames = frames.into_iter().peekable();
        let mut others = Vec::new();
        while let Some(frame) = frames.next() {
            if !(plain(&frame) && frames.peek().is_some_and(plain)) {
                others.push(frame);
                continue;
            }
            if !others.is_empty() {
                heard = heard.or(self.demux().run(&mut others)?);
            }
            let mut messages = frame.to_vec();
            while let Some(next) = frames.next_if(plain) {
                messages.extend_from_slice(&next);
            }
            heard = heard.or(self.demux().messages(&messages)?);
        }
        if !others.is_empty() {
            heard = heard.or(self.demux().run(&mut others)?);
        }
        Ok(heard)
    }

    /// Reads every stream (granting window back) and collects unary outcomes.
    fn read_all(&mut self) {
        for call in &mut self.calls {
            match call {
                Call::Stream { inbox, reader, .. } => reader.read(inbox),
                Call::Once { rx, outcome, .. } => {
                    if outcome.is_none() {
                        if let Ok(got) = rx.try_recv() {
                            *outcome = Some(got.map_err(|s| s.code()));
                        }
                    }
                }
            }
        }
    }

    /// The index of the live call `id` names.
    fn call_of(&self, id: u64) -> Option<usize> {
        let i = self.ids.iter().position(|&x| x == id)?;
        self.table.lock().get(id).is_some().then_some(i)
    }

    /// Feeds one frame and checks its outcome against the rules.
    fn checked(&mut self, frame: Bytes) -> Result<Heard, Violation> {
        let Some(h) = header(&frame) else {
            let err = Frame::parse(&frame).expect_err("malformed");
            let got = self.demux().frame(frame);
            assert_eq!(got, Err(Violation::Malformed(err)));
            return got;
        };
        let call = self.call_of(h.call_id);
        let was_draining = self.table.lock().is_draining();
        let got = self.demux().frame(frame.clone());
        match h.kind {
            FrameKind::Ping => self.last_ping = Some(h.call_id),
            FrameKind::GoAway => {
                assert_eq!(
                    got,
                    Ok(if was_draining {
                        Heard::Frame
                    } else {
                        Heard::Draining
                    })
                );
            }
            FrameKind::Response => self.check_response(&h, call, &frame, &got),
            FrameKind::Message => self.check_message(&h, call, &frame, &got),
            FrameKind::WindowUpdate => self.check_grant(&h, call, &got),
            _ => assert_eq!(got, Ok(Heard::Frame), "{:?} is ignored", h.kind),
        }
        if got.is_ok() && h.kind != FrameKind::GoAway {
            assert_eq!(got, Ok(Heard::Frame));
        }
        got
    }

    fn check_response(
        &mut self,
        h: &Header,
        call: Option<usize>,
        frame: &Bytes,
        got: &Result<Heard, Violation>,
    ) {
        let end = h.flags.contains(Flags::END_STREAM);
        let Some(i) = call else {
            assert_eq!(*got, Ok(Heard::Frame), "a response to no call");
            return;
        };
        match &mut self.calls[i] {
            Call::Once { rx, outcome, .. } => {
                assert_eq!(*got, Ok(Heard::Frame));
                let answer = rx.try_recv().expect("answered");
                if end {
                    assert_eq!(answer.as_ref().ok(), Some(frame), "the response");
                } else {
                    assert_eq!(
                        answer.as_ref().map_err(Status::code).err(),
                        Some(Code::Internal)
                    );
                    self.cancels.insert(h.call_id);
                }
                *outcome = Some(answer.map_err(|s| s.code()));
            }
            Call::Stream { inbox, reader, .. } => {
                let frame = Frame::parse(frame).expect("well-formed");
                let metadata = Metadata::decode(frame.metadata);
                match (&metadata, end) {
                    (Err(e), false) => assert_eq!(*got, Err(Violation::Malformed(e.clone()))),
                    _ => assert_eq!(*got, Ok(Heard::Frame)),
                }
                if end {
                    reader.read(inbox);
                    let code = Code::from_u8(h.status);
                    let expected = match (code, metadata) {
                        (Code::Ok, Ok(_)) => Ok(()),
                        (Code::Ok, Err(_)) => Err(Code::Internal),
                        (code, _) => Err(code),
                    };
                    if reader.got.len() == reader.fed.len() {
                        let end = reader.end.as_ref().expect("ended");
                        assert_eq!(end.as_ref().map_err(Status::code).copied(), expected);
                    }
                }
            }
        }
    }

    fn check_message(
        &mut self,
        h: &Header,
        call: Option<usize>,
        frame: &Bytes,
        got: &Result<Heard, Violation>,
    ) {
        let id = h.call_id;
        let stream = call.filter(|&i| matches!(self.calls[i], Call::Stream { .. }));
        let Some(i) = stream else {
            assert_eq!(*got, Ok(Heard::Frame), "a message for no stream");
            return;
        };
        if h.flags.contains(Flags::DISCARDED) {
            assert_eq!(*got, Ok(Heard::Frame));
            self.cancels.insert(id);
            assert!(self.table.lock().get(id).is_none(), "the stream ended");
            return;
        }
        if h.flags.contains(Flags::END_STREAM) {
            assert_eq!(*got, Err(Violation::MessageEndsStream { call_id: id }));
            return;
        }
        match got {
            Ok(_) => {
                self.accepted[i] += h.frame_len();
                if let Call::Stream { reader, .. } = &mut self.calls[i] {
                    reader.fed.push(payload(frame));
                }
            }
            Err(Violation::PastWindow { call_id }) if *call_id == id => assert!(
                self.accepted[i] >= self.window as usize,
                "past a window of {} after {} bytes",
                self.window,
                self.accepted[i]
            ),
            Err(other) => panic!("a message: {other:?}"),
        }
    }

    fn check_grant(&mut self, h: &Header, call: Option<usize>, got: &Result<Heard, Violation>) {
        let outbox = call.and_then(|i| match &self.calls[i] {
            Call::Once { outbox, .. } | Call::Stream { outbox, .. } => {
                outbox.clone().map(|o| (i, o))
            }
        });
        let Some((i, outbox)) = outbox else {
            assert_eq!(*got, Ok(Heard::Frame), "a grant for no request stream");
            return;
        };
        let window = self.granted[i] + i64::from(h.credits);
        if window > MAX_STREAM_WINDOW {
            assert_eq!(*got, Err(Violation::WindowOverflow { credits: h.credits }));
        } else {
            assert_eq!(*got, Ok(Heard::Frame));
            self.granted[i] = window;
            assert_eq!(outbox.window(), window);
        }
    }

    /// Checks that each control frame was asked for.
    fn check_control(&mut self, batch: &[Control]) {
        for &(kind, id, credits) in batch {
            match kind {
                FrameKind::Pong => assert_eq!(Some(id), self.last_ping, "a pong for no ping"),
                FrameKind::Cancel => assert!(self.cancels.remove(&id), "cancel of {id:#x}"),
                FrameKind::GoAway => {
                    self.goaways_acknowledged += 1;
                    assert_eq!(self.goaways_acknowledged, 1, "GOAWAY acknowledged twice");
                }
                FrameKind::WindowUpdate => {
                    let i = self.ids.iter().position(|&x| x == id).expect("a call's");
                    assert!(
                        matches!(self.calls[i], Call::Stream { .. }),
                        "a grant for {id:#x}"
                    );
                    assert!(credits > 0);
                }
                other => panic!("control frame {other:?}"),
            }
        }
    }

    /// Ends the connection as the shell does, and describes what each caller got.
    fn finish(mut self) -> Trace {
        self.table
            .lock()
            .close(Status::unavailable("the play ended"));
        self.read_all();
        let mut cx = Context::from_waker(Waker::noop());
        for call in &mut self.calls {
            let described = match call {
                Call::Once { outcome, .. } => {
                    let outcome = outcome.as_ref().expect("every call ends");
                    format!("{:?}", outcome.as_ref().map(Bytes::len))
                }
                Call::Stream { inbox, reader, .. } => {
                    let next = reader.reading.poll_next(inbox, &mut cx);
                    assert!(matches!(next, Poll::Ready(None)));
                    let end = reader.end.as_ref().expect("every stream ends");
                    format!("{:?} {:?}", reader.got, end.as_ref().map_err(Status::code))
                }
            };
            self.trace.calls.push(described);
        }
        self.trace
    }
}

/// Scripts that exercise each kind of call, as the corpus started.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    use script::{frame, step};
    let end = Flags::END_STREAM.0;
    // Calls: 0 unary, 1 client-streaming, 2 server-streaming, 3 bidirectional.
    let kinds = 0b11_10_01_00;
    let mut seeds = Vec::new();
    let unary = [
        step(0, frame(FrameKind::Response, 0, end, b"answer")),
        step(1, frame(FrameKind::WindowUpdate, 0, 0, b"")),
        step(1, frame(FrameKind::Response, 0, end, b"")),
    ]
    .concat();
    seeds.push(("seed-unary".into(), [vec![kinds, 2], unary].concat()));
    let stream = [
        step(2, frame(FrameKind::Response, 0, 0, b"")),
        step(0x42, frame(FrameKind::Message, 0, 0, b"one")),
        step(0x42, frame(FrameKind::Message, 0, 0, b"two")),
        step(0x80, frame(FrameKind::Ping, 7, 0, b"")),
        step(0xff, Vec::new()),
        step(3, frame(FrameKind::Message, 0, 0, &[1; 100])),
        step(2, frame(FrameKind::Response, 0, end, b"")),
        step(0x80, frame(FrameKind::GoAway, 0, 0, b"")),
    ]
    .concat();
    seeds.push(("seed-streams".into(), [vec![kinds, 1], stream].concat()));
    // Runs of two streams' messages, interleaved, small and large.
    let runs = [
        step(0x42, frame(FrameKind::Message, 0, 0, b"a")),
        step(0x43, frame(FrameKind::Message, 0, 0, &[7; 60])),
        step(0x43, frame(FrameKind::Message, 0, 0, &[8; 60])),
        step(0x42, frame(FrameKind::Message, 0, 0, &[9; 200])),
        step(0x43, frame(FrameKind::Message, 0, 0, b"b")),
        step(0x80, frame(FrameKind::Ping, 1, 0, b"")),
        step(0x42, frame(FrameKind::Message, 0, 0, b"c")),
        step(0xff, Vec::new()),
    ]
    .concat();
    seeds.push(("seed-runs".into(), [vec![kinds, 4], runs].concat()));
    let violations = [
        step(3, frame(FrameKind::Message, 0, Flags::DISCARDED.0, b"")),
        step(2, frame(FrameKind::Message, 0, end, b"x")),
    ]
    .concat();
    seeds.push((
        "seed-violation".into(),
        [vec![kinds, 0], violations].concat(),
    ));
    seeds
}
