//! Whether this process may use the RDMA device nodes: `/dev/infiniband/rdma_cm` (every
//! connection's set-up) and the device's `/dev/infiniband/uverbsN`. `ibv_get_device_list`
//! reads sysfs, which a container usually sees without the nodes: a device can be listed
//! and still be unusable. Checked before anything is offered, so that `auto://` falls
//! back to TCP on the same socket; said once at WARN, with the way out.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use crate::verbs;

/// Where sysfs lists the verbs device nodes (`uverbsN/ibdev` names the device).
const VERBS_CLASS: &str = "/sys/class/infiniband_verbs";

/// Why rdma_cm could not be opened: for want of access to its node, that and the way
/// out (logged at WARN once per process), else the error.
pub(super) fn cm_unusable(e: verbs::Error) -> String {
    if e.no_access() {
        no_access(&e)
    } else {
        e.to_string()
    }
}

/// Opens `device`'s `/dev/infiniband/uverbsN` read-write and closes it again (cheap: no
/// device context is made). A node this process may not open, or that is not there, is
/// an error naming it and the way out (logged at WARN once per process); any other
/// failure is left for opening the device to report.
pub(super) fn device_node(device: &str) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(VERBS_CLASS) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let ibdev = std::fs::read_to_string(entry.path().join("ibdev")).unwrap_or_default();
        if ibdev.trim() != device {
            continue;
        }
        let node = Path::new("/dev/infiniband").join(entry.file_name());
        return match OpenOptions::new().read(true).write(true).open(&node) {
            Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::NotFound) => {
                Err(no_access(&format!("{}: {e}", node.display())))
            }
            _ => Ok(()),
        };
    }
    Ok(())
}

/// After rdma_cm could not bind an address (librdmacm opens the devices then, and says
/// `ENODEV` for one it may not open): where no device node of this host can be opened for
/// want of access, that and the way out (logged at WARN once per process).
pub(super) fn verbs_nodes() -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(VERBS_CLASS) else {
        return Ok(());
    };
    let mut refused = None;
    // `uverbsN` directories (the class also holds an `abi_version` file).
    let nodes = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("uverbs"));
    for entry in nodes {
        let node = Path::new("/dev/infiniband").join(entry.file_name());
        match OpenOptions::new().read(true).write(true).open(&node) {
            Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::NotFound) => {
                refused.get_or_insert(format!("{}: {e}", node.display()));
            }
            _ => return Ok(()),
        }
    }
    match refused {
        Some(what) => Err(no_access(&what)),
        None => Ok(()),
    }
}

/// The text of a node this process cannot use, logged at WARN the first time.
fn no_access(what: &dyn std::fmt::Display) -> String {
    static SAID: AtomicBool = AtomicBool::new(false);
    let text = format!(
        "no access to the RDMA device nodes ({what}): the user needs read-write access to \
         /dev/infiniband/rdma_cm and the device's /dev/infiniband/uverbs* (the nodes' \
         group, Docker's `--device /dev/infiniband/...`, or a Kubernetes RDMA device plugin)"
    );
    crate::warn_once::warn_once(&SAID, format_args!("{text}"));
    text
}
