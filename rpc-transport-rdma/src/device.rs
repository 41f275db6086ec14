//! [`Device`]: an opened RDMA device, shared by every connection that goes through it
//! (opening one is slow: the GID scan reads sysfs), with the completion queues they share.
//! Each connection allocates its own protection domain on it (`setup.rs`).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::verbs::{Context, Result};

/// An opened device.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) context: Arc<Context>,
    /// The completion queues its connections share, per runtime (`completion/`).
    pub(crate) cqs: Mutex<Vec<crate::completion::PoolEntry>>,
}

type Key = (Option<String>, Option<Ipv4Addr>);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Device>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Device>>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

impl Device {
    /// The device named `name`, or else the one that owns `local_ip`; opened once per
    /// process and then shared.
    ///
    /// # Errors
    /// No RDMA on this host, no device for the address, or a verbs failure.
    pub(crate) fn get(name: Option<&str>, local_ip: Option<Ipv4Addr>) -> Result<Arc<Device>> {
        let key = (name.map(str::to_owned), local_ip);
        if let Some(device) = cache().lock().get(&key) {
            return Ok(device.clone());
        }
        let context = Arc::new(Context::open(name, local_ip)?);
        tracing::info!(
            device = context.name(),
            gid_index = context.gid_index(),
            ?local_ip,
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
