//! A response the transport cannot take for a reason of its own (an RDMA transport at
//! its locked-memory limit cannot pin a large response's buffer): the call is answered
//! with why, at once, and the connection serves the next call.

use bytes::{Bytes, BytesMut};

use super::tests::{code, next, request, TestService, BIG, SLEEP};
use crate::memory::{self, MemoryConnection};
use crate::transport::{Connection, TransportError};
use crate::{Code, Server, ServerConfig};

/// The server's end of a memory pair that cannot give a frame over `max` bytes memory.
struct Unpinned {
    inner: MemoryConnection,
    max: usize,
}

impl Connection for Unpinned {
    type SendBuf = BytesMut;
    type RecvBuf = Bytes;

    async fn alloc(&self, len: usize) -> Result<BytesMut, TransportError> {
        if len > self.max {
            return Err(TransportError::LockedMemory {
                needed: len as u64,
                left: 0,
                limit: 64 << 10,
            });
        }
        self.inner.alloc(len).await
    }
    async fn send(&self, frame: BytesMut) -> Result<(), TransportError> {
        self.inner.send(frame).await
    }
    async fn recv(&self) -> Result<Option<Bytes>, TransportError> {
        self.inner.recv().await
    }
    fn close(&self) {
        self.inner.close();
    }
    fn peer(&self) -> String {
        self.inner.peer()
    }
}

#[tokio::test]
async fn a_response_without_memory_fails_its_call_at_once_and_the_next_is_served() {
    let server = Server::builder()
        .add_service(TestService::default())
        .unwrap()
        .config(ServerConfig::default())
        .build();
    let (client, served) = memory::pair(1 << 20);
    let conn = Unpinned {
        inner: served,
        max: 10_000,
    };
    tokio::spawn(async move { server.serve_connection(conn).await });
    // No deadline: a response left unanswered would hang the test (`next` allows 10 s).
    request(&client, 1, BIG, 50_000, std::time::Duration::ZERO).await;
    let (header, message) = next(&client).await.expect("answered");
    assert_eq!(
        (header.call_id, code(&header)),
        (1, Code::ResourceExhausted)
    );
    let message = String::from_utf8_lossy(&message);
    assert!(message.contains("RLIMIT_MEMLOCK"), "{message}");
    request(&client, 2, SLEEP, 0, std::time::Duration::ZERO).await;
    let (header, _) = next(&client).await.expect("the connection goes on");
    assert_eq!((header.call_id, code(&header)), (2, Code::Ok));
}
