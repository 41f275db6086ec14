//! Target `grpc_request`: the gRPC server's request-stream translator (`rdmarpc-grpc`'s
//! `server/upload.rs`, through `rdmarpc_grpc::fuzzing`), fed body chunks, window grants, the
//! server taking and consuming messages and the body's end, against a real account: the
//! messages handed over are the body's, in order, within the window; the account never
//! holds more than its limit, and nothing once all is gone; a failure is the body's own
//! or the account's.

use rdmarpc_grpc::fuzzing;

use crate::grpc_response::step;
use crate::mutate::Field;

/// The translator on `data` as a script.
pub fn grpc_request(data: &[u8]) {
    fuzzing::grpc_request(data);
}

/// Where the mutations write: the setting, each step's op and `n`, and the gRPC prefix
/// of each chunk (its compressed flag and length).
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = vec![Field::new(0, 1, (0..128).collect())];
    for (at, op, n) in fuzzing::request_steps(data) {
        fields.push(Field::new(at - 3, 1, vec![0, 1, 2, 3, 4]));
        if op == 0 {
            let real = data.len().saturating_sub(at).min(n) as u64;
            fields.push(Field::length(at - 2, 2, n as u64, real));
            fields.push(Field::new(at, 1, vec![0, 1, 2]));
            if let Some(len) = data.get(at + 1..at + 5) {
                let len = u32::from_be_bytes(len.try_into().expect("4 bytes"));
                let mut values =
                    crate::mutate::length_values(u64::from(len), real.saturating_sub(5));
                values.retain(|&v| v <= u64::from(u32::MAX));
                let swapped: Vec<u64> = values
                    .iter()
                    .map(|&v| u64::from((v as u32).swap_bytes()))
                    .collect();
                fields.push(Field::new(at + 1, 4, swapped));
            }
        } else {
            fields.push(Field::new(at - 2, 2, vec![0, 1, 5, 100, 4096, 65535]));
        }
    }
    fields
}

/// A gRPC message: its prefix (flag 0) and bytes.
fn message(bytes: &[u8]) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    m.extend_from_slice(bytes);
    m
}

/// Request streams: messages cut across chunks, the window, the server consuming, the end.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let body = [
        message(b"one"),
        message(&[2; 300]),
        message(b""),
        message(&[4; 5000]),
    ]
    .concat();
    let (a, b) = body.split_at(100);
    let flow = [
        step(0, 0, a),
        step(0, 0, b),
        step(2, 0, b""),
        step(1, 50, b""),
        step(2, 0, b""),
        step(3, 0, b""),
        step(1, 65535, b""),
        step(2, 0, b""),
        step(4, 0, b""),
    ]
    .concat();
    let tight = [
        step(0, 0, &body),
        step(1, 1, b""),
        step(2, 0, b""),
        step(0, 0, &body),
    ]
    .concat();
    vec![
        ("seed-stream".into(), [vec![0x28], flow.clone()].concat()),
        (
            "seed-tight-account".into(),
            [vec![0x20], tight.clone()].concat(),
        ),
        ("seed-small-max".into(), [vec![0x18], tight].concat()),
        ("seed-large-account".into(), [vec![0x2c], flow].concat()),
        ("seed-unary".into(), unary_seed(0x68)),
        ("seed-unary-gzip".into(), unary_seed(0x69)),
    ]
}

/// A unary body (setting bit 6): one message cut across chunks, then the end.
fn unary_seed(setting: u8) -> Vec<u8> {
    let body = message(&[9; 3000]);
    let (a, b) = body.split_at(1000);
    [vec![setting], step(0, 0, a), step(0, 0, b), step(4, 0, b"")].concat()
}
