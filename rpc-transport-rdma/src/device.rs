//! [`Device`]: an opened RDMA device, shared by every connection that goes through it
//! (opening one is slow: the GID scan reads sysfs), with the completion queues they share.
//! Each connection allocates its own protection domain on it (`setup.rs`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::fabric::Wanted;
use crate::verbs::{Context, Result};

/// An opened device.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) context: Arc<Context>,
    /// The completion queues its connections share, per runtime (`completion/`).
    pub(crate) cqs: Mutex<Vec<crate::completion::PoolEntry>>,
}

/// The device, port and GID index named, and the local address.
type Key = (Option<String>, Option<u8>, Option<u8>, Option<IpAddr>);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Device>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Device>>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

impl Device {
    /// The device, port and GID for `wanted` (see `Context::open`); opened once per
    /// process and then shared.
    ///
    /// # Errors
    /// No RDMA on this host, no usable device, port or GID (naming which), or a verbs
    /// failure.
    pub(crate) fn get(wanted: &Wanted<'_>) -> Result<Arc<Device>> {
        let key = (
            wanted.device.map(str::to_owned),
            wanted.port,
            wanted.gid_index,
            wanted.local,
        );
        if let Some(device) = cache().lock().get(&key) {
            return Ok(device.clone());
        }
        let context = Arc::new(Context::open(wanted)?);
        let choice = context.choice();
        tracing::info!(
            device = context.name(),
            port = choice.port,
            link_layer = %choice.link_layer,
            gid_index = choice.gid.index,
            gid = %choice.gid.gid,
            local = ?wanted.local,
            "opened RDMA device"
        );
        let mut cache = cache().lock();
        if let Some(device) = cache.get(&key) {
            return Ok(device.clone()); // opened meanwhile by another thread
        }
        crate::events::watch(context.clone());
        let device = Arc::new(Device {
            context,
            cqs: Mutex::default(),
        });
        cache.insert(key, device.clone());
        Ok(device)
    }
}
