//! Entry points for the fuzz targets only (the `rpc-fuzz` crate in `fuzz/`): the
//! client's and the server's call demultiplexers, which are private, driven by a script
//! of frames against calls of each kind, with their invariants checked. Hidden from the
//! docs and not part of the crate's API; nothing else may use them.
//!
//! A script: byte 0 gives the kinds of four calls (two bits each), byte 1 the receive
//! window, then steps of `[selector u8][length u16 LE][length bytes]`. Unless the
//! selector's bit 7 is set, a step's bytes get the call id of call `selector & 3`
//! written into their header (so that frames reach live calls); selector `0xff` with no
//! bytes reads every stream (granting window back). On the client, bit 6 adds the frame
//! to a run, handed over with the next step that does not set it.

mod client;
mod script;
mod server;

pub use self::client::{client_demux, seeds as client_seeds};
pub use self::script::{op_steps, op_steps_with, steps, Step, CALLS, HEADER_AT};
pub use self::server::{seeds as server_seeds, server_demux};
