//! The request-stream translator with no HTTP/2 connection: body chunks in, messages
//! out within the server's window, each charged to a real account.

use bytes::Bytes;
use rdmarpc_core::account::{Account, Resource, Scope};
use rdmarpc_core::wire::HEADER_LEN;
use rdmarpc_core::Code;

use super::Upload;
use crate::compress::Encoding;
use crate::deframe::{frame, frame_with};
use crate::fuzzing::request::account;

const MAX: usize = 1 << 20;

fn held(account: &Account) -> usize {
    account.held(Resource::Bytes, Scope::Connection)
}

/// Pushes `body` in chunks of `chunk` bytes, each after room was taken for it.
fn push(up: &mut Upload, body: &[u8], chunk: usize) -> Result<(), rdmarpc_core::Status> {
    for piece in body.chunks(chunk) {
        assert!(up.wants_body(usize::MAX), "room for a chunk");
        up.push_chunk(Bytes::copy_from_slice(piece), MAX)?;
    }
    Ok(())
}

#[test]
fn messages_cut_across_chunks_go_whole_and_in_order_within_the_window() {
    let account = account(1 << 20);
    let mut up = Upload::new(None, account.clone());
    let messages: Vec<Bytes> = (0..5u8)
        .map(|i| Bytes::from(vec![i; 10 + i as usize * 30]))
        .collect();
    let body: Vec<u8> = messages.iter().flat_map(|m| frame(m).to_vec()).collect();
    push(&mut up, &body, 7).unwrap();
    assert_eq!(
        up.queued_bytes(),
        messages.iter().map(|m| HEADER_LEN + m.len()).sum::<usize>()
    );
    assert!(up.next_message().is_none(), "no window yet");
    // A window of one byte lets one message go (a sender may overdraw by one).
    up.grant(1);
    let (first, _) = up.next_message().expect("one message");
    assert_eq!(first, messages[0]);
    assert!(up.next_message().is_none(), "the window is spent");
    up.grant(1 << 20);
    let rest: Vec<Bytes> = std::iter::from_fn(|| {
        up.next_message()
            .map(|(m, _)| Bytes::copy_from_slice(m.bytes()))
    })
    .collect();
    assert_eq!(rest, messages[1..]);
    assert!(!up.finished(), "the body goes on");
    up.body_ended();
    assert!(up.finished());
    // What is left is the room taken for a next chunk, given back with the stream.
    assert!(held(&account) <= 16 * 1024, "held {}", held(&account));
    drop(up);
    assert_eq!(held(&account), 0, "every charge went with its message");
}

#[test]
fn a_queued_message_holds_its_bytes_until_the_server_takes_it() {
    let account = account(1 << 20);
    let mut up = Upload::new(None, account.clone());
    push(&mut up, &frame(&[7; 1000]), 16 * 1024).unwrap();
    assert!(held(&account) >= 1000, "held {}", held(&account));
    up.grant(1 << 20);
    let (message, charge) = up.next_message().unwrap();
    assert_eq!(message.bytes().len(), 1000);
    assert!(charge.amount() >= 1000);
    drop(charge);
    drop(up);
    assert_eq!(held(&account), 0);
}

#[test]
fn a_compressed_message_is_charged_at_its_inflated_size() {
    for encoding in [Encoding::Gzip, Encoding::Zstd] {
        let account = account(1 << 20);
        let mut up = Upload::new(Some(encoding), account.clone());
        let message = vec![b'a'; 200_000];
        let body = frame_with(&message, Some(encoding));
        assert!(body.len() < 10_000, "compressed to {} bytes", body.len());
        push(&mut up, &body, 16 * 1024).unwrap();
        up.grant(1);
        let (got, charge) = up.next_message().unwrap();
        assert_eq!(got.bytes(), &message[..]);
        assert!(
            charge.amount() >= 200_000,
            "{encoding:?}: {}",
            charge.amount()
        );
    }
}

#[test]
fn a_message_that_inflates_past_the_account_fails_the_call() {
    let account = account(64 * 1024);
    let mut up = Upload::new(Some(Encoding::Gzip), account.clone());
    // Held by something else: the account has 64 KiB, 60 of them taken.
    let other = account.try_charge(Resource::Bytes, 60 * 1024).unwrap();
    let body = frame_with(&vec![0u8; 500_000], Some(Encoding::Gzip));
    let status = push(&mut up, &body, 16 * 1024).expect_err("no room to inflate");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    drop((up, other));
    assert_eq!(held(&account), 0);
}

#[test]
fn oversized_and_malformed_messages_end_the_call() {
    let mut up = Upload::new(None, account(1 << 20));
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&((MAX + 1) as u32).to_be_bytes());
    assert_eq!(
        up.push_chunk(Bytes::copy_from_slice(&prefix), MAX)
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    // A compressed message where no encoding was negotiated.
    let mut up = Upload::new(None, account(1 << 20));
    let compressed = frame_with(&vec![1u8; 4096], Some(Encoding::Gzip));
    assert_eq!(
        up.push_chunk(Bytes::copy_from_slice(&compressed), MAX)
            .unwrap_err()
            .code(),
        Code::Internal
    );
}

#[test]
fn the_body_waits_while_messages_wait_for_the_server() {
    let mut up = Upload::new(None, account(1 << 20));
    push(&mut up, &frame(&[0; 3000]), 16 * 1024).unwrap();
    assert!(
        !up.wants_body(3000),
        "3040 frame bytes wait, over a limit of 3000"
    );
    assert!(up.wants_body(4000));
    up.grant(1);
    let _ = up.next_message();
    assert!(up.wants_body(3000));
    assert!(!up.in_message());
    up.push_chunk(frame(&[0; 100]).slice(..50), MAX).unwrap();
    assert!(up.in_message(), "half a message arrived");
}

#[test]
fn a_unary_request_is_its_one_message_with_its_charge() {
    let account = account(1 << 20);
    let mut up = Upload::single(Some(Encoding::Zstd), account.clone());
    let message = vec![b'z'; 100_000];
    push(&mut up, &frame_with(&message, Some(Encoding::Zstd)), 100).unwrap();
    up.body_ended();
    let (got, charge) = up.the_one().unwrap();
    assert_eq!(got.bytes(), &message[..]);
    assert!(charge.amount() >= 100_000, "charged {}", charge.amount());
    drop(up);
    assert!(held(&account) >= 100_000, "the message holds its charge");
    drop(charge);
    assert_eq!(held(&account), 0);
}

#[test]
fn a_unary_request_with_none_two_or_half_a_message_fails() {
    let mut up = Upload::single(None, account(1 << 20));
    up.body_ended();
    assert_eq!(up.the_one().unwrap_err().code(), Code::Unimplemented);

    // A second message fails as soon as its first byte arrives: nothing of it is
    // deframed or inflated (here, 1 MiB of zeros compressed to a few hundred bytes).
    let shared = account(1 << 20);
    let mut up = Upload::single(Some(Encoding::Gzip), shared.clone());
    let second = frame_with(&vec![0u8; 1 << 20], Some(Encoding::Gzip));
    let two = [frame(b"one").to_vec(), second.to_vec()].concat();
    let status = push(&mut up, &two, 16 * 1024).unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(held(&shared) < 64 * 1024, "held {}", held(&shared));

    let mut up = Upload::single(None, account(1 << 20));
    push(&mut up, &frame(&[5; 100])[..60], 16 * 1024).unwrap();
    up.body_ended();
    assert_eq!(up.the_one().unwrap_err().code(), Code::Internal);
}

#[test]
fn a_unary_request_larger_than_the_account_reads_to_its_end() {
    let account = account(1 << 20);
    let limit = account.limit(Resource::Bytes);
    let mut up = Upload::single(None, account.clone());
    push(&mut up, &frame(&vec![1u8; limit + 100]), 16 * 1024).unwrap();
    assert_eq!(held(&account), limit, "charged as the whole of the limit");
    // The account is full, held by the message itself: the body's end is read anyway.
    assert!(up.wants_body(usize::MAX), "waits for room only it holds");
    up.body_ended();
    let (message, charge) = up.the_one().unwrap();
    assert_eq!(message.bytes().len(), limit + 100);
    assert_eq!(charge.amount(), limit);
}

/// With 64 KiB frames advertised, a stream holds a default chunk's room (16 KiB) until
/// a long chunk comes; that one is charged whole, and the room taken before each read
/// covers a 64 KiB chunk from then on: the account holds every byte that arrived while
/// the message is in progress.
#[test]
fn room_taken_before_a_read_covers_the_largest_frame_advertised() {
    let account = account(1 << 20);
    let mut up = Upload::new(None, account.clone());
    up.frames_up_to(64 * 1024);
    // Before a long chunk came, the room is a default chunk's (16 KiB).
    assert!(up.wants_body(usize::MAX));
    assert_eq!(
        held(&account),
        16 * 1024,
        "16 KiB held by a stream yet to send"
    );
    let body = frame(&[3; 300 * 1024]);
    let mut read = 0;
    for piece in body.chunks(64 * 1024).take(3) {
        assert!(up.wants_body(usize::MAX), "room for a chunk");
        up.push_chunk(Bytes::copy_from_slice(piece), MAX).unwrap();
        read += piece.len();
        assert!(held(&account) >= read, "held {} of {read}", held(&account));
    }
}

/// A unary message is cut with room for its frame's head (header and the call's
/// metadata) in front: the frame is that buffer, written in place, not a copy; metadata
/// of another length than announced still makes a right frame (a copy).
#[test]
fn a_message_becomes_its_frame_in_place() {
    use rdmarpc_core::wire::{Frame, FrameKind, Header};
    use rdmarpc_core::Metadata;
    let mut md = Metadata::new();
    md.append("x-trace", "abc");
    for announced in [md.encoded_len(), 0] {
        let mut up = Upload::single(None, account(1 << 20));
        up.metadata_len(announced);
        push(&mut up, &frame(&[4; 3000]), 1000).unwrap();
        up.body_ended();
        let (message, _) = up.the_one().unwrap();
        let at = message.bytes().as_ptr();
        let buf = message.into_frame(Header::new(FrameKind::Request, 9), &md);
        let parsed = Frame::parse(&buf).unwrap();
        assert_eq!(parsed.header.call_id, 9);
        assert_eq!(parsed.payload, &[4; 3000][..]);
        assert_eq!(Metadata::decode(parsed.metadata).unwrap(), md);
        let in_place = std::ptr::eq(parsed.payload.as_ptr(), at);
        assert_eq!(
            in_place,
            announced == md.encoded_len(),
            "announced {announced}"
        );
    }
}
