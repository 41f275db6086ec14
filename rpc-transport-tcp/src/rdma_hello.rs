//! The first bytes of RDMA's side-channel handshake, as far as a TCP-only peer needs
//! them: a client that wants RDMA opens TCP to the server's port and sends a 64-byte
//! block starting with [`HELLO`]; a server that does not serve RDMA (built without it,
//! or without a device) answers with a [`NONE`] block and a reason, and the same socket
//! carries this TCP transport from there. `rdmarpc-transport-rdma` owns the rest (the offer
//! in the block, OKAY, READY).

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Socket;

/// Client hello: the first 8 bytes of an RDMA handshake.
pub const HELLO: &[u8; 8] = b"RDMAHELO";
/// Server refuses RDMA; the socket continues as TCP.
pub const NONE: &[u8; 8] = b"RDMANONE";
/// Size of a handshake block (HELLO, OKAY, NONE without its reason).
pub const BLOCK: usize = 64;
/// Longest NONE reason sent or accepted.
pub const MAX_REASON: usize = 1024;

/// Sends NONE with `reason` (cut at [`MAX_REASON`] bytes).
///
/// # Errors
/// The write's.
pub async fn refuse(stream: &mut Socket, reason: &str) -> std::io::Result<()> {
    let reason = &reason.as_bytes()[..reason.len().min(MAX_REASON)];
    let mut b = [0u8; BLOCK];
    b[0..8].copy_from_slice(NONE);
    b[8..12].copy_from_slice(&(reason.len() as u32).to_le_bytes());
    stream.write_all(&b).await?;
    stream.write_all(reason).await?;
    stream.flush().await
}

/// Reads the rest of a NONE (after its 64-byte `block`) and returns the reason.
///
/// # Errors
/// The read's.
pub async fn read_refusal(stream: &mut Socket, block: &[u8; BLOCK]) -> std::io::Result<String> {
    let len =
        (u32::from_le_bytes(block[8..12].try_into().expect("4 bytes")) as usize).min(MAX_REASON);
    let mut reason = vec![0u8; len];
    stream.read_exact(&mut reason).await?;
    Ok(String::from_utf8_lossy(&reason).into_owned())
}

/// On a server, after the first 8 bytes were [`HELLO`]: reads the rest of the client's
/// block and refuses RDMA with `reason`; the socket then carries TCP.
///
/// # Errors
/// The read's or the write's.
pub async fn refuse_hello(stream: &mut Socket, reason: &str) -> std::io::Result<()> {
    let mut rest = [0u8; BLOCK - 8];
    stream.read_exact(&mut rest).await?;
    refuse(stream, reason).await
}
