//! Target `tcp_stream`: the TCP transport's frame decoder
//! (`rdmarpc_transport_tcp::fuzzing::FrameDecoder`) on a byte stream cut into arbitrary
//! chunks, against a reference that decodes the whole stream at once with
//! [`Header::decode`].
//!
//! Input: byte 0 picks the largest payload accepted (bits 0-2) and whether large frames
//! may claim a buffer of their own (bit 3); bytes 1-2 seed the chunk sizes; the rest is
//! the stream.

use bytes::BufMut;
use rdmarpc_core::wire::{Flags, FrameError, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::Metadata;
use rdmarpc_transport_tcp::fuzzing::{Allowance, FrameDecoder, KEEP_MIN};

use crate::frame::{build, frame_fields};
use crate::mutate::Field;

/// Bytes before the stream.
pub const PREFIX: usize = 3;

/// The largest payloads accepted, by bits 0-2 of the first byte.
const MAX_MESSAGE: [usize; 8] = [0, 1, 64, 1024, 4096, 40_000, 1 << 20, 1 << 24];

/// Large frames get a buffer of their own at their declared length.
static AMPLE: Allowance = Allowance::new(1 << 30);
/// Large frames grow with what arrives.
static SPENT: Allowance = Allowance::new(0);

/// What the stream decodes to, decoded at once: the frames in order (an oversized one
/// as its header alone, flagged discarded), then the error the stream ends with, or
/// whether it ends inside a frame.
#[derive(Debug, PartialEq)]
struct Expected {
    frames: Vec<Vec<u8>>,
    error: Option<FrameError>,
    in_frame: bool,
}

/// Decodes `stream` at once, frame after frame.
fn reference(stream: &[u8], max_message: usize) -> Expected {
    let mut frames = Vec::new();
    let mut at = 0;
    let end_state = |frames, error, in_frame| Expected {
        frames,
        error,
        in_frame,
    };
    loop {
        let header = match Header::decode(&stream[at..]) {
            Err(e) => return end_state(frames, Some(e), true),
            Ok(None) => return end_state(frames, None, at < stream.len()),
            Ok(Some(h)) => h,
        };
        let end = at + header.frame_len();
        if header.payload_len as usize > max_message {
            let mut discarded = header;
            discarded.flags = discarded.flags | Flags::DISCARDED;
            discarded.meta_len = 0;
            frames.push(discarded.encode().to_vec());
        } else if end <= stream.len() {
            frames.push(stream[at..end].to_vec());
        }
        if end > stream.len() {
            // Cut inside a frame (or the skipped body of an oversized one).
            return end_state(frames, None, true);
        }
        at = end;
    }
}

/// Feeds the stream to a decoder in chunks and checks it against [`reference`].
///
/// # Panics
/// When the decoder gives other frames, another error, or another end state than the
/// stream decoded at once; or when a claim of the allowance outlives the decoder.
pub fn tcp_stream(data: &[u8]) {
    let Some((settings, stream)) = data.split_first_chunk::<PREFIX>() else {
        return;
    };
    let max_message = MAX_MESSAGE[usize::from(settings[0] & 7)];
    let allowance = if settings[0] & 8 == 0 { &AMPLE } else { &SPENT };
    let mut seed = u32::from(u16::from_le_bytes([settings[1], settings[2]])) | 1;
    let expected = reference(stream, max_message);
    let mut decoder = FrameDecoder::new(max_message, &[], allowance);
    let mut got = Expected {
        frames: Vec::new(),
        error: None,
        in_frame: false,
    };
    let mut rest = stream;
    'feed: while !rest.is_empty() {
        // Chunks of 1 to 64 bytes, or 1 to 4096.
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let span = if seed & 0x10000 == 0 { 64 } else { 4096 };
        let chunk = 1 + (seed >> 17) as usize % span;
        let mut chunk = &rest[..chunk.min(rest.len())];
        rest = &rest[chunk.len()..];
        while !chunk.is_empty() {
            let n = decoder.push(chunk);
            assert!(n > 0 || decoder_full(&mut decoder), "push took nothing");
            chunk = &chunk[n..];
            loop {
                match decoder.decode() {
                    Ok(Some(frame)) => got.frames.push(frame.to_vec()),
                    Ok(None) => break,
                    Err(e) => {
                        got.error = Some(e);
                        break 'feed;
                    }
                }
            }
        }
    }
    got.in_frame = got.error.is_some() || decoder.in_frame();
    assert_eq!(
        got, expected,
        "the chunked decoder and the reference disagree"
    );
    drop(decoder);
    assert_eq!(allowance.claimed(), 0, "a claim outlived its decoder");
}

/// Whether the decoder's room is full (a large frame's own buffer is complete and waits
/// for `decode`): the only state where `push` takes nothing.
fn decoder_full(decoder: &mut FrameDecoder) -> bool {
    decoder.room().buf().remaining_mut() == 0
}

/// The stream's frames' fields, as target `frame` has them.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = vec![Field::new(0, 1, (0..16).collect())];
    let mut at = PREFIX;
    while let Some(Ok(Some(header))) = data.get(at..).map(Header::decode) {
        let end = (at + header.frame_len()).min(data.len());
        fields.extend(frame_fields(&data[..end], at));
        at += header.frame_len();
    }
    fields
}

/// Streams of valid frames, small and large, under each setting.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut md = Metadata::new();
    md.append("authorization", "Bearer x");
    let request = Header::new(FrameKind::Request, 1);
    let response = Header::new(FrameKind::Response, 1);
    let small = [
        build(request, &md, b"hello"),
        build(response, &Metadata::new(), b""),
        build(Header::new(FrameKind::Ping, 2), &Metadata::new(), b""),
        build(request, &Metadata::new(), &[7; 300]),
    ]
    .concat();
    let large = [
        build(request, &md, &vec![1; KEEP_MIN + 10]),
        build(response, &Metadata::new(), b"after"),
    ]
    .concat();
    let mut seeds = Vec::new();
    for (name, settings, stream) in [
        ("small", [6, 1, 0], &small),
        ("small-oversized", [2, 7, 0], &small),
        ("small-max-zero", [0, 3, 1], &small),
        ("large-own-buffer", [6, 5, 2], &large),
        ("large-spent", [14, 9, 3], &large),
        ("large-oversized", [5, 11, 4], &large),
    ] {
        seeds.push((format!("seed-{name}"), [&settings[..], stream].concat()));
    }
    let mut cut = [&[6u8, 1, 0][..], &small].concat();
    cut.truncate(PREFIX + HEADER_LEN + 7);
    seeds.push(("seed-cut".into(), cut));
    seeds
}
