//! [`Mutator`]: new inputs from corpus entries, byte-level and structure-aware.
//!
//! Byte-level mutations know nothing of the protocol: bit flips, bytes set to boundary
//! values, integers written at random offsets, ranges inserted, deleted, duplicated or
//! copied, truncation, and splices of two entries. Structure-aware mutations ask the
//! target where its fields are ([`Field`]: the header's `meta_len` at 28 and
//! `payload_len` at 32, the lengths inside a metadata block, a control message's token
//! count, ...) and write one of the values worth trying there: for a length, 0, 1, one
//! less and one more than it is and than the bytes that follow, `u32::MAX`, and so on.
//! Random bytes almost never hit those, and they are where length arithmetic breaks.

use crate::rng::Rng;

/// A little-endian integer field of an input, and the values worth writing into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Byte offset in the input.
    pub offset: usize,
    /// Width in bytes: 1, 2, 4 or 8.
    pub width: usize,
    /// Values to try (truncated to `width` bytes when written).
    pub values: Vec<u64>,
}

impl Field {
    /// A field with explicit values to try.
    pub fn new(offset: usize, width: usize, values: Vec<u64>) -> Field {
        Field {
            offset,
            width,
            values,
        }
    }

    /// A length field that holds `current` where `actual` bytes are really there:
    /// tries [`length_values`].
    pub fn length(offset: usize, width: usize, current: u64, actual: u64) -> Field {
        Field::new(offset, width, length_values(current, actual))
    }

    /// Reads the field's value from `data`, if `data` is long enough.
    pub fn read(&self, data: &[u8]) -> Option<u64> {
        read_le(data, self.offset, self.width)
    }

    /// Writes `value` (truncated to the width) into `data`, if `data` is long enough.
    pub fn write(&self, data: &mut [u8], value: u64) {
        if let Some(bytes) = data.get_mut(self.offset..self.offset + self.width) {
            bytes.copy_from_slice(&value.to_le_bytes()[..self.width]);
        }
    }
}

/// Reads a little-endian integer of `width` (at most 8) bytes at `offset`.
pub fn read_le(data: &[u8], offset: usize, width: usize) -> Option<u64> {
    let bytes = data.get(offset..offset.checked_add(width)?)?;
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(bytes);
    Some(u64::from_le_bytes(le))
}

/// Boundary values for a length field that holds `current` where `actual` bytes are
/// really available: 0, 1, `current ± 1`, `actual` and `actual ± 1`, and the limits of
/// 16-, 32- and 64-bit integers, signed and unsigned.
pub fn length_values(current: u64, actual: u64) -> Vec<u64> {
    vec![
        0,
        1,
        current.wrapping_sub(1),
        current.wrapping_add(1),
        actual,
        actual.wrapping_sub(1),
        actual.wrapping_add(1),
        actual.wrapping_mul(2),
        0x7fff,
        0x8000,
        0xffff,
        0x1_0000,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_fffe,
        0xffff_ffff,
        0x1_0000_0000,
        i64::MAX as u64,
        u64::MAX,
    ]
}

/// Integers the byte-level mutations write at random offsets.
const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    u64::MAX,
];

/// Makes inputs for one target from its corpus.
#[derive(Debug)]
pub struct Mutator<'a> {
    corpus: &'a [Vec<u8>],
    fields: fn(&[u8]) -> Vec<Field>,
    max_len: usize,
}

impl<'a> Mutator<'a> {
    /// A mutator over `corpus` (the seeds to start from; if empty, inputs start empty),
    /// with the target's field finder, making inputs of at most `max_len` bytes.
    pub fn new(corpus: &'a [Vec<u8>], fields: fn(&[u8]) -> Vec<Field>, max_len: usize) -> Self {
        Mutator {
            corpus,
            fields,
            max_len,
        }
    }

    /// A new input: a random corpus entry with one to eight stacked mutations.
    pub fn next_input(&self, rng: &mut Rng) -> Vec<u8> {
        let mut data = self.entry(rng).to_vec();
        // Mostly few mutations (closer to valid inputs get deeper), sometimes many.
        let stack = 1 << rng.below(4);
        for _ in 0..rng.between(1, stack) {
            self.mutate(&mut data, rng);
        }
        data.truncate(self.max_len);
        data
    }

    fn entry(&self, rng: &mut Rng) -> &'a [u8] {
        if self.corpus.is_empty() {
            &[]
        } else {
            rng.pick(self.corpus).as_slice()
        }
    }

    /// Applies one random mutation to `data`.
    pub fn mutate(&self, data: &mut Vec<u8>, rng: &mut Rng) {
        // Structure-aware mutations get about a third of the draws.
        if rng.one_in(3) && self.set_field(data, rng) {
            return;
        }
        let len = data.len();
        match rng.below(11) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = *rng.pick(&[0, 1, 0x7f, 0x80, 0xfe, 0xff]);
            }
            2 if len > 0 => {
                let i = rng.below(len);
                data[i] = rng.byte();
            }
            3 => {
                let at = rng.below(len + 1);
                let n = rng.between(1, 16);
                let fill = rng.byte();
                let bytes: Vec<u8> = if rng.one_in(2) {
                    vec![fill; n]
                } else {
                    (0..n).map(|_| rng.byte()).collect()
                };
                data.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let (from, to) = range(len, rng);
                data.drain(from..to);
            }
            5 if len > 0 => {
                let (from, to) = range(len, rng);
                let copy = data[from..to].to_vec();
                let at = rng.below(len + 1);
                data.splice(at..at, copy);
            }
            6 if len > 0 => {
                let (from, to) = range(len, rng);
                let at = rng.below(len - (to - from) + 1);
                data.copy_within(from..to, at);
            }
            7 => {
                let other = self.entry(rng);
                let keep = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                data.truncate(keep);
                data.extend_from_slice(&other[from..]);
            }
            8 if len > 0 => {
                let width = *rng.pick(&[1, 2, 4, 8]);
                if len >= width {
                    let field = Field::new(rng.below(len - width + 1), width, Vec::new());
                    field.write(data, *rng.pick(&INTERESTING));
                }
            }
            9 if len > 0 => data.truncate(rng.below(len)),
            _ => {
                if !self.set_field(data, rng) && len > 0 {
                    let i = rng.below(len);
                    data[i] ^= 0xff;
                }
            }
        }
    }

    /// Writes a boundary value into one of the target's fields; false if it has none here.
    fn set_field(&self, data: &mut [u8], rng: &mut Rng) -> bool {
        let fields = (self.fields)(data);
        let fields: Vec<&Field> = fields.iter().filter(|f| !f.values.is_empty()).collect();
        if fields.is_empty() {
            return false;
        }
        let field = *rng.pick(&fields);
        field.write(data, *rng.pick(&field.values));
        true
    }
}

/// A non-empty range `from..to` within `len > 0` bytes, mostly short.
fn range(len: usize, rng: &mut Rng) -> (usize, usize) {
    let from = rng.below(len);
    let max = if rng.one_in(4) {
        len - from
    } else {
        (len - from).min(16)
    };
    (from, from + rng.between(1, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_fields(data: &[u8]) -> Vec<Field> {
        let mut fields = vec![Field::new(0, 1, vec![0xaa])];
        if data.len() >= 8 {
            fields.push(Field::length(4, 4, 0, data.len() as u64));
        }
        fields
    }

    #[test]
    fn same_seed_same_inputs() {
        let corpus = vec![vec![1, 2, 3, 4, 5, 6, 7, 8], b"RP\x01".to_vec()];
        let m = Mutator::new(&corpus, two_fields, 64);
        let run = |seed| {
            let mut rng = Rng::new(seed, "t");
            (0..200).map(|_| m.next_input(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        assert!(run(3).iter().all(|i| i.len() <= 64));
    }

    #[test]
    fn fields_read_and_write_little_endian_and_truncate() {
        let mut d = vec![0u8; 8];
        let f = Field::new(2, 2, vec![]);
        f.write(&mut d, 0x1_2345);
        assert_eq!(d, [0, 0, 0x45, 0x23, 0, 0, 0, 0]);
        assert_eq!(f.read(&d), Some(0x2345));
        assert_eq!(Field::new(7, 2, vec![]).read(&d), None);
        Field::new(7, 2, vec![]).write(&mut d, 9); // out of range: ignored
        assert_eq!(read_le(&d, usize::MAX, 2), None);
    }

    #[test]
    fn structure_aware_mutations_write_boundary_values() {
        let corpus = vec![vec![0u8; 8]];
        let m = Mutator::new(&corpus, two_fields, 64);
        let mut rng = Rng::new(1, "t");
        let mut seen_max = false;
        for _ in 0..2000 {
            let mut d = corpus[0].clone();
            if m.set_field(&mut d, &mut rng) && read_le(&d, 4, 4) == Some(0xffff_ffff) {
                seen_max = true;
            }
        }
        assert!(seen_max, "u32::MAX was never written to the length field");
    }
}
