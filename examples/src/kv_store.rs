//! [`KvStore`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use rdmarpc_core::{BoxStream, Request, Response, Status};
use tokio::sync::broadcast;

use crate::kv::kv_server::Kv;
use crate::kv::*;

/// The message size limit the kv examples configure: values up to 64 MiB plus the key
/// and framing.
pub const KV_MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024 + 64 * 1024;

/// Entries a scan returns when the request sets no limit.
const DEFAULT_SCAN_LIMIT: usize = 1000;

/// Changes a watcher may fall behind before its watch ends.
pub const WATCH_BACKLOG: usize = 1024;
/// The largest value a watch event carries; larger ones are announced by size.
pub const WATCH_VALUE_MAX: usize = 64 * 1024;

/// An in-memory, ordered key-value store. Values are `Bytes`, kept as they arrived: a
/// large value is a slice of the frame that carried it (no copy on Put), and a Get of it
/// sends the same memory (no copy, no lock held while the reply is encoded).
#[derive(Debug, Clone)]
pub struct KvStore {
    inner: Arc<RwLock<Store>>,
    /// Every change, for watchers: a ring of [`WATCH_BACKLOG`] events (values of at most
    /// [`WATCH_VALUE_MAX`]), so watchers cost the store bounded memory however slow.
    changes: broadcast::Sender<WatchEvent>,
}

#[derive(Debug, Default)]
struct Store {
    entries: BTreeMap<String, Bytes>,
    revision: u64,
}

impl Default for KvStore {
    fn default() -> Self {
        KvStore {
            inner: Arc::default(),
            changes: broadcast::Sender::new(WATCH_BACKLOG),
        }
    }
}

impl KvStore {
    /// Records a change (under the store's write lock, so that revisions and the order
    /// of events agree).
    fn changed(&self, store: &mut Store, key: &str, value: Option<&Bytes>) {
        store.revision += 1;
        let size = value.map_or(0, Bytes::len);
        let event = WatchEvent {
            revision: store.revision,
            key: key.to_owned(),
            value: match value {
                Some(v) if v.len() <= WATCH_VALUE_MAX => v.clone(),
                _ => Bytes::new(),
            },
            deleted: value.is_none(),
            value_size: size as u64,
        };
        // No receivers is not an error: nobody watches.
        let _ = self.changes.send(event);
    }
}

impl Kv for KvStore {
    type WatchStream = BoxStream<WatchEvent>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let prefix = request.into_inner().prefix;
        let changes = self.changes.subscribe();
        let stream = futures_util::stream::unfold(Some(changes), move |changes| {
            let prefix = prefix.clone();
            async move {
                let mut changes = changes?;
                loop {
                    match changes.recv().await {
                        Ok(event) if event.key.starts_with(&prefix) => {
                            return Some((Ok(event), Some(changes)))
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            let status = Status::resource_exhausted(format!(
                                "the watcher fell {missed} changes behind the store; \
                                 scan, then watch again"
                            ));
                            return Some((Err(status), None));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutReply>, Status> {
        let PutRequest { key, value } = request.into_inner();
        if key.is_empty() {
            return Err(Status::invalid_argument("key must not be empty"));
        }
        let mut store = self.inner.write();
        self.changed(&mut store, &key, Some(&value));
        let replaced = store.entries.insert(key, value).is_some();
        Ok(Response::new(PutReply { replaced }))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetReply>, Status> {
        let key = request.into_inner().key;
        let value = self.inner.read().entries.get(&key).cloned();
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
        let mut store = self.inner.write();
        match store.entries.remove(&key) {
            Some(_) => {
                self.changed(&mut store, &key, None);
                Ok(Response::new(DeleteReply {}))
            }
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
        let store = self.inner.read();
        let mut matching = store
            .entries
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
