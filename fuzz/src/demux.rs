//! Targets `client_demux` and `server_demux`: the call demultiplexers of `rdmarpc-core`
//! (`rdmarpc_core::fuzzing`), driven by a script of frames against a unary call and calls
//! streaming each way, with every frame's outcome checked against the call protocol's
//! rules inside `rdmarpc_core::fuzzing` (the demultiplexers and their calls' state are
//! private to it). The client's is played twice, frame by frame and in runs, and both
//! plays must end the same way.

use rdmarpc_core::fuzzing::{self, CALLS, HEADER_AT};

use crate::frame::frame_fields;
use crate::mutate::Field;

/// The client's demultiplexer on `data` as a script.
pub fn client_demux(data: &[u8]) {
    fuzzing::client_demux(data);
}

/// The server's demultiplexer on `data` as a script.
pub fn server_demux(data: &[u8]) {
    fuzzing::server_demux(data);
}

/// Where the mutations write: the call kinds and the window, each step's selector and
/// length, and the fields of each step's frame.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = vec![
        Field::new(
            0,
            1,
            vec![0, 0b11_10_01_00, 0b01_01_01_01, 0b11_11_11_11, 0xe4],
        ),
        Field::new(1, 1, (0..8).collect()),
    ];
    for step in fuzzing::steps(data, &[0; CALLS]) {
        let selectors = (0..CALLS as u64).chain([0x40, 0x41, 0x42, 0x43, 0x80, 0xff]);
        fields.push(Field::new(step.at - 3, 1, selectors.collect()));
        let len = step.bytes.len() as u64;
        fields.push(Field::length(step.at - 2, 2, len, len));
        fields.extend(frame_fields(&data[..step.at + step.bytes.len()], step.at));
    }
    debug_assert!(fields.iter().all(|f| f.offset >= HEADER_AT || f.offset < 2));
    fields
}

/// The client target's seeds.
pub fn client_seeds() -> Vec<(String, Vec<u8>)> {
    fuzzing::client_seeds()
}

/// The server target's seeds.
pub fn server_seeds() -> Vec<(String, Vec<u8>)> {
    fuzzing::server_seeds()
}
