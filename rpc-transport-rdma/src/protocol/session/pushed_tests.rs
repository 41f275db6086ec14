//! Pushed frames (`pushed.rs`): in order, whole, within the loan limits, and the lies a
//! pusher can tell.

use std::time::Instant;

use rdmarpc_core::wire::HEADER_LEN;

use super::tests::{fixed, header_bytes, AppFrame, Up};
use super::{Close, Session};
use crate::protocol::{Lie, LoanLimit, Rendezvous};

fn session(max_message_size: usize) -> Session<Up> {
    let borrow = LoanLimit {
        bytes: 10_000,
        loans: 2,
    };
    Session::new(fixed(23, borrow, max_message_size), Instant::now())
}

/// A pushed descriptor of frame `id`, `len` bytes in all, with `head` of them inline.
fn pushed(id: u64, len: usize, token: u64, head: usize) -> Rendezvous {
    let header = header_bytes(AppFrame { id, len });
    let mut inline = Vec::new();
    if head > 0 {
        inline = header.to_vec();
        inline.resize(head, 7);
    }
    Rendezvous {
        offset: 0,
        len: (len - head) as u64,
        rkey: 0,
        token,
        header,
        head: inline,
    }
}

fn violation(result: Result<impl std::fmt::Debug, Close>) -> Lie {
    match result {
        Err(Close::Violation(lie)) => lie,
        other => panic!("not a violation: {other:?}"),
    }
}

#[test]
fn a_pushed_frame_goes_up_whole_in_its_place_and_its_loan_ends_when_consumed() {
    let mut s = session(4_000);
    assert!(s
        .handle_pushed_descriptor(pushed(1, 3_000, 11, 0))
        .unwrap()
        .is_none());
    assert!(s.behind_push(), "frames now wait behind it");
    // A frame that arrives meanwhile waits behind it.
    s.deliver(Up::Eager(2)).unwrap();
    assert!(s.poll_deliver().is_none(), "in the order sent");
    let mut body = header_bytes(AppFrame { id: 1, len: 3_000 }).to_vec();
    body.extend((0..3_000 - HEADER_LEN).map(|i| i as u8));
    let mut whole = None;
    for (i, piece) in body.chunks(1_000).enumerate() {
        let got = s.handle_piece(11, piece).unwrap();
        assert_eq!(got.is_some(), i == 2, "whole after its last piece only");
        whole = whole.or(got);
    }
    // No inline head: the pushed bytes are the whole frame.
    let (tag, frame) = whole.expect("whole");
    assert_eq!(frame, body);
    assert!(!s.behind_push());
    s.handle_read_complete(tag, |token, len, lent| {
        assert_eq!((token, lent), (11, 3_000));
        Up::Large { id: 1, token, len }
    })
    .unwrap();
    assert!(matches!(s.poll_deliver(), Some(Up::Large { id: 1, .. })));
    assert!(matches!(s.poll_deliver(), Some(Up::Eager(2))));
    assert!(
        s.poll_control().is_none_or(|c| c.tokens.is_empty()),
        "nothing done before it is consumed"
    );
    s.frame_consumed(11, 3_000);
    assert_eq!(s.poll_control().expect("a read-done").tokens, [11]);
}

#[test]
fn an_inline_head_comes_first_in_the_pushed_frame() {
    let mut s = session(4_000);
    assert!(s
        .handle_pushed_descriptor(pushed(1, 1_000, 5, HEADER_LEN + 10))
        .unwrap()
        .is_none());
    let rest = vec![9u8; 1_000 - HEADER_LEN - 10];
    let (_, frame) = s.handle_piece(5, &rest).unwrap().expect("whole");
    assert_eq!(frame.len(), 1_000);
    assert_eq!(
        frame[..HEADER_LEN],
        header_bytes(AppFrame { id: 1, len: 1_000 })
    );
    assert_eq!(frame[HEADER_LEN..HEADER_LEN + 10], [7; 10]);
    assert_eq!(frame[HEADER_LEN + 10..], rest[..]);
}

#[test]
fn a_pushed_frame_over_the_maximum_goes_up_as_its_header_and_its_pieces_are_dropped() {
    let mut s = session(1_000);
    let refused = s
        .handle_pushed_descriptor(pushed(1, 3_000, 11, 0))
        .unwrap()
        .expect("refused for its size");
    assert_eq!(refused.payload_len as usize, 3_000 - HEADER_LEN);
    assert!(!s.behind_push(), "nothing waits behind a refused frame");
    assert!(s.handle_piece(11, &[0; 2_000]).unwrap().is_none());
    assert!(
        s.poll_control().is_none_or(|c| c.tokens.is_empty()),
        "its pieces are still coming"
    );
    assert!(s.handle_piece(11, &[0; 1_000]).unwrap().is_none());
    // The pusher sent every piece: the loan ends.
    assert_eq!(s.poll_control().expect("a read-done").tokens, [11]);
}

#[test]
fn pushers_that_lie_are_caught() {
    // A piece for no pushed frame.
    let mut s = session(4_000);
    assert!(matches!(
        violation(s.handle_piece(3, &[1])),
        Lie::PieceOverrun { left: 0, .. }
    ));
    // More bytes than announced.
    let mut s = session(4_000);
    s.handle_pushed_descriptor(pushed(1, 1_000, 3, 0)).unwrap();
    s.handle_piece(3, &[0; 900]).unwrap();
    assert!(matches!(
        violation(s.handle_piece(3, &[0; 200])),
        Lie::PieceOverrun { left: 100, .. }
    ));
    // A token pushed twice at once.
    let mut s = session(4_000);
    s.handle_pushed_descriptor(pushed(1, 1_000, 3, 0)).unwrap();
    assert!(matches!(
        violation(s.handle_pushed_descriptor(pushed(2, 1_000, 3, 0))),
        Lie::TokenInUse { token: 3 }
    ));
    // Nothing to push: a whole frame inline is no descriptor (frames are never empty).
    let mut s = session(4_000);
    let mut empty = pushed(1, HEADER_LEN, 3, HEADER_LEN);
    empty.len = 0;
    assert!(matches!(
        violation(s.handle_pushed_descriptor(empty)),
        Lie::DescriptorHead
    ));
    // Beyond the loans agreed: as for lent frames.
    let mut s = session(4_000);
    s.handle_pushed_descriptor(pushed(1, 1_000, 1, 0)).unwrap();
    s.handle_pushed_descriptor(pushed(2, 1_000, 2, 0)).unwrap();
    assert!(matches!(
        violation(s.handle_pushed_descriptor(pushed(3, 1_000, 3, 0))),
        Lie::OverLent { .. }
    ));
}

#[test]
fn messages_behind_an_unfinished_push_are_bounded() {
    let mut s = session(4_000);
    assert!(
        !s.copy_behind_push().unwrap(),
        "no push: frames stay in their slots"
    );
    s.handle_pushed_descriptor(pushed(1, 3_000, 11, 0)).unwrap();
    let max = 2 * s.cfg.max_slots as usize;
    for _ in 0..max {
        assert!(s.copy_behind_push().unwrap(), "copied out behind the push");
    }
    assert!(matches!(
        violation(s.copy_behind_push()),
        Lie::TooManyBehindPush { .. }
    ));
    // Once the push is whole the count starts again.
    let mut s = session(4_000);
    s.handle_pushed_descriptor(pushed(1, 3_000, 11, 0)).unwrap();
    for _ in 0..max {
        s.copy_behind_push().unwrap();
    }
    s.handle_piece(11, &[0; 3_000]).unwrap().expect("whole");
    assert!(!s.copy_behind_push().unwrap());
    s.handle_pushed_descriptor(pushed(2, 3_000, 12, 0)).unwrap();
    assert!(s.copy_behind_push().unwrap(), "a new push, a new count");
}

#[test]
fn a_push_whose_pieces_stop_coming_ends_the_connection_after_the_loan_timeout() {
    let mut s = session(4_000);
    let timeout = std::time::Duration::from_secs(60);
    let now = Instant::now();
    s.handle_pushed_descriptor(pushed(1, 3_000, 11, 0)).unwrap();
    s.check_pushes(now, timeout).unwrap();
    s.handle_piece(11, &[0; 1_000]).unwrap();
    s.check_pushes(now + timeout, timeout).unwrap();
    assert!(matches!(
        violation(s.check_pushes(now + timeout * 2, timeout)),
        Lie::PushStalled { .. }
    ));
    // One that finishes in time is gone from the timer.
    let mut s = session(4_000);
    s.handle_pushed_descriptor(pushed(1, 3_000, 11, 0)).unwrap();
    s.check_pushes(now, timeout).unwrap();
    s.handle_piece(11, &[0; 3_000]).unwrap();
    s.check_pushes(now + timeout * 2, timeout).unwrap();
}
