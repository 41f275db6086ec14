//! gRPC message compression: gzip and zstd, negotiated by `grpc-encoding` (how this
//! side's messages are compressed) and `grpc-accept-encoding` (what a side can read).
//!
//! Decompression is bounded: a message that inflates past the maximum message size
//! fails its call with `RESOURCE_EXHAUSTED` once that many bytes came out, whatever its
//! compressed size (a "zip bomb" costs the limit, not its ratio).

use std::io::Read;
use std::str::FromStr;

use bytes::Bytes;
use http::HeaderMap;
use rdmarpc_core::Status;

/// A message compression of gRPC (`"gzip"` or `"zstd"` in configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Encoding {
    /// `gzip` (DEFLATE in gzip framing).
    Gzip,
    /// `zstd` (Zstandard).
    Zstd,
}

/// What this side reads, for `grpc-accept-encoding`.
pub(crate) const ACCEPT: &str = "gzip,zstd,identity";

/// Messages shorter than this go uncompressed even when compression is on (a message's
/// flag says which): compressing them costs more than it saves.
pub(crate) const MIN_COMPRESSED: usize = 512;

impl Encoding {
    /// The name in `grpc-encoding`.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Zstd => "zstd",
        }
    }

    /// The encoding a `grpc-encoding` header names: `Ok(None)` for `identity` or no
    /// header, `Err` for one this side cannot read.
    pub(crate) fn of_headers(headers: &HeaderMap) -> Result<Option<Encoding>, String> {
        let Some(value) = headers.get("grpc-encoding") else {
            return Ok(None);
        };
        match value.to_str().map(str::trim) {
            Ok("identity") => Ok(None),
            Ok(name) => name.parse().map(Some),
            Err(_) => Err(format!("{value:?}")),
        }
    }

    /// Whether a `grpc-accept-encoding` header lists this encoding.
    pub(crate) fn accepted_by(self, headers: &HeaderMap) -> bool {
        headers.get_all("grpc-accept-encoding").iter().any(|value| {
            value
                .to_str()
                .is_ok_and(|v| v.split(',').any(|name| name.trim() == self.name()))
        })
    }

    /// `message` compressed.
    pub(crate) fn compress(self, message: &[u8]) -> Bytes {
        match self {
            Encoding::Gzip => {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::Write::write_all(&mut encoder, message).expect("writes to a Vec");
                encoder.finish().expect("writes to a Vec").into()
            }
            Encoding::Zstd => zstd::bulk::compress(message, 1)
                .expect("compressing into a Vec")
                .into(),
        }
    }

    /// `compressed` inflated, at most `max` bytes of it; `charge` is asked for the room
    /// of each step of output before it is allocated (so that what a message inflates to
    /// is counted at that size, not at its compressed size).
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past `max`; `INTERNAL` for bytes that do not inflate;
    /// `charge`'s error.
    pub(crate) fn decompress(
        self,
        compressed: &[u8],
        max: usize,
        charge: &mut dyn FnMut(usize) -> Result<(), Status>,
    ) -> Result<Bytes, Status> {
        let mut reader: Box<dyn Read + '_> = match self {
            Encoding::Gzip => Box::new(flate2::read::GzDecoder::new(compressed)),
            Encoding::Zstd => match zstd::stream::read::Decoder::new(compressed) {
                Ok(decoder) => Box::new(decoder),
                Err(e) => return Err(self.corrupt(e)),
            },
        };
        let mut out = Vec::new();
        loop {
            // One byte past the maximum tells that it is exceeded.
            let step = INFLATE_STEP.min(max.saturating_add(1) - out.len());
            charge(step)?;
            out.reserve_exact(step);
            let read = (&mut reader)
                .take(step as u64)
                .read_to_end(&mut out)
                .map_err(|e| self.corrupt(e))?;
            if out.len() > max {
                return Err(Status::resource_exhausted(format!(
                    "a {} message decompresses past the maximum of {max} bytes",
                    self.name()
                )));
            }
            if read < step {
                return Ok(out.into());
            }
        }
    }

    fn corrupt(self, e: std::io::Error) -> Status {
        Status::internal(format!(
            "a {} message that does not decompress: {e}",
            self.name()
        ))
    }
}

/// How much output a compressed message may inflate to before more is charged.
const INFLATE_STEP: usize = 64 * 1024;

impl FromStr for Encoding {
    type Err = String;
    fn from_str(name: &str) -> Result<Encoding, String> {
        match name {
            "gzip" => Ok(Encoding::Gzip),
            "zstd" => Ok(Encoding::Zstd),
            other => Err(format!(
                "unknown grpc-encoding {other:?} (this side reads gzip, zstd, identity)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmarpc_core::Code;

    #[test]
    fn both_encodings_round_trip_and_bombs_stop_at_the_limit() {
        for encoding in [Encoding::Gzip, Encoding::Zstd] {
            let message: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
            let compressed = encoding.compress(&message);
            assert!(compressed.len() < message.len() / 10, "{encoding:?}");
            let mut charged = 0;
            let mut count = |n: usize| {
                charged += n;
                Ok(())
            };
            let inflated = encoding
                .decompress(&compressed, 1 << 20, &mut count)
                .unwrap();
            assert_eq!(inflated, message);
            // Charged a step at a time: never more than a step beyond what came out.
            assert!(charged >= message.len() && charged < message.len() + INFLATE_STEP);
            // 64 MiB of zeros in well under 1 MiB (gzip at its fast level: ~300 KB; zstd:
            // a few KiB): refused at 1 MiB.
            let bomb = encoding.compress(&vec![0u8; 64 << 20]);
            assert!(bomb.len() < 1 << 20, "{encoding:?} {}", bomb.len());
            let err = encoding
                .decompress(&bomb, 1 << 20, &mut |_| Ok(()))
                .unwrap_err();
            assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
            let err = encoding
                .decompress(b"not compressed", 1 << 20, &mut |_| Ok(()))
                .unwrap_err();
            assert_eq!(err.code(), Code::Internal, "{err}");
            // A refused charge stops the inflation before its output is allocated.
            let mut room = 3 * INFLATE_STEP;
            let mut limited = |n: usize| {
                if n > room {
                    return Err(Status::resource_exhausted("no room"));
                }
                room -= n;
                Ok(())
            };
            let err = encoding
                .decompress(&bomb, 64 << 20, &mut limited)
                .unwrap_err();
            assert_eq!(err.message(), "no room");
        }
    }

    #[test]
    fn headers_negotiate() {
        let mut headers = HeaderMap::new();
        assert_eq!(Encoding::of_headers(&headers), Ok(None));
        headers.insert("grpc-encoding", "gzip".parse().unwrap());
        assert_eq!(Encoding::of_headers(&headers), Ok(Some(Encoding::Gzip)));
        headers.insert("grpc-encoding", "snappy".parse().unwrap());
        assert!(Encoding::of_headers(&headers).is_err());
        headers.insert("grpc-accept-encoding", "identity, zstd".parse().unwrap());
        assert!(Encoding::Zstd.accepted_by(&headers));
        assert!(!Encoding::Gzip.accepted_by(&headers));
    }
}
