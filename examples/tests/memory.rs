//! The shared end-to-end suite over rdmarpc-core's in-memory transport.

mod suite;

use parking_lot::Mutex;
use rdmarpc_core::memory::{self, MemoryConnection, MemoryConnector};
use rdmarpc_core::{Channel, ClientConfig, Server};
use suite::*;

#[derive(Default)]
struct Memory {
    connector: Mutex<Option<MemoryConnector>>,
}

impl Harness for Memory {
    type Conn = MemoryConnection;

    async fn start(&self, server: Server) -> String {
        let (listener, connector) = memory::listener(BIG);
        *self.connector.lock() = Some(connector);
        tokio::spawn(async move { server.serve(listener).await });
        "memory".into()
    }

    async fn connect(&self, _addr: &str, max_message_size: usize) -> Channel<MemoryConnection> {
        let connector = self.connector.lock().clone().unwrap();
        let conn = connector.connect().await.unwrap();
        let mut config = ClientConfig::default();
        config.max_message_size(max_message_size);
        Channel::with_config(conn, config)
    }
}

#[tokio::test]
async fn thousand_concurrent_calls() {
    thousand_concurrent_calls_on_one_connection(Memory::default()).await;
}

#[tokio::test]
async fn kv_large_value_round_trip() {
    large_value_put_then_get(Memory::default(), 8 << 20).await;
}

#[tokio::test]
async fn deadline_exceeded() {
    deadline_fails_one_call_not_the_others(Memory::default()).await;
}

#[tokio::test]
async fn cancellation_reaches_the_handler() {
    dropping_the_call_cancels_the_handler(Memory::default()).await;
}

#[tokio::test]
async fn unknown_method_oversized_and_garbage_protobuf() {
    bad_requests_get_their_status(Memory::default()).await;
}

#[tokio::test]
async fn concurrency_limit() {
    concurrency_limit_is_respected(Memory::default()).await;
}

#[tokio::test]
async fn large_payloads_are_not_copied_and_stay_valid_while_held() {
    large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(
        Memory::default(),
        256 << 10,
        8,
        true,
    )
    .await;
    large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(
        Memory::default(),
        1 << 10,
        4,
        false,
    )
    .await;
}

#[tokio::test]
async fn interop_cases() {
    interop_cases_pass(Memory::default()).await;
}

#[tokio::test]
async fn slow_stream_reader() {
    a_slow_reader_does_not_stall_other_streams(Memory::default()).await;
}

#[tokio::test]
async fn cancelled_streams() {
    cancelled_streams_release_their_handlers(Memory::default()).await;
}

#[tokio::test]
async fn stream_deadline() {
    a_stream_past_its_deadline_ends_on_both_sides(Memory::default()).await;
}

#[tokio::test]
async fn kv_watch() {
    kv_watch_streams_changes_under_a_prefix(Memory::default()).await;
}

#[tokio::test]
async fn chat_room() {
    chat_members_see_each_others_posts(Memory::default()).await;
}

#[tokio::test]
async fn echo_chat() {
    echo_chat_answers_each_message_in_order(Memory::default()).await;
}

#[tokio::test]
async fn interceptor_requires_a_token() {
    an_interceptor_requires_a_token(Memory::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_layers() {
    tower_layers_hold(Memory::default()).await;
}
