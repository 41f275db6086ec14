//! Asynchronous device events (a queue pair or completion queue that failed outside any
//! work request, a port that went down, a device that died) fail the connections they
//! concern at once, rather than after their ping timeout.
//!
//! One thread per opened device waits on the context's event descriptor (a plain thread:
//! devices are opened once per process and outlive any one tokio runtime). Connections
//! register their queue pair number; entries of dropped connections are pruned.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::connection::Inner;
use crate::protocol::session::Close;
use crate::verbs::{AsyncEvent, Context};

/// Live connections by (device name, QP number).
type Registry = Mutex<HashMap<(String, u32), Weak<Inner>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// Registers a started connection for the events of `device` about QP `qp_num`.
pub(crate) fn register(device: &str, qp_num: u32, inner: &Arc<Inner>) {
    let mut map = registry().lock();
    if map.len() >= 64 && map.len().is_power_of_two() {
        map.retain(|_, w| w.strong_count() > 0);
    }
    map.insert((device.to_owned(), qp_num), Arc::downgrade(inner));
}

/// Starts the event thread of an opened device.
pub(crate) fn watch(context: Arc<Context>) {
    let name = context.name().to_owned();
    let spawned = std::thread::Builder::new()
        .name(format!("rdma-events-{name}"))
        .spawn(move || loop {
            match context.wait_async_event(Duration::from_secs(1)) {
                Ok(false) => continue,
                Ok(true) => match context.next_async_event() {
                    Ok(event) => dispatch(&name, event),
                    Err(e) => {
                        tracing::warn!(device = %name, "reading an asynchronous event failed: {e}");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                },
                Err(e) => {
                    tracing::warn!(device = %name, "waiting for asynchronous events failed: {e}; not watching any more");
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the asynchronous event thread: {e}");
    }
}

/// What one event does to the registered connections.
fn dispatch(device: &str, event: AsyncEvent) {
    let affected: Vec<Arc<Inner>> = {
        let map = registry().lock();
        let on_device = map
            .iter()
            .filter(|((d, _), _)| d == device)
            .filter_map(|(key, w)| w.upgrade().map(|inner| (key.1, inner)));
        match event {
            AsyncEvent::QueuePair { qp_num, .. } => on_device
                .filter(|(qp, _)| *qp == qp_num)
                .map(|(_, inner)| inner)
                .collect(),
            AsyncEvent::CompletionQueue { cq } => on_device
                .filter(|(_, inner)| inner.completion.cq().as_ptr() as usize == cq)
                .map(|(_, inner)| inner)
                .collect(),
            AsyncEvent::PortDown(_) | AsyncEvent::DeviceFatal => {
                on_device.map(|(_, inner)| inner).collect()
            }
            AsyncEvent::PortUp(_) | AsyncEvent::Other(_) => Vec::new(),
        }
    };
    let reason = match event {
        AsyncEvent::QueuePair { what, .. } => format!("{what} (asynchronous event)"),
        AsyncEvent::CompletionQueue { .. } => "completion queue error (asynchronous event)".into(),
        AsyncEvent::PortDown(port) => {
            format!("RDMA port {port} of {device} went down (asynchronous event)")
        }
        AsyncEvent::DeviceFatal => format!("RDMA device {device} failed (asynchronous event)"),
        AsyncEvent::PortUp(port) => {
            tracing::info!(device, port, "RDMA port active");
            return;
        }
        AsyncEvent::Other(kind) => {
            tracing::debug!(device, kind, "asynchronous event");
            return;
        }
    };
    tracing::warn!(device, connections = affected.len(), "{reason}");
    for inner in affected {
        inner.fail(Close::Failed(reason.clone()));
    }
}
