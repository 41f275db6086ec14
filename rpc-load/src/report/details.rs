//! ghz's `details`: one entry per call, `{"timestamp", "latency", "error", "status"}`,
//! serialized straight from the calls the run kept (no copy per call).

use std::time::{Duration, SystemTime};

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::machine::rfc3339_nanos;
use crate::stats::{code_name, Detail};

/// The calls of a run, as ghz's `details` (kept only for the formats that list calls,
/// up to [`crate::stats::MAX_DETAILS`]).
#[derive(Debug, Clone, Default)]
pub struct Details {
    /// The calls, in completion order.
    pub calls: Vec<Detail>,
    /// When the run started, by the wall clock.
    pub start: Option<SystemTime>,
}

impl Details {
    /// When `detail`'s call ended, by the wall clock (ghz's `timestamp`).
    pub fn timestamp(&self, detail: &Detail) -> SystemTime {
        self.start.unwrap_or(SystemTime::UNIX_EPOCH) + detail.at
    }
}

/// One entry of `details`.
struct Entry<'a> {
    timestamp: SystemTime,
    detail: &'a Detail,
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("timestamp", &rfc3339_nanos(self.timestamp))?;
        map.serialize_entry("latency", &nanos(self.detail.latency))?;
        map.serialize_entry("error", self.detail.error.as_deref().unwrap_or(""))?;
        map.serialize_entry("status", code_name(self.detail.code))?;
        map.end()
    }
}

impl Serialize for Details {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.calls.len()))?;
        for detail in &self.calls {
            seq.serialize_element(&Entry {
                timestamp: self.timestamp(detail),
                detail,
            })?;
        }
        seq.end()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
