//! The decoder on byte streams cut every way, with no socket.

use bytes::Bytes;
use rdmarpc_core::wire::{encode_head, Flags, FrameError, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::Metadata;

use super::{Allowance, FrameDecoder, KEEP_MIN};

/// An allowance no other test takes from (each test that claims has its own).
static AMPLE: Allowance = Allowance::new(1 << 30);

/// A request frame with `payload` and a little metadata.
fn frame(id: u64, payload: &[u8]) -> Vec<u8> {
    let mut md = Metadata::new();
    md.append("k", "v");
    let mut header = Header::new(FrameKind::Request, id);
    header.payload_len = payload.len() as u32;
    let mut out = Vec::new();
    encode_head(&mut header, &md, &mut out);
    out.extend_from_slice(payload);
    out
}

/// Every frame the decoder gives after each of `chunks` is pushed.
fn decode_all(decoder: &mut FrameDecoder, chunks: &[&[u8]]) -> Result<Vec<Bytes>, FrameError> {
    let mut frames = Vec::new();
    for chunk in chunks {
        let mut rest = *chunk;
        while !rest.is_empty() {
            let n = decoder.push(rest);
            rest = &rest[n..];
            while let Some(frame) = decoder.decode()? {
                frames.push(frame);
            }
        }
    }
    Ok(frames)
}

#[test]
fn frames_cut_at_every_byte_come_out_whole() {
    let stream = [frame(1, b"hello"), frame(2, b""), frame(3, &[7; 300])].concat();
    for cut in 0..=stream.len() {
        let mut decoder = FrameDecoder::new(1 << 20, &[], &AMPLE);
        let (a, b) = stream.split_at(cut);
        let frames = decode_all(&mut decoder, &[a, b]).expect("valid frames");
        assert_eq!(frames.concat(), stream, "cut at {cut}");
        assert_eq!(frames.len(), 3);
        assert!(!decoder.in_frame());
    }
}

#[test]
fn bytes_read_before_the_decoder_start_the_stream() {
    let stream = [frame(1, b"ab"), frame(2, b"cd")].concat();
    let mut decoder = FrameDecoder::new(1 << 20, &stream[..HEADER_LEN + 3], &AMPLE);
    let frames = decode_all(&mut decoder, &[&stream[HEADER_LEN + 3..]]).expect("valid");
    assert_eq!(frames.concat(), stream);
}

#[test]
fn a_stream_that_ends_inside_a_frame_is_in_a_frame() {
    let one = frame(1, b"payload");
    let mut decoder = FrameDecoder::new(1 << 20, &[], &AMPLE);
    assert!(!decoder.in_frame());
    decoder.push(&one[..5]);
    assert_eq!(decoder.decode(), Ok(None));
    assert!(decoder.in_frame());
    decoder.push(&one[5..]);
    assert!(decoder.decode().expect("valid").is_some());
    assert!(!decoder.in_frame());
}

#[test]
fn an_oversized_frame_is_its_header_alone_and_its_body_is_skipped() {
    let big = frame(1, &[9; 5000]);
    let next = frame(2, b"next");
    let stream = [big.clone(), next.clone()].concat();
    for cut in [
        1,
        HEADER_LEN,
        HEADER_LEN + 1,
        2000,
        big.len(),
        big.len() + 1,
    ] {
        let mut decoder = FrameDecoder::new(4096, &[], &AMPLE);
        let (a, b) = stream.split_at(cut);
        let frames = decode_all(&mut decoder, &[a, b]).expect("valid");
        assert_eq!(frames.len(), 2, "cut at {cut}");
        let header = Header::decode(&frames[0]).expect("valid").expect("whole");
        assert!(header.flags.contains(Flags::DISCARDED));
        assert_eq!(header.payload_len, 5000);
        assert_eq!(header.meta_len, 0);
        assert_eq!(frames[0].len(), HEADER_LEN);
        assert_eq!(frames[1][..], next[..]);
    }
}

#[test]
fn a_malformed_header_is_an_error_that_stays() {
    let mut bad = frame(1, b"x");
    bad[0] ^= 0xff;
    let mut decoder = FrameDecoder::new(1 << 20, &[], &AMPLE);
    decoder.push(&bad);
    let err = decoder.decode().expect_err("bad magic");
    assert!(matches!(err, FrameError::BadMagic(_)), "{err:?}");
    assert_eq!(decoder.decode(), Err(err));
}

#[test]
fn a_frame_after_a_valid_one_is_checked_too() {
    let mut second = frame(2, b"x");
    second[2] = 99; // an unsupported version
    let stream = [frame(1, b"ok"), second].concat();
    let mut decoder = FrameDecoder::new(1 << 20, &[], &AMPLE);
    decoder.push(&stream);
    assert!(decoder.decode().expect("the first is valid").is_some());
    assert_eq!(decoder.decode(), Err(FrameError::UnsupportedVersion(99)));
}

#[test]
fn a_large_frame_is_read_into_its_own_buffer_up_to_its_end() {
    static ALLOWANCE: Allowance = Allowance::new(1 << 30);
    let large = frame(1, &[5; 3 * KEEP_MIN]);
    let next = frame(2, b"after");
    let stream = [large.clone(), next.clone()].concat();
    let mut decoder = FrameDecoder::new(1 << 20, &[], &ALLOWANCE);
    decoder.push(&stream[..HEADER_LEN + 10]);
    assert_eq!(decoder.decode(), Ok(None));
    let claimed = ALLOWANCE.claimed();
    assert!(claimed >= large.len(), "claimed {claimed}");
    // The frame's own buffer takes up to the frame's end, not into the next frame.
    let rest = &stream[HEADER_LEN + 10..];
    let taken = decoder.push(rest);
    assert_eq!(taken, large.len() - HEADER_LEN - 10);
    let first = decoder.decode().expect("valid").expect("whole");
    assert_eq!(first[..], large[..]);
    assert_eq!(ALLOWANCE.claimed(), 0, "the claim ends with the frame");
    decoder.push(&rest[taken..]);
    assert_eq!(
        decoder.decode().expect("valid").expect("whole")[..],
        next[..]
    );
}

#[test]
fn beyond_the_allowance_a_large_frame_grows_with_what_arrives() {
    static NONE_LEFT: Allowance = Allowance::new(0);
    // A header that claims 512 MiB, and 100 bytes of it.
    let mut header = Header::new(FrameKind::Request, 1);
    header.payload_len = 512 << 20;
    let mut decoder = FrameDecoder::new(1 << 30, &[], &NONE_LEFT);
    decoder.push(&header.encode());
    decoder.push(&[0; 100]);
    assert_eq!(decoder.decode(), Ok(None));
    let mut room = decoder.room();
    let room = room.buf().chunk_mut().len();
    assert!(room < 1 << 20, "room of {room} bytes for 100 arrived");
    assert!(decoder.in_frame());
}

#[test]
fn a_large_frame_that_arrived_whole_moves_out_of_the_shared_buffer() {
    static NONE_LEFT: Allowance = Allowance::new(0);
    let large = frame(1, &[3; KEEP_MIN]);
    let small = frame(2, b"small");
    let stream = [large.clone(), small.clone()].concat();
    let mut decoder = FrameDecoder::new(1 << 20, &[], &NONE_LEFT);
    let frames = decode_all(&mut decoder, &[&stream]).expect("valid");
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0][..], large[..]);
    assert_eq!(frames[1][..], small[..]);
}

/// A stream message frame of call `id` (no metadata, or `flags`).
fn message(id: u64, flags: Flags, payload: &[u8]) -> Vec<u8> {
    let mut header = Header::new(FrameKind::Message, id);
    header.flags = flags;
    header.payload_len = payload.len() as u32;
    let mut out = Vec::new();
    encode_head(&mut header, &Metadata::new(), &mut out);
    out.extend_from_slice(payload);
    out
}

#[test]
fn complete_small_stream_messages_come_out_as_one_run_and_anything_else_ends_it() {
    let mut decoder = FrameDecoder::new(1 << 20, &[], &AMPLE);
    let (a, b) = (
        message(1, Flags::default(), b"a"),
        message(2, Flags::default(), b"bb"),
    );
    let end = message(1, Flags::END_STREAM, b"");
    let request = frame(3, b"r");
    let large = message(1, Flags::default(), &vec![0; KEEP_MIN]);
    let mut bytes = [&a[..], &b, &a, &end, &a, &request, &a, &a, &large, &a].concat();
    let cut = bytes.len() - 3; // the last message is incomplete
    let tail = bytes.split_off(cut);
    decoder.push(&bytes);
    // Messages of any calls, up to the END_STREAM frame.
    let run = decoder.decode_message_run(usize::MAX).expect("a run");
    assert_eq!(run, [&a[..], &b, &a].concat());
    // One message alone is no run: frame by frame.
    assert!(decoder.decode_message_run(usize::MAX).is_none());
    assert_eq!(decoder.decode().unwrap().unwrap(), end);
    assert!(decoder.decode_message_run(usize::MAX).is_none());
    assert_eq!(decoder.decode().unwrap().unwrap(), a);
    assert_eq!(decoder.decode().unwrap().unwrap(), request);
    // Bounded by `max_bytes`; a large frame is never in a run (it is kept alone).
    assert!(decoder.decode_message_run(a.len()).is_none());
    assert_eq!(
        decoder.decode_message_run(usize::MAX).unwrap(),
        [&a[..], &a].concat()
    );
    assert!(decoder.decode_message_run(usize::MAX).is_none());
    assert_eq!(decoder.decode().unwrap().unwrap(), large);
    // An incomplete frame is not in a run until it is complete.
    assert!(decoder.decode_message_run(usize::MAX).is_none());
    decoder.push(&tail);
    assert_eq!(decoder.decode().unwrap().unwrap(), a);
}
