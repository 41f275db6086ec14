//! [`warn_once`]: a condition that repeats for every connection or message (a locked-memory
//! limit, a device node without access, a refused offer) is told at WARN once, with the
//! way out, and at DEBUG after that: the log says it without being flooded by it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// Logs `message` at WARN the first time `said` is set, at DEBUG after (one flag per
/// condition, and per side where a process may be client and server).
pub(crate) fn warn_once(said: &AtomicBool, message: fmt::Arguments<'_>) {
    if said.swap(true, Ordering::Relaxed) {
        tracing::debug!("{message}");
    } else {
        tracing::warn!("{message} (said once; then at debug)");
    }
}
