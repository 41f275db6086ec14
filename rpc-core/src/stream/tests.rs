use super::*;
use std::sync::Arc;

use bytes::Bytes;

use super::budget::MIN_GRANT;
use crate::account::{Account, Resource};
use crate::account::{Limit, Limits, Scope};
use crate::control::ControlQueue;
use crate::violation::Violation;
use crate::wire::{FrameKind, MAX_STREAM_WINDOW};
use crate::{Code, Metadata, Status};
use futures_util::StreamExt;
use std::time::Duration;

/// An account of `bytes` held bytes for the connection and the peer (the server's
/// is twice that: its common half as large).
fn account(bytes: usize) -> Account {
    let limit = Limit {
        connection: bytes,
        peer: bytes,
        server: 2 * bytes,
    };
    Account::standalone(Limits {
        calls: limit,
        streams: limit,
        bytes: limit,
        sending: limit,
    })
}

fn unbounded() -> Account {
    account(1 << 30)
}

/// A server's request stream: an inbox of an 8,000-byte window from a 1 MiB budget,
/// charging `account`, granted its window, and the handler's view of it.
fn server_stream(account: Account) -> (Arc<Budget>, Account, Arc<Inbox>, Streaming<Bytes>) {
    let budget = Arc::new(Budget::new(1 << 20));
    let control = Arc::new(ControlQueue::default());
    let inbox = Inbox::with_budget(1, control, 8000, budget.clone(), account.clone());
    inbox.grant_rest();
    let stream = Streaming::raw(inbox.clone(), Code::InvalidArgument);
    (budget, account, inbox, stream)
}

#[tokio::test]
async fn queued_messages_are_held_bytes_of_the_account_until_read() {
    let (budget, account, inbox, mut stream) = server_stream(account(3000));
    inbox.push(1000, Bytes::from(vec![1; 960])).unwrap();
    inbox.push(1000, Bytes::from(vec![2; 960])).unwrap();
    assert_eq!(account.held(Resource::Bytes, Scope::Peer), 2000);
    // Read: given back.
    assert_eq!(stream.next().await.unwrap().unwrap()[0], 1);
    assert_eq!(account.held(Resource::Bytes, Scope::Server), 1000);
    // Another connection of the peer holds the rest: no room for the next message,
    // which fails the stream after the one queued (not the connection).
    let other = account.try_charge(Resource::Bytes, 1500).unwrap();
    inbox.push(1000, Bytes::from(vec![3; 960])).unwrap();
    inbox.push(1000, Bytes::from(vec![4; 960])).unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap()[0], 2);
    let status = stream.next().await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("1000 bytes"), "{status:?}");
    assert!(stream.next().await.is_none());
    drop(other);
    assert_eq!(account.held(Resource::Bytes, Scope::Connection), 0);
    assert_eq!(budget.committed(), 0, "the window went back too");
}

fn inbox(target: u32, granted: u32) -> (Arc<Inbox>, Arc<ControlQueue>) {
    let control = Arc::new(ControlQueue::default());
    (
        Arc::new(Inbox::new(7, control.clone(), target, granted)),
        control,
    )
}

#[tokio::test]
async fn a_sender_past_its_window_is_a_violation_and_reading_grants_it_back() {
    let (inbox, control) = inbox(1000, 1000);
    // Sends while the window is positive: 400 + 400 + 400 (the last one overdraws).
    for _ in 0..3 {
        inbox.push(400, Bytes::from_static(b"m")).unwrap();
    }
    assert_eq!(inbox.buffered(), 1200, "window plus one message at most");
    let err = inbox.push(400, Bytes::from_static(b"m")).unwrap_err();
    assert_eq!(err, Violation::PastWindow { call_id: 7 });
    let mut stream = Streaming::raw(inbox.clone(), Code::Internal);
    assert_eq!(stream.message().await.unwrap().unwrap(), "m");
    // 400 consumed: under half the window, nothing granted yet.
    let early = tokio::time::timeout(Duration::from_millis(10), control.next_batch()).await;
    assert!(early.is_err(), "nothing to send yet: {early:?}");
    stream.message().await.unwrap();
    let batch = control.next_batch().await.unwrap();
    assert_eq!(batch, [(FrameKind::WindowUpdate, 7, 800)]);
    // The window is back to 1000 - 1200 + 800 = 600 > 0: the peer may send again.
    inbox.push(400, Bytes::from_static(b"m")).unwrap();
}

#[tokio::test]
async fn a_server_grants_its_window_when_the_call_starts() {
    let (waiting, _control) = inbox(5000, 0);
    assert!(
        waiting.push(10, Bytes::new()).is_err(),
        "nothing granted yet"
    );
    let (started, control) = inbox(5000, 0);
    started.grant_rest();
    assert_eq!(
        control.next_batch().await.unwrap(),
        [(FrameKind::WindowUpdate, 7, 5000)]
    );
    started.push(10, Bytes::new()).unwrap();
}

#[tokio::test]
async fn the_end_comes_after_queued_messages_and_nothing_may_follow_it() {
    let (inbox, _control) = inbox(1000, 1000);
    inbox.push(50, Bytes::from_static(b"a")).unwrap();
    inbox.close(Some(Metadata::new())).unwrap();
    assert_eq!(
        inbox.push(50, Bytes::new()),
        Err(Violation::MessageAfterEnd { call_id: 7 })
    );
    assert_eq!(inbox.close(None), Err(Violation::EndedTwice { call_id: 7 }));
    let stream = Streaming::raw(inbox, Code::Internal);
    let all: Vec<_> = stream.collect().await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].as_ref().unwrap(), "a");
}

#[tokio::test]
async fn a_dropped_consumer_frees_its_queue_and_later_messages_are_discarded() {
    let (inbox, _control) = inbox(1000, 1000);
    inbox.push(500, Bytes::from(vec![0; 500])).unwrap();
    drop(Streaming::raw(inbox.clone(), Code::Internal));
    assert_eq!(inbox.buffered(), 0);
    inbox.push(5000, Bytes::from(vec![0; 5000])).unwrap();
    assert_eq!(inbox.buffered(), 0, "discarded, not an error");
}

/// The window updates queued for `call_id`, summed.
async fn granted(control: &ControlQueue, call_id: u64) -> u64 {
    let batch = tokio::time::timeout(Duration::from_millis(50), control.next_batch())
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    batch
        .iter()
        .filter(|(kind, id, _)| *kind == FrameKind::WindowUpdate && *id == call_id)
        .map(|(_, _, credits)| u64::from(*credits))
        .sum()
}

#[tokio::test]
async fn windows_come_from_the_connections_budget_and_go_back_as_messages_are_read() {
    let budget = Arc::new(Budget::new(10_000));
    let control = Arc::new(ControlQueue::default());
    let a = Inbox::with_budget(1, control.clone(), 8000, budget.clone(), unbounded());
    let b = Inbox::with_budget(2, control.clone(), 8000, budget.clone(), unbounded());
    a.grant_rest();
    assert_eq!(granted(&control, 1).await, 8000);
    // 2,000 left: less than b's window and than the smallest grant; b waits.
    b.grant_rest();
    assert_eq!(granted(&control, 2).await, 0);
    assert_eq!(budget.committed(), 8000);
    // a's peer sends 6,000; reading 4,000 of it gives 4,000 back: b, waiting, takes
    // room as soon as there is a grant's worth, never past the budget.
    for _ in 0..6 {
        a.push(1000, Bytes::from(vec![1; 960])).unwrap();
    }
    let mut reader = Streaming::raw(a.clone(), Code::Internal);
    for _ in 0..4 {
        reader.message().await.unwrap().unwrap();
        assert!(budget.committed() <= 10_000);
    }
    let to_b = granted(&control, 2).await;
    assert!(to_b >= MIN_GRANT as u64, "b got room: {to_b}");
    assert!(budget.committed() <= 10_000);
    // a's stream ends: all it held goes back, and b gets the rest of its window.
    drop(reader);
    assert_eq!(to_b + granted(&control, 2).await, 8000);
    assert_eq!(budget.committed(), 8000);
    // b fails (discarding its queue) or is dropped: everything goes back.
    b.push(500, Bytes::from(vec![2; 460])).unwrap();
    b.fail(Status::cancelled("gone"), true);
    assert_eq!(budget.committed(), 0);
    let c = Inbox::with_budget(3, control.clone(), 3000, budget.clone(), unbounded());
    c.grant_rest();
    assert_eq!(budget.committed(), 3000);
    c.close(None).unwrap();
    assert_eq!(
        budget.committed(),
        0,
        "a half-closed stream's unused window goes back"
    );
    let d = Inbox::with_budget(4, control, 3000, budget.clone(), unbounded());
    d.grant_rest();
    d.push(1000, Bytes::from(vec![4; 960])).unwrap();
    drop(d);
    assert_eq!(budget.committed(), 0, "dropped with a message queued");
}

#[tokio::test]
async fn a_run_is_queued_in_order_up_to_the_message_that_breaks_the_window() {
    let (inbox, _control) = inbox(1000, 1000);
    let run = [400, 400, 400, 50].map(|n| (n, Bytes::from(vec![n as u8; 8])));
    let err = inbox.push_run(run).unwrap_err();
    assert_eq!(err, Violation::PastWindow { call_id: 7 });
    assert_eq!(
        inbox.buffered(),
        1200,
        "the three within the window are queued"
    );
}

#[tokio::test]
async fn a_runs_small_payloads_share_one_copy_and_large_ones_are_kept_in_place() {
    use crate::wire::{Header, HEADER_LEN};
    use crate::Connection;
    let (a, b) = crate::memory::pair(1 << 20);
    let sizes = [10usize, 40 * 1024, 20, 0, 30];
    for (i, &n) in sizes.iter().enumerate() {
        let mut header = Header::new(FrameKind::Message, 9);
        header.payload_len = n as u32;
        crate::outbound::send_frame(&a, header, &crate::Metadata::new(), |buf| {
            bytes::BufMut::put_slice(buf, &vec![i as u8 + 1; n])
        })
        .await
        .unwrap();
    }
    let mut frames = vec![b.recv().await.unwrap().unwrap()];
    b.recv_ready(&mut frames, 16);
    assert_eq!(frames.len(), sizes.len());
    let large_frame = frames[1].as_ptr() as usize;
    let with_headers = frames
        .into_iter()
        .map(|f| (f.clone(), Header::decode(&f).unwrap().unwrap()));
    let payloads = take_payloads(&b, with_headers.collect::<Vec<_>>().into_iter());
    for (i, ((charged, payload), &n)) in payloads.iter().zip(&sizes).enumerate() {
        assert_eq!(*charged, HEADER_LEN + n);
        assert_eq!(payload.len(), n);
        assert!(payload.iter().all(|&x| x == i as u8 + 1));
    }
    assert_eq!(
        payloads[1].1.as_ptr() as usize,
        large_frame + HEADER_LEN,
        "kept in place"
    );
    let (first, third) = (
        payloads[0].1.as_ptr() as usize,
        payloads[2].1.as_ptr() as usize,
    );
    assert_eq!(third, first + 10, "one allocation for the small ones");
}

#[tokio::test]
async fn a_failure_is_delivered_after_queued_messages_unless_discarded() {
    let (inbox, _control) = inbox(1000, 1000);
    inbox.push(50, Bytes::from_static(b"a")).unwrap();
    inbox.fail(Status::internal("boom"), false);
    let mut stream = Streaming::raw(inbox.clone(), Code::Internal);
    assert_eq!(stream.message().await.unwrap().unwrap(), "a");
    assert_eq!(stream.message().await.unwrap_err().code(), Code::Internal);
    assert!(stream.message().await.unwrap().is_none(), "then the end");

    let (inbox, _control) = self::inbox(1000, 1000);
    inbox.push(50, Bytes::from_static(b"a")).unwrap();
    inbox.fail(Status::cancelled("gone"), true);
    let mut stream = Streaming::raw(inbox, Code::Internal);
    assert_eq!(stream.message().await.unwrap_err().code(), Code::Cancelled);
}

#[tokio::test]
async fn a_sender_waits_for_its_window_and_stops_when_the_call_ends() {
    let outbox = Arc::new(Outbox::closed_window());
    let waiting = tokio::spawn({
        let outbox = outbox.clone();
        async move { outbox.reserve(100).await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "no window yet");
    outbox.grant(1).unwrap();
    waiting.await.unwrap().unwrap();
    // 1 - 100 < 0: the next one waits, until the call ends.
    let waiting = tokio::spawn({
        let outbox = outbox.clone();
        async move { outbox.reserve(100).await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    outbox.close(Status::cancelled("over"));
    assert_eq!(waiting.await.unwrap().unwrap_err().code(), Code::Cancelled);
    let overflow = Outbox::new(MAX_STREAM_WINDOW as u32);
    assert_eq!(
        overflow.grant(1),
        Err(Violation::WindowOverflow { credits: 1 }),
        "past 2^31 - 1"
    );
}

/// Stream message frames back to back, as a run (the payloads `0..count` repeated).
fn frames(call_id: u64, payloads: &[&[u8]]) -> (Bytes, usize) {
    let mut out = Vec::new();
    let mut last = 0;
    for payload in payloads {
        let mut header = crate::wire::Header::new(FrameKind::Message, call_id);
        header.payload_len = payload.len() as u32;
        let before = out.len();
        crate::wire::encode_head(&mut header, &Metadata::new(), &mut out);
        out.extend_from_slice(payload);
        last = out.len() - before;
    }
    (Bytes::from(out), last)
}

#[tokio::test]
async fn a_run_of_frames_is_read_message_by_message_and_charged_as_its_messages() {
    let (budget, account, inbox, mut stream) = server_stream(account(3000));
    let (run, last) = frames(1, &[&[1; 960], &[2; 960]]);
    inbox.push_frames(run, last).unwrap();
    assert_eq!(account.held(Resource::Bytes, Scope::Peer), 2000);
    assert_eq!(inbox.buffered(), 2000);
    assert_eq!(stream.next().await.unwrap().unwrap(), vec![1; 960]);
    assert_eq!(stream.next().await.unwrap().unwrap(), vec![2; 960]);
    assert_eq!(account.held(Resource::Bytes, Scope::Peer), 0, "all read");
    // The account has room for one of the next two: the run goes message by message,
    // and the stream fails after the one that fit.
    let other = account.try_charge(Resource::Bytes, 1500).unwrap();
    let (run, last) = frames(1, &[&[3; 960], &[4; 960]]);
    inbox.push_frames(run, last).unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap()[0], 3);
    let status = stream.next().await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    drop(other);
    drop(stream);
    assert_eq!(account.held(Resource::Bytes, Scope::Connection), 0);
    assert_eq!(budget.committed(), 0);
}

#[tokio::test]
async fn a_failed_stream_drops_the_run_its_reader_took() {
    let (inbox, _control) = inbox(1 << 20, 1 << 20);
    let (run, last) = frames(7, &[b"a", b"b", b"c"]);
    inbox.push_frames(run, last).unwrap();
    let mut stream = Streaming::raw(inbox.clone(), Code::Internal);
    assert_eq!(stream.message().await.unwrap().unwrap(), "a");
    // The reader holds the rest of the run; a failure that discards ends it now.
    inbox.fail(Status::resource_exhausted("too large"), true);
    let status = stream.message().await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
}

#[tokio::test]
async fn a_discarded_stream_gives_back_what_its_reader_took_at_once() {
    let (budget, account, inbox, mut stream) = server_stream(account(1 << 20));
    for i in 0..3u8 {
        inbox.push(100, Bytes::from(vec![i; 60])).unwrap();
    }
    // The reader takes all three, reads one, and the call ends (the handler keeps its
    // stream): the two it took and did not read are no longer held.
    assert_eq!(stream.next().await.unwrap().unwrap()[0], 0);
    assert_eq!(account.held(Resource::Bytes, Scope::Connection), 200);
    inbox.fail(Status::cancelled("the call ended"), true);
    assert_eq!(account.held(Resource::Bytes, Scope::Connection), 0);
    assert_eq!(budget.committed(), 0);
    assert_eq!(
        stream.next().await.unwrap().unwrap_err().code(),
        Code::Cancelled
    );
}

/// A reader that always finds a message ready yields to the runtime once it granted
/// window back (the update must go out while it reads on) and every 1,024 messages,
/// not every 128 (tokio's budget; each yield woke a parked worker on a multi-thread
/// runtime). Every message is read, in order, across the yields.
#[test]
fn a_reader_yields_after_a_grant_and_every_1024_messages() {
    use std::task::{Context, Poll};
    // A window of 100,000 bytes: 3,000 messages of 10 bytes are 30,000 (no grant).
    let (inbox, control) = inbox(100_000, 100_000);
    for i in 0..3000u32 {
        inbox
            .push(10, Bytes::from(i.to_le_bytes().to_vec()))
            .unwrap();
    }
    let (wakes, waker) = inbox::Wakes::waker();
    let mut cx = Context::from_waker(&waker);
    let mut reading = reading::Reading::default();
    let (mut read, mut yields) = (0u32, Vec::new());
    loop {
        match reading.poll_next(&inbox, &mut cx) {
            Poll::Ready(Some(Ok(m))) => {
                assert_eq!(&m[..], &read.to_le_bytes());
                read += 1;
            }
            Poll::Pending if wakes.take() == 1 => yields.push(read),
            other => panic!("{other:?} after {read}"),
        }
        if read == 3000 {
            break;
        }
    }
    assert_eq!(
        yields,
        [1024, 2048],
        "no grant: one yield per 1,024 messages"
    );
    // 50,000 more bytes: the grant at half the window (50,000 read) is followed by a
    // yield before the next message.
    for i in 0..5000u32 {
        inbox
            .push(10, Bytes::from(i.to_le_bytes().to_vec()))
            .unwrap();
    }
    let (mut grants, mut yields) = (Vec::new(), Vec::new());
    for n in 0..5000u32 {
        let message = loop {
            match reading.poll_next(&inbox, &mut cx) {
                Poll::Ready(Some(Ok(m))) => break m,
                Poll::Pending if wakes.take() == 1 => yields.push(n),
                other => panic!("{other:?} at {n}"),
            }
        };
        assert_eq!(&message[..], &n.to_le_bytes());
        let batch = control.take_batch().unwrap_or_default();
        if batch
            .iter()
            .any(|c| c.0 == FrameKind::WindowUpdate && c.1 == 7)
        {
            grants.push(n + 1);
        }
    }
    assert_eq!(grants.len(), 1, "half the window read: one grant");
    assert!(
        yields.contains(&grants[0]),
        "no yield after the grant: {yields:?}"
    );
}
