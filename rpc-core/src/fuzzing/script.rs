//! The script format shared by the demultiplexer targets, and what both check of a
//! stream's inbox.

use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::stream::{Inbox, Keep, Reading};
use crate::wire::{Frame, FrameKind, Header, HEADER_LEN};
use crate::Status;

/// Calls a script sets up.
pub const CALLS: usize = 4;
/// Where the steps start.
pub const HEADER_AT: usize = 2;
/// Offset of the call id in a frame header.
const CALL_ID_AT: usize = 8;

/// One step of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Offset of the step's bytes in the script.
    pub at: usize,
    /// The selector byte.
    pub selector: u8,
    /// The step's bytes (the call id written in, unless the selector says not to).
    pub bytes: Vec<u8>,
}

impl Step {
    /// Whether the step reads every stream.
    pub fn is_read(&self) -> bool {
        self.selector == 0xff && self.bytes.is_empty()
    }

    /// Whether the frame joins a run (client only).
    pub fn in_run(&self) -> bool {
        self.selector & 0xc0 == 0x40
    }
}

/// The steps of `script` (after its two setting bytes), with the call ids of `ids`
/// written in.
pub fn steps(script: &[u8], ids: &[u64; CALLS]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut at = HEADER_AT;
    while let Some(&[selector, lo, hi]) = script.get(at..at + 3) {
        let len = usize::from(u16::from_le_bytes([lo, hi]));
        let start = at + 3;
        let end = (start + len).min(script.len());
        let mut bytes = script[start..end].to_vec();
        if selector & 0x80 == 0 && bytes.len() >= CALL_ID_AT + 8 {
            let id = ids[usize::from(selector & 3)];
            bytes[CALL_ID_AT..CALL_ID_AT + 8].copy_from_slice(&id.to_le_bytes());
        }
        steps.push(Step {
            at: start,
            selector,
            bytes,
        });
        at = end;
    }
    steps
}

/// The steps of a script of `[op u8][n u16 LE]` steps from `at` on, each followed by `n`
/// bytes when its op is 0 (the gRPC and RDMA targets' scripts): where each step's bytes
/// start, its op, and `n`.
pub fn op_steps(script: &[u8], at: usize) -> Vec<(usize, u8, usize)> {
    op_steps_with(script, at, |op| op == 0)
}

/// [`op_steps`], with the ops whose steps carry `n` bytes told by `carries`.
pub fn op_steps_with(
    script: &[u8],
    mut at: usize,
    carries: fn(u8) -> bool,
) -> Vec<(usize, u8, usize)> {
    let mut steps = Vec::new();
    while let Some(&[op, lo, hi]) = script.get(at..at + 3) {
        let n = usize::from(u16::from_le_bytes([lo, hi]));
        let start = at + 3;
        steps.push((start, op, n));
        at = if carries(op) {
            (start + n).min(script.len())
        } else {
            start
        };
    }
    steps
}

/// A step of a demultiplexer script: `selector`, then `bytes` with their length.
pub(super) fn step(selector: u8, bytes: Vec<u8>) -> Vec<u8> {
    let mut s = vec![selector];
    s.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    s.extend(bytes);
    s
}

/// The receive window of a script's streams: 64 bytes to 8 KiB.
pub(super) fn window(script: &[u8]) -> u32 {
    64 << (script.get(1).copied().unwrap_or(0) & 7)
}

/// The kind (0 to 3) of call `i`.
pub(super) fn kind(script: &[u8], i: usize) -> u8 {
    (script.first().copied().unwrap_or(0) >> (2 * i)) & 3
}

/// Copies every payload out (as a transport that keeps nothing).
pub(super) struct Copies;

impl Keep<Bytes> for Copies {
    fn keep(&self, frame: Bytes) -> Result<Bytes, Bytes> {
        Err(frame)
    }
}

/// The header of a well-formed frame.
pub(super) fn header(bytes: &[u8]) -> Option<Header> {
    Frame::parse(bytes).ok().map(|f| f.header)
}

/// The payload of a well-formed frame.
pub(super) fn payload(bytes: &[u8]) -> Bytes {
    Bytes::copy_from_slice(Frame::parse(bytes).map_or(&[][..], |f| f.payload))
}

/// What a stream's reader saw, checked against what was fed to it.
#[derive(Debug, Default)]
pub(super) struct Reader {
    /// Whether to check what it reads against `fed`.
    pub(super) checks: bool,
    /// Payloads of the messages fed that the stream may deliver, in order.
    pub(super) fed: Vec<Bytes>,
    /// The messages the reader got.
    pub(super) got: Vec<Bytes>,
    /// The end the reader got.
    pub(super) end: Option<Result<(), Status>>,
    /// The messages it took from the inbox and has not read.
    pub(super) reading: Reading,
}

impl Reader {
    /// Reads what `inbox` has now.
    ///
    /// # Panics
    /// A message that was not fed, or not in its order; anything after the end.
    pub(super) fn read(&mut self, inbox: &Inbox) {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            let next = self.reading.poll_next(inbox, &mut cx);
            if self.end.is_some() {
                assert!(
                    matches!(next, Poll::Ready(None) | Poll::Pending),
                    "read after the end: {next:?}"
                );
                return;
            }
            match next {
                Poll::Ready(Some(Ok(m))) => {
                    if self.checks {
                        assert_eq!(
                            self.fed.get(self.got.len()),
                            Some(&m),
                            "message {} is not the one fed",
                            self.got.len()
                        );
                    }
                    self.got.push(m);
                }
                Poll::Ready(Some(Err(status))) => self.end = Some(Err(status)),
                Poll::Ready(None) => self.end = Some(Ok(())),
                Poll::Pending => return,
            }
        }
    }
}

/// A frame of `kind` for call `id` with `payload`, as seeds use.
pub(super) fn frame(kind: FrameKind, id: u64, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut header = Header::new(kind, id);
    header.flags = crate::wire::Flags(flags);
    header.payload_len = payload.len() as u32;
    let mut out = header.encode().to_vec();
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(payload);
    out
}
