//! Target `metadata`: [`Metadata::decode`] on arbitrary bytes, and its round trip.

use rdmarpc_core::{Metadata, MAX_METADATA_LEN};

use crate::mutate::{read_le, Field};

/// Decodes `data` as a metadata block; on success, encodes it again and decodes that.
///
/// # Panics
/// On any broken invariant: a decoded block whose encoding differs from the input (the
/// encoding has exactly one form, so a decoder that accepts a block must reproduce it),
/// whose `encoded_len` is not the input's length, that does not decode to itself again,
/// or whose check disagrees with [`MAX_METADATA_LEN`] and the rule against empty keys.
pub fn metadata(data: &[u8]) {
    let Ok(md) = Metadata::decode(data) else {
        return;
    };
    assert_eq!(md.encoded_len(), data.len(), "encoded_len");
    // An empty key is the wire's separator of trailers, never an application's key.
    let empty_key = md.iter().any(|(key, _)| key.is_empty());
    assert_eq!(
        md.check().is_ok(),
        data.len() <= MAX_METADATA_LEN && !empty_key,
        "check"
    );
    let mut encoded = Vec::with_capacity(data.len());
    md.encode(&mut encoded);
    assert_eq!(
        encoded, data,
        "metadata does not re-encode to the same bytes"
    );
    let again = Metadata::decode(&encoded).expect("re-encoded metadata decodes");
    assert_eq!(again, md, "round trip");
    assert_eq!(md.len(), md.iter().count());
    for (key, value) in md.iter() {
        assert!(md.get(key).is_some(), "key {key:?} not found");
        assert!(key.len() <= usize::from(u16::MAX) && value.len() <= data.len());
    }
}

/// The length fields of a metadata block: each entry's `key_len` (u16) and `value_len`
/// (u32), against the bytes that really follow, as far as the entries can be walked.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = Vec::new();
    let mut at = 0usize;
    while fields.len() < 64 {
        let Some(key_len) = read_le(data, at, 2) else {
            break;
        };
        let rest = (data.len() - at - 2) as u64;
        fields.push(Field::length(at, 2, key_len, rest.saturating_sub(4)));
        at += 2 + key_len as usize;
        let Some(value_len) = read_le(data, at, 4) else {
            break;
        };
        let rest = (data.len() - at - 4) as u64;
        fields.push(Field::length(at, 4, value_len, rest));
        at = match at.checked_add(4 + value_len as usize) {
            Some(next) if next <= data.len() => next,
            _ => break,
        };
    }
    fields
}

/// Metadata blocks built with the crate's own encoder: empty, one pair, repeated keys,
/// empty keys and values, multi-byte UTF-8, a long value; and blocks just past the checks.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let block = |pairs: &[(&str, &str)]| {
        let mut md = Metadata::new();
        for (k, v) in pairs {
            md.append(*k, *v);
        }
        let mut out = Vec::new();
        md.encode(&mut out);
        out
    };
    let long = "v".repeat(1000);
    let mut seeds = vec![
        ("seed-empty", block(&[])),
        ("seed-one", block(&[("k", "vv")])),
        ("seed-repeat", block(&[("a", "1"), ("a", "2"), ("b", "")])),
        ("seed-empty-key", block(&[("", "x"), ("", "")])),
        ("seed-utf8", block(&[("grüße", "日本語"), ("emoji", "🦀")])),
        ("seed-long", block(&[("grpc-message", &long)])),
    ];
    let mut cut = block(&[("key", "value")]);
    cut.pop();
    seeds.push(("seed-truncated", cut));
    let mut bad = block(&[("key", "value")]);
    bad[2] = 0xff;
    seeds.push(("seed-not-utf8", bad));
    seeds.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
}
