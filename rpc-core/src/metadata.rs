//! [`Metadata`]: string key/value pairs carried with a request or a response.
//!
//! On the wire the metadata block sits between the header and the payload:
//!
//! ```text
//! repeated { key_len: u16 LE | key: UTF-8 | value_len: u32 LE | value: UTF-8 }
//! ```
//! Its total length is the header's `meta_len`, bounded by [`MAX_METADATA_LEN`].
//!
//! Binary values, as in gRPC, go under keys ending in `-bin`, base64-encoded (unpadded;
//! padded is accepted): [`Metadata::append_bin`] and [`Metadata::get_bin`]. That is also
//! their form in HTTP/2 headers, so they cross to and from gRPC unchanged.
//!
//! A response that carries its message and its status in one frame (unary and
//! client-streaming calls) carries its headers and its trailers in one block: the trailers
//! follow an entry with an empty key and an empty value (applications' keys are never
//! empty), absent when there are no trailers.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use bytes::BufMut;

use crate::wire::FrameError;

/// gRPC's base64 for `-bin` values: written unpadded, read padded or not.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A binary metadata value that cannot be set or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BinaryMetadataError {
    /// Binary values go under keys ending in `-bin`.
    #[error("metadata key {0:?} holds binary values, so it must end in \"-bin\"")]
    Key(String),
    /// The value under a `-bin` key is not base64.
    #[error("metadata value of {key:?} is not base64: {reason}")]
    Value {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The largest metadata block a frame may carry, in bytes.
pub const MAX_METADATA_LEN: usize = 64 * 1024;

/// Ordered string key/value pairs. Keys are compared case-sensitively; a key may repeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    entries: Vec<(String, String)>,
}

impl Metadata {
    /// Empty metadata.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Appends `key: value` (keeps earlier values of the same key).
    pub fn append(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.entries.push((key.into(), value.into()));
    }

    /// Sets `key` to `value`, replacing every earlier value of `key`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        self.entries.retain(|(k, _)| *k != key);
        self.entries.push((key, value.into()));
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Appends the binary `value` under `key`, which must end in `-bin` (base64 on the
    /// wire, as gRPC carries it).
    ///
    /// ```
    /// let mut m = rdmarpc_core::Metadata::new();
    /// m.append_bin("trace-bin", [0u8, 0xff, 7]).unwrap();
    /// assert_eq!(m.get("trace-bin"), Some("AP8H"));
    /// assert_eq!(m.get_bin("trace-bin").unwrap().unwrap(), [0u8, 0xff, 7]);
    /// assert!(m.append_bin("trace", [1u8]).is_err());
    /// ```
    ///
    /// # Errors
    /// A key that does not end in `-bin`.
    pub fn append_bin(
        &mut self,
        key: impl Into<String>,
        value: impl AsRef<[u8]>,
    ) -> Result<(), BinaryMetadataError> {
        let key = key.into();
        if !key.ends_with("-bin") {
            return Err(BinaryMetadataError::Key(key));
        }
        self.entries.push((key, BASE64.encode(value)));
        Ok(())
    }

    /// The first value of the `-bin` key `key`, decoded; `Ok(None)` if there is none.
    ///
    /// # Errors
    /// A key that does not end in `-bin`, or a value that is not base64.
    pub fn get_bin(&self, key: &str) -> Result<Option<Vec<u8>>, BinaryMetadataError> {
        if !key.ends_with("-bin") {
            return Err(BinaryMetadataError::Key(key.to_owned()));
        }
        self.get(key)
            .map(|value| {
                BASE64
                    .decode(value.trim())
                    .map_err(|e| BinaryMetadataError::Value {
                        key: key.to_owned(),
                        reason: e.to_string(),
                    })
            })
            .transpose()
    }

    /// Appends every pair of `other` (no separator: see [`Metadata::append_trailers`]).
    pub(crate) fn append_trailers_flat(&mut self, other: &Metadata) {
        self.entries.extend(other.entries.iter().cloned());
    }

    /// Removes every value of `key`; returns the first one.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let first = self.entries.iter().position(|(k, _)| k == key)?;
        let value = self.entries.remove(first).1;
        self.entries.retain(|(k, _)| k != key);
        Some(value)
    }

    /// All pairs, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Size of the encoded block in bytes.
    pub fn encoded_len(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, v)| 6 + k.len() + v.len())
            .sum()
    }

    /// Writes the encoded block. The caller has checked [`Metadata::encoded_len`] against
    /// [`MAX_METADATA_LEN`] and that no key is longer than `u16::MAX`.
    pub fn encode(&self, buf: &mut impl BufMut) {
        for (k, v) in &self.entries {
            buf.put_u16_le(k.len() as u16);
            buf.put_slice(k.as_bytes());
            buf.put_u32_le(v.len() as u32);
            buf.put_slice(v.as_bytes());
        }
    }

    /// Checks that this metadata can be encoded: block within [`MAX_METADATA_LEN`], no
    /// empty key (the wire's separator of trailers).
    pub fn check(&self) -> Result<(), FrameError> {
        if self.entries.iter().any(|(k, _)| k.is_empty()) {
            return Err(FrameError::BadMetadata("an empty key"));
        }
        let len = self.encoded_len();
        if len > MAX_METADATA_LEN {
            return Err(FrameError::MetadataTooLarge(len));
        }
        Ok(())
    }

    /// Appends `trailers` after the separator (one block for headers and trailers; see the
    /// module docs). Nothing is appended for no trailers.
    pub fn append_trailers(&mut self, trailers: &Metadata) {
        if trailers.is_empty() {
            return;
        }
        self.entries.push((String::new(), String::new()));
        self.entries.extend(trailers.entries.iter().cloned());
    }

    /// Splits a block of headers and trailers at the separator (see the module docs).
    pub fn split_trailers(mut self) -> (Metadata, Metadata) {
        match self
            .entries
            .iter()
            .position(|(k, v)| k.is_empty() && v.is_empty())
        {
            Some(at) => {
                let trailers = self.entries.split_off(at + 1);
                self.entries.pop();
                (self, Metadata { entries: trailers })
            }
            None => (self, Metadata::new()),
        }
    }

    /// Parses an encoded block.
    ///
    /// # Errors
    /// [`FrameError::BadMetadata`] if an entry runs past the block or is not UTF-8.
    pub fn decode(mut block: &[u8]) -> Result<Metadata, FrameError> {
        let mut entries = Vec::new();
        while !block.is_empty() {
            let key = take(&mut block, 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)?;
            let key = take(&mut block, key)?;
            let val_len = take(&mut block, 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)?;
            let val = take(&mut block, val_len)?;
            let key = std::str::from_utf8(key)
                .map_err(|_| FrameError::BadMetadata("key is not UTF-8"))?;
            let val = std::str::from_utf8(val)
                .map_err(|_| FrameError::BadMetadata("value is not UTF-8"))?;
            entries.push((key.to_owned(), val.to_owned()));
        }
        Ok(Metadata { entries })
    }
}

fn take<'a>(block: &mut &'a [u8], n: usize) -> Result<&'a [u8], FrameError> {
    if block.len() < n {
        return Err(FrameError::BadMetadata(
            "entry runs past the metadata block",
        ));
    }
    let (head, tail) = block.split_at(n);
    *block = tail;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_follow_the_separator_and_empty_keys_are_refused() {
        let mut headers = Metadata::new();
        headers.append("a", "1");
        let mut trailers = Metadata::new();
        trailers.append("t", "2");
        trailers.append("t", "3");
        let mut block = headers.clone();
        block.append_trailers(&trailers);
        assert!(
            block.check().is_err(),
            "the separator is not an application key"
        );
        let mut out = Vec::new();
        block.encode(&mut out);
        let (h, t) = Metadata::decode(&out).unwrap().split_trailers();
        assert_eq!((h, t), (headers.clone(), trailers));
        let mut none = headers.clone();
        none.append_trailers(&Metadata::new());
        assert_eq!(none.clone().split_trailers(), (headers, Metadata::new()));
        let mut empty_key = Metadata::new();
        empty_key.append("", "x");
        assert!(empty_key.check().is_err());
    }

    #[test]
    fn exact_bytes_and_round_trip() {
        let mut md = Metadata::new();
        md.insert("k", "vv");
        let mut out = Vec::new();
        md.encode(&mut out);
        assert_eq!(out, [1, 0, b'k', 2, 0, 0, 0, b'v', b'v']);
        assert_eq!(out.len(), md.encoded_len());
        assert_eq!(Metadata::decode(&out).unwrap(), md);
    }

    #[test]
    fn truncated_and_non_utf8_blocks_are_errors() {
        assert!(Metadata::decode(&[5, 0, b'a']).is_err());
        assert!(Metadata::decode(&[1, 0, 0xff, 0, 0, 0, 0]).is_err());
        assert!(Metadata::decode(&[1, 0, b'a', 9, 0, 0, 0, b'x']).is_err());
    }

    #[test]
    fn insert_replaces_and_append_keeps() {
        let mut md = Metadata::new();
        md.append("a", "1");
        md.append("a", "2");
        assert_eq!(md.get("a"), Some("1"));
        md.insert("a", "3");
        assert_eq!(md.len(), 1);
        assert_eq!(md.remove("a").as_deref(), Some("3"));
        assert!(md.is_empty());
    }
}
