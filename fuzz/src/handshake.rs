//! Target `handshake`: the RDMA side-channel handshake parser, through
//! [`rdmarpc_transport_rdma::fuzzing::decode_hello`] (the offer decoder behind HELLO and
//! OKAY, and the recognition of NONE).
//!
//! ```text
//!  0       8         12    13    16         24          40        42    48          52          56             60          62      64
//!  | magic | version |mode | pad | reserved | token (16)| cm_port | pad |recv_slots |slot_size  |rdv_budget_kib| max_loans | flags |
//! ```
//! NONE carries `reason_len: u32` at offset 8 and the reason after the 64 bytes.

use rdmarpc_transport_rdma::fuzzing::{decode_hello, Hello, HELLO_LEN};

use crate::mutate::{read_le, Field};

const HELLO: &[u8; 8] = b"RDMAHELO";
const OKAY: &[u8; 8] = b"RDMAOKAY";
const NONE: &[u8; 8] = b"RDMANONE";
const READY: &[u8; 8] = b"RDMAREDY";
/// The byte ranges of the block that the decoder ignores (padding).
const PADDING: [std::ops::Range<usize>; 3] = [13..16, 16..24, 42..48];

/// Decodes `data` as a peer's handshake block and checks the accepted offer.
///
/// # Panics
/// On any broken invariant: an offer that does not re-encode to its input (padding
/// aside), a magic other than HELLO or OKAY accepted as an offer, or accepted fields
/// outside what the decoder promises to check (mode, ring geometry, rendezvous limits).
pub fn handshake(data: &[u8]) {
    match decode_hello(data) {
        Ok(Hello::Offer {
            okay,
            mode,
            recv_slots,
            slot_size,
            rdv_budget,
            max_loans,
            reencoded,
            ..
        }) => {
            let block = &data[..HELLO_LEN];
            assert_eq!(&block[..8], if okay { OKAY } else { HELLO }, "magic");
            let mut expected = block.to_vec();
            for range in PADDING {
                expected[range].fill(0);
            }
            assert_eq!(reencoded[..], expected[..], "offer does not re-encode");
            assert!(mode == 1 || mode == 2, "mode {mode}");
            assert!((4..=4096).contains(&recv_slots), "recv_slots {recv_slots}");
            assert!(
                (256..=1 << 20).contains(&slot_size),
                "slot_size {slot_size}"
            );
            // What the connection derives from the peer's geometry must not overflow.
            let ring = u64::from(recv_slots) * u64::from(slot_size);
            assert!(usize::try_from(ring).is_ok());
            assert!(slot_size as usize > crate::rdma_control::PREFIX_LEN);
            assert!(rdv_budget >= 64 * 1024, "rendezvous budget {rdv_budget}");
            assert!(max_loans >= 1, "max_loans {max_loans}");
            assert_eq!(&block[62..64], &[0, 0], "flags");
        }
        Ok(Hello::Refusal { reason_len }) => {
            assert_eq!(&data[..8], NONE, "magic");
            assert_eq!(
                u64::from(reason_len),
                read_le(data, 8, 4).expect("in the block")
            );
        }
        // A block added later, or a refused one.
        _ => {}
    }
}

/// The magic, version, mode, rdma_cm port and ring geometry of a block, or a NONE's
/// reason length, with the values at the edges of the decoder's checks.
pub fn fields(data: &[u8]) -> Vec<Field> {
    if data.len() < HELLO_LEN {
        return vec![Field::new(0, 8, magics())];
    }
    let rest = (data.len() - HELLO_LEN) as u64;
    let mut reason_len = Field::length(8, 4, read_le(data, 8, 4).unwrap_or(0), rest);
    reason_len.values.extend([1024, 1025]);
    let id = vec![0, 1, 0xff_ffff, 0x100_0000, u32::MAX.into()];
    vec![
        Field::new(0, 8, magics()),
        reason_len,
        Field::new(12, 1, vec![0, 1, 2, 3, 0xff]),
        Field::new(8, 4, vec![3, 4, 5]),
        Field::new(24, 4, id),
        Field::new(40, 2, vec![0, 1, 0xffff]),
        Field::new(
            48,
            4,
            vec![0, 1, 3, 4, 5, 64, 4095, 4096, 4097, u32::MAX.into()],
        ),
        Field::new(
            52,
            4,
            vec![
                0,
                16,
                255,
                256,
                257,
                8192,
                (1 << 20) - 1,
                1 << 20,
                (1 << 20) + 1,
            ],
        ),
        Field::new(56, 4, vec![0, 1, 63, 64, 65, 16384, u32::MAX.into()]),
        Field::new(60, 2, vec![0, 1, 128, 0xffff]),
        Field::new(62, 2, vec![0, 1, 0x8000]),
    ]
}

fn magics() -> Vec<u64> {
    [HELLO, OKAY, NONE, READY, b"RP\x01\x01\0\0\0\0"]
        .iter()
        .map(|m| u64::from_le_bytes(**m))
        .collect()
}

/// HELLO and OKAY blocks of both modes, rdma_cm ports and the edges of the ring geometry,
/// NONE with its reason, and blocks just past the decoder's checks.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let offer = |magic: &[u8; 8], mode: u8, port: u16, slots: u32, size: u32| {
        let mut b = vec![0u8; HELLO_LEN];
        b[..8].copy_from_slice(magic);
        b[8..12].copy_from_slice(&5u32.to_le_bytes());
        b[12] = mode;
        if magic == OKAY {
            b[24..40].copy_from_slice(b"0123456789abcdef");
            b[40..42].copy_from_slice(&port.to_le_bytes());
        }
        b[48..52].copy_from_slice(&slots.to_le_bytes());
        b[52..56].copy_from_slice(&size.to_le_bytes());
        b[56..60].copy_from_slice(&16384u32.to_le_bytes());
        b[60..62].copy_from_slice(&128u16.to_le_bytes());
        b
    };
    let mut seeds = vec![
        ("seed-hello-rdma", offer(HELLO, 1, 0, 64, 8192)),
        ("seed-hello-auto", offer(HELLO, 2, 0, 4, 256)),
        ("seed-okay", offer(OKAY, 2, 40000, 4096, 1 << 20)),
        ("seed-okay-port-1", offer(OKAY, 1, 1, 128, 4096)),
        ("seed-hello-big-slots", offer(HELLO, 1, 0, 16, 65536)),
        ("seed-bad-geometry", offer(HELLO, 1, 0, 3, 8192)),
    ];
    let mut v3 = offer(HELLO, 1, 0, 64, 8192);
    v3[8] = 3;
    seeds.push(("seed-version-3", v3));
    let mut v4 = offer(HELLO, 1, 0, 64, 8192);
    v4[8] = 4;
    seeds.push(("seed-version-4", v4));
    let mut v1 = offer(HELLO, 1, 0, 64, 8192);
    v1[8] = 1;
    v1[56..64].fill(0);
    seeds.push(("seed-version-1", v1));
    let mut no_loans = offer(OKAY, 1, 7471, 64, 8192);
    no_loans[60..62].fill(0);
    seeds.push(("seed-no-loans", no_loans));
    let reason = "this server serves TCP only";
    let mut none = vec![0u8; HELLO_LEN];
    none[..8].copy_from_slice(NONE);
    none[8..12].copy_from_slice(&(reason.len() as u32).to_le_bytes());
    none.extend_from_slice(reason.as_bytes());
    seeds.push(("seed-none", none));
    let mut ready = offer(HELLO, 1, 0, 64, 8192);
    ready[..8].copy_from_slice(READY);
    seeds.push(("seed-ready", ready));
    seeds.push(("seed-short", offer(HELLO, 1, 0, 64, 8192)[..63].to_vec()));
    seeds.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
}
