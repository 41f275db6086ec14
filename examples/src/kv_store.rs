//! [`KvStore`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use rpc_core::{Request, Response, Status};

use crate::kv::kv_server::Kv;
use crate::kv::*;

/// The message size limit the kv examples configure: values up to 64 MiB plus the key
/// and framing.
pub const KV_MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024 + 64 * 1024;

/// Entries a scan returns when the request sets no limit.
const DEFAULT_SCAN_LIMIT: usize = 1000;

/// An in-memory, ordered key-value store. Values are `Bytes`, kept as they arrived: a
/// large value is a slice of the frame that carried it (no copy on Put), and a Get of it
/// sends the same memory (no copy, no lock held while the reply is encoded).
#[derive(Debug, Default, Clone)]
pub struct KvStore {
    entries: Arc<RwLock<BTreeMap<String, Bytes>>>,
}

impl Kv for KvStore {
    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutReply>, Status> {
        let PutRequest { key, value } = request.into_inner();
        if key.is_empty() {
            return Err(Status::invalid_argument("key must not be empty"));
        }
        let replaced = self.entries.write().insert(key, value).is_some();
        Ok(Response::new(PutReply { replaced }))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetReply>, Status> {
        let key = request.into_inner().key;
        let value = self.entries.read().get(&key).cloned();
        match value {
            Some(value) => Ok(Response::new(GetReply { value })),
            None => Err(Status::not_found(format!("no key {key:?}"))),
        }
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteReply>, Status> {
        let key = request.into_inner().key;
        match self.entries.write().remove(&key) {
            Some(_) => Ok(Response::new(DeleteReply {})),
            None => Err(Status::not_found(format!("no key {key:?}"))),
        }
    }

    async fn scan(&self, request: Request<ScanRequest>) -> Result<Response<ScanReply>, Status> {
        let ScanRequest {
            prefix,
            limit,
            keys_only,
        } = request.into_inner();
        let limit = if limit == 0 {
            DEFAULT_SCAN_LIMIT
        } else {
            limit as usize
        };
        let entries = self.entries.read();
        let mut matching = entries
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix));
        let mut reply = ScanReply::default();
        for (key, value) in matching.by_ref().take(limit) {
            reply.entries.push(Entry {
                key: key.clone(),
                value: if keys_only {
                    Bytes::new()
                } else {
                    value.clone()
                },
            });
        }
        reply.truncated = matching.next().is_some();
        Ok(Response::new(reply))
    }
}
