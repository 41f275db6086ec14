//! [`Device`]: an opened RDMA device, shared by every connection that goes through it
//! (opening one is slow: the GID scan reads sysfs), with the completion queues they share.
//! Each connection allocates its own protection domain on it (`setup.rs`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::verbs::{CmId, Context, Result};

/// An opened device.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) context: Arc<Context>,
    /// The completion queues its connections share, per runtime (`completion/`).
    pub(crate) cqs: Mutex<Vec<crate::completion::PoolEntry>>,
}

/// The device, port and source GID of an rdma_cm id.
type CmKey = crate::verbs::Binding;

fn cm_cache() -> &'static Mutex<HashMap<CmKey, Arc<Device>>> {
    static CACHE: OnceLock<Mutex<HashMap<CmKey, Arc<Device>>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

impl Device {
    /// The device, port and GID an rdma_cm id is bound to (after address resolution, or
    /// on a connect request): a context of this process's own on it (`Context::for_cm`),
    /// opened once per device, port and GID and then shared.
    ///
    /// # Errors
    /// The id has no device yet, or opening or querying it fails.
    pub(crate) fn for_cm(id: &CmId) -> Result<Arc<Device>> {
        let key = id.binding()?;
        if let Some(device) = cm_cache().lock().get(&key) {
            return Ok(device.clone());
        }
        // Before this process registers anything.
        crate::verbs::ensure_fork_safety();
        let context = Arc::new(id.context()?);
        let choice = context.choice();
        tracing::info!(
            device = context.name(),
            port = choice.port,
            link_layer = %choice.link_layer,
            gid_index = choice.gid.index,
            gid = %choice.gid.gid,
            "opened RDMA device for rdma_cm"
        );
        let mut cache = cm_cache().lock();
        if let Some(device) = cache.get(&key) {
            return Ok(device.clone());
        }
        crate::events::watch(context.clone());
        crate::verbs::install_clock();
        let device = Arc::new(Device {
            context,
            cqs: Mutex::default(),
        });
        cache.insert(key, device.clone());
        Ok(device)
    }
}
