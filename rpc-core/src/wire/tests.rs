use super::*;
use crate::Metadata;

fn sample() -> Header {
    Header {
        kind: FrameKind::Request,
        flags: Flags::END_STREAM,
        status: 0,
        call_id: 0x0102_0304_0506_0708,
        timeout_us: 1_500_000,
        method_id: 0xdead_beef,
        meta_len: 9,
        payload_len: 3,
        credits: 7,
    }
}

#[test]
fn header_exact_bytes() {
    let bytes = sample().encode();
    #[rustfmt::skip]
    let expected: [u8; HEADER_LEN] = [
        b'R', b'P', 1, 1, 1, 0, 0, 0,
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
        0x60, 0xe3, 0x16, 0, 0, 0, 0, 0,
        0xef, 0xbe, 0xad, 0xde,
        9, 0, 0, 0,
        3, 0, 0, 0,
        7, 0, 0, 0,
    ];
    assert_eq!(bytes, expected);
    assert_eq!(Header::decode(&bytes).unwrap(), Some(sample()));
}

#[test]
fn response_exact_bytes() {
    let mut h = Header::new(FrameKind::Response, 1);
    h.status = 5;
    h.flags = Flags::END_STREAM;
    let b = h.encode();
    assert_eq!(&b[..8], &[b'R', b'P', 1, 2, 1, 5, 0, 0]);
    assert_eq!(&b[8..16], &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(b[16..].iter().all(|&x| x == 0));
}

#[test]
fn short_input_needs_more_bytes() {
    let bytes = sample().encode();
    for n in 0..HEADER_LEN {
        assert_eq!(Header::decode(&bytes[..n]), Ok(None), "prefix of {n}");
    }
}

#[test]
fn invalid_headers_are_rejected() {
    let good = sample().encode();
    let mut b = good;
    b[0] = b'X';
    assert!(matches!(Header::decode(&b), Err(FrameError::BadMagic(_))));
    let mut b = good;
    b[2] = 9;
    assert_eq!(Header::decode(&b), Err(FrameError::UnsupportedVersion(9)));
    let mut b = good;
    b[3] = 0;
    assert_eq!(Header::decode(&b), Err(FrameError::UnknownKind(0)));
    b[3] = 10;
    assert_eq!(Header::decode(&b), Err(FrameError::UnknownKind(10)));
    for (byte, kind) in [(8, FrameKind::Message), (9, FrameKind::WindowUpdate)] {
        b[3] = byte;
        assert_eq!(Header::decode(&b).unwrap().unwrap().kind, kind);
    }
    let mut b = good;
    b[4] = 0x80;
    assert_eq!(Header::decode(&b), Err(FrameError::UnknownFlags(0x80)));
    let mut b = good;
    b[7] = 1;
    assert_eq!(Header::decode(&b), Err(FrameError::ReservedNotZero));
    let mut b = good;
    b[28..32].copy_from_slice(&(1u32 << 20).to_le_bytes());
    assert!(matches!(
        Header::decode(&b),
        Err(FrameError::MetadataTooLarge(_))
    ));
}

#[test]
fn frame_round_trip_and_length_check() {
    let mut md = Metadata::new();
    md.insert("k", "vv");
    let mut h = sample();
    h.payload_len = 3;
    let mut buf = Vec::new();
    encode_head(&mut h, &md, &mut buf);
    buf.extend_from_slice(b"abc");
    let f = Frame::parse(&buf).unwrap();
    assert_eq!(f.header, h);
    assert_eq!(Metadata::decode(f.metadata).unwrap(), md);
    assert_eq!(f.payload, b"abc");
    buf.push(0);
    assert!(matches!(
        Frame::parse(&buf),
        Err(FrameError::LengthMismatch { .. })
    ));
    assert!(Frame::parse(&buf[..10]).is_err());
}

#[test]
fn discarded_frame_is_header_only() {
    let mut h = sample();
    h.flags = h.flags | Flags::DISCARDED;
    let b = h.encode();
    let f = Frame::parse(&b).unwrap();
    assert!(f.is_discarded());
    assert!(f.payload.is_empty());
}

/// A small deterministic PRNG (xorshift64*), so the fuzz-style tests need no dependency
/// and fail reproducibly.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn decoders_never_panic_on_random_input() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let valid = sample().encode();
    for round in 0..200_000 {
        let len = (xorshift(&mut seed) % 160) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
        // Half the inputs start like a real frame, to get past the first checks.
        if round % 2 == 0 {
            let n = bytes.len().min(8);
            bytes[..n].copy_from_slice(&valid[..n]);
        }
        if let Ok(Some(h)) = Header::decode(&bytes) {
            assert!(h.meta_len as usize <= crate::MAX_METADATA_LEN);
        }
        if let Ok(frame) = Frame::parse(&bytes) {
            let _ = Metadata::decode(frame.metadata);
        }
        let _ = Metadata::decode(&bytes);
    }
}
