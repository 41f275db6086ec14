//! Buffers for large frames, recycled across frames and connections of the process.
//!
//! A large frame is read into a buffer of its own, which becomes the frame's `Bytes` and
//! may be kept by the application for as long as it likes. Freed to the allocator, a
//! buffer of a megabyte goes back to the kernel, and the next one takes a page fault per
//! 4 KiB as the kernel writes into it (measured: a third of the server's CPU at 1 MiB
//! echo). So a dropped frame's buffer returns here, up to [`IDLE_MAX`] bytes of idle
//! buffers, and the next large frame reuses it with its pages already in place.

use bytes::Bytes;
use parking_lot::Mutex;

/// Smallest buffer class, bytes.
const MIN_CLASS: usize = 32 * 1024;

/// Idle buffers kept for reuse at most, bytes, across the process.
const IDLE_MAX: usize = 32 << 20;

/// Idle buffers by class (index = log2(class / MIN_CLASS)), and their total size.
static IDLE: Mutex<(Vec<Vec<Vec<u8>>>, usize)> = Mutex::new((Vec::new(), 0));

/// An empty buffer with room for at least `len` bytes: an idle one of the right class,
/// or a new one.
pub(crate) fn take(len: usize) -> Vec<u8> {
    let class = class_of(len);
    let reused = {
        let mut idle = IDLE.lock();
        let found = idle.0.get_mut(class_index(class)).and_then(Vec::pop);
        if found.is_some() {
            idle.1 -= class;
        }
        found
    };
    reused.unwrap_or_else(|| Vec::with_capacity(class))
}

/// `buf` (one of [`take`]'s) as a frame: `Bytes` whose memory returns to the idle buffers
/// when the last slice of it is dropped.
pub(crate) fn into_bytes(buf: Vec<u8>) -> Bytes {
    Bytes::from_owner(Recycled(buf))
}

/// A frame's buffer; back to the idle buffers when dropped.
struct Recycled(Vec<u8>);

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        let class = buf.capacity();
        if !class.is_power_of_two() || class < MIN_CLASS {
            return;
        }
        buf.clear();
        let mut idle = IDLE.lock();
        if idle.1 + class <= IDLE_MAX {
            let index = class_index(class);
            if idle.0.len() <= index {
                idle.0.resize_with(index + 1, Vec::new);
            }
            idle.0[index].push(buf);
            idle.1 += class;
        }
    }
}

/// The class (buffer size) serving `len` bytes.
pub(crate) fn class_of(len: usize) -> usize {
    len.max(MIN_CLASS).next_power_of_two()
}

fn class_index(class: usize) -> usize {
    (class / MIN_CLASS).trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_frame_buffer_is_reused_with_its_memory() {
        let mut buf = take(100_000);
        assert!(buf.capacity() >= 100_000);
        buf.extend_from_slice(&[7; 100_000]);
        let frame = into_bytes(buf);
        let kept = frame.slice(10..20);
        let address = frame.as_ptr();
        drop(frame);
        // Still held through the slice: not back yet, and intact.
        assert_eq!(&kept[..], &[7; 10]);
        drop(kept);
        // Other tests take buffers concurrently: look for ours among a few.
        let taken: Vec<Vec<u8>> = (0..8).map(|_| take(100_000)).collect();
        assert!(taken.iter().any(|b| b.as_ptr() == address && b.is_empty()));
    }

    #[test]
    fn classes_are_powers_of_two() {
        assert_eq!(class_of(1), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS + 1), 2 * MIN_CLASS);
        assert_eq!(class_index(MIN_CLASS), 0);
        assert_eq!(class_index(8 * MIN_CLASS), 3);
    }
}
