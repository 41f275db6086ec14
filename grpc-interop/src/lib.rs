//! The gRPC interop test cases (grpc/grpc `doc/interop-test-descriptions.md`) driven by
//! tonic's generated client, so that a standard gRPC implementation checks this
//! framework's server: `run_case(channel, "large_unary")`.

use std::time::Duration;

use futures_util::StreamExt;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::Channel;
use tonic::{Code, Request};

/// The generated messages and clients of `grpc.testing`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod grpc_testing {
    tonic::include_proto!("grpc.testing");
}

mod server;
pub use server::{EchoMetadata, TonicInteropService};

use grpc_testing::test_service_client::TestServiceClient;
use grpc_testing::unimplemented_service_client::UnimplementedServiceClient;
use grpc_testing::*;

/// The cases, in the spec's order.
pub const CASES: &[&str] = &[
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "status_code_and_message",
    "special_status_message",
    "custom_metadata",
    "unimplemented_method",
    "unimplemented_service",
    "cancel_after_begin",
    "cancel_after_first_response",
    "timeout_on_sleeping_server",
];

const PING_PONG: [(i32, usize); 4] = [(31415, 27182), (9, 8), (2653, 1828), (58979, 45904)];

fn zeros(size: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0; size],
    })
}

fn body_len(payload: &Option<Payload>) -> usize {
    payload.as_ref().map_or(0, |p| p.body.len())
}

fn output_request(sizes: &[(i32, usize)]) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: sizes
            .iter()
            .map(|&(size, _)| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        payload: sizes.first().and_then(|&(_, len)| zeros(len)),
        ..Default::default()
    }
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn failed(call: &'static str) -> impl Fn(tonic::Status) -> String {
    move |status| format!("{call}: {} {:?}", status.code(), status.message())
}

/// A request stream fed from a channel, for cases that send step by step.
fn request_channel<T: Send + 'static>() -> (
    tokio::sync::mpsc::Sender<T>,
    impl futures_util::Stream<Item = T> + Send + 'static,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (tx, stream)
}

/// Runs interop case `case` over `channel`.
///
/// # Errors
/// What failed, for the case's report line.
pub async fn run_case(channel: Channel, case: &str) -> Result<(), String> {
    let mut client = TestServiceClient::new(channel.clone()).max_decoding_message_size(4 << 20);
    match case {
        "empty_unary" => empty_unary(&mut client).await,
        "large_unary" => large_unary(&mut client).await,
        "client_streaming" => client_streaming(&mut client).await,
        "server_streaming" => server_streaming(&mut client).await,
        "ping_pong" => ping_pong(&mut client).await,
        "empty_stream" => empty_stream(&mut client).await,
        "status_code_and_message" => echoed_status(&mut client, "test status message").await,
        "special_status_message" => special_status_message(&mut client).await,
        "custom_metadata" => custom_metadata(&mut client).await,
        "unimplemented_method" => unimplemented_method(&mut client).await,
        "unimplemented_service" => unimplemented_service(&channel).await,
        "cancel_after_begin" => cancel_after_begin(&mut client).await,
        "cancel_after_first_response" => cancel_after_first_response(&mut client).await,
        "timeout_on_sleeping_server" => timeout_on_sleeping_server(&mut client).await,
        other => Err(format!("unknown test case {other:?}")),
    }
}

/// The `empty_unary` case.
async fn empty_unary(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    client
        .empty_call(Empty {})
        .await
        .map_err(failed("EmptyCall"))?;
    Ok(())
}

/// The `large_unary` case.
async fn large_unary(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let response = client
        .unary_call(SimpleRequest {
            response_size: 314_159,
            payload: zeros(271_828),
            ..Default::default()
        })
        .await
        .map_err(failed("UnaryCall"))?
        .into_inner();
    let len = body_len(&response.payload);
    check(len == 314_159, || {
        format!("response of {len} bytes, not 314159")
    })
}

/// The `client_streaming` case.
async fn client_streaming(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let sizes = [27_182, 8, 1_828, 45_904];
    let requests = futures_util::stream::iter(sizes.map(|size| StreamingInputCallRequest {
        payload: zeros(size),
        ..Default::default()
    }));
    let response = client
        .streaming_input_call(requests)
        .await
        .map_err(failed("StreamingInputCall"))?
        .into_inner();
    check(response.aggregated_payload_size == 74_922, || {
        format!(
            "aggregated size {}, not 74922",
            response.aggregated_payload_size
        )
    })
}

/// The `server_streaming` case.
async fn server_streaming(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let sizes = [31_415, 9, 2_653, 58_979];
    let request = StreamingOutputCallRequest {
        response_parameters: sizes
            .iter()
            .map(|&size| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut stream = client
        .streaming_output_call(request)
        .await
        .map_err(failed("StreamingOutputCall"))?
        .into_inner();
    let mut got = Vec::new();
    while let Some(response) = stream.message().await.map_err(failed("stream"))? {
        got.push(body_len(&response.payload) as i32);
    }
    check(got == sizes, || format!("sizes {got:?}, not {sizes:?}"))
}

/// The `ping_pong` case.
async fn ping_pong(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let (tx, requests) = request_channel();
    tx.send(output_request(&PING_PONG[..1]))
        .await
        .map_err(|_| "closed")?;
    let mut responses = client
        .full_duplex_call(requests)
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    for (i, &(size, _)) in PING_PONG.iter().enumerate() {
        if i > 0 {
            tx.send(output_request(&PING_PONG[i..=i]))
                .await
                .map_err(|_| "closed")?;
        }
        let response = responses
            .message()
            .await
            .map_err(failed("stream"))?
            .ok_or_else(|| format!("stream ended before response {i}"))?;
        let len = body_len(&response.payload);
        check(len == size as usize, || {
            format!("response {i}: {len} bytes, not {size}")
        })?;
    }
    drop(tx);
    let end = responses.message().await.map_err(failed("end"))?;
    check(end.is_none(), || "a response after the last request".into())
}

/// The `empty_stream` case.
async fn empty_stream(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let mut responses = client
        .full_duplex_call(futures_util::stream::empty())
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    let first = responses.message().await.map_err(failed("stream"))?;
    check(first.is_none(), || "a response to no request".into())
}

/// The `special_status_message` case.
async fn special_status_message(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let message = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n";
    echoed_status(client, message).await
}

/// The `unimplemented_method` case.
async fn unimplemented_method(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let status = client
        .unimplemented_call(Empty {})
        .await
        .err()
        .ok_or("UnimplementedCall succeeded")?;
    check(status.code() == Code::Unimplemented, || {
        format!("{status:?}")
    })
}

/// The `unimplemented_service` case.
async fn unimplemented_service(channel: &Channel) -> Result<(), String> {
    let status = UnimplementedServiceClient::new(channel.clone())
        .unimplemented_call(Empty {})
        .await
        .err()
        .ok_or("UnimplementedService succeeded")?;
    check(status.code() == Code::Unimplemented, || {
        format!("{status:?}")
    })
}

/// The `cancel_after_begin` case.
async fn cancel_after_begin(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let (tx, requests) = request_channel::<StreamingInputCallRequest>();
    let mut call_client = client.clone();
    let call = tokio::spawn(async move { call_client.streaming_input_call(requests).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    call.abort();
    let outcome = call.await;
    check(outcome.is_err(), || {
        format!("the call completed: {outcome:?}")
    })?;
    drop(tx);
    client
        .empty_call(Empty {})
        .await
        .map_err(failed("EmptyCall after"))?;
    Ok(())
}

/// The `cancel_after_first_response` case.
async fn cancel_after_first_response(
    client: &mut TestServiceClient<Channel>,
) -> Result<(), String> {
    let (tx, requests) = request_channel();
    tx.send(output_request(&PING_PONG[..1]))
        .await
        .map_err(|_| "closed")?;
    let mut responses = client
        .full_duplex_call(requests)
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    let first = responses
        .message()
        .await
        .map_err(failed("stream"))?
        .ok_or("none")?;
    check(body_len(&first.payload) == 31_415, || {
        "first response size".into()
    })?;
    drop(responses);
    drop(tx);
    client
        .empty_call(Empty {})
        .await
        .map_err(failed("EmptyCall after"))?;
    Ok(())
}

/// The `timeout_on_sleeping_server` case.
async fn timeout_on_sleeping_server(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    let (tx, requests) = request_channel();
    tx.send(StreamingOutputCallRequest {
        payload: zeros(27_182),
        ..Default::default()
    })
    .await
    .map_err(|_| "closed")?;
    let mut request = Request::new(requests);
    request.set_timeout(Duration::from_millis(1));
    let outcome = match client.full_duplex_call(request).await {
        Ok(response) => response.into_inner().message().await.map(|_| ()),
        Err(status) => Err(status),
    };
    drop(tx);
    match outcome {
        Err(status) if status.code() == Code::DeadlineExceeded => Ok(()),
        // tonic's own timer, when it fires before the server's answer arrives (a
        // loaded machine), ends the call with CANCELLED "Timeout expired".
        Err(status)
            if status.code() == Code::Cancelled && status.message() == "Timeout expired" =>
        {
            Ok(())
        }
        other => Err(format!("{other:?}, not DEADLINE_EXCEEDED")),
    }
}

async fn echoed_status(
    client: &mut TestServiceClient<Channel>,
    message: &str,
) -> Result<(), String> {
    let echo = Some(EchoStatus {
        code: 2,
        message: message.into(),
    });
    let status = client
        .unary_call(SimpleRequest {
            response_status: echo.clone(),
            ..Default::default()
        })
        .await
        .err()
        .ok_or("UnaryCall succeeded")?;
    check(
        status.code() == Code::Unknown && status.message() == message,
        || format!("UnaryCall: {} {:?}", status.code(), status.message()),
    )?;
    let request = StreamingOutputCallRequest {
        response_status: echo,
        ..Default::default()
    };
    let outcome = match client
        .full_duplex_call(futures_util::stream::iter([request]))
        .await
    {
        Ok(response) => response.into_inner().message().await.map(|_| ()),
        Err(status) => Err(status),
    };
    match outcome {
        Err(status) if status.code() == Code::Unknown && status.message() == message => Ok(()),
        other => Err(format!("FullDuplexCall: {other:?}")),
    }
}

async fn custom_metadata(client: &mut TestServiceClient<Channel>) -> Result<(), String> {
    const INITIAL: &str = "test_initial_metadata_value";
    let trailing = [0xab_u8, 0xab, 0xab];
    let with_metadata = |metadata: &mut MetadataMap| {
        metadata.insert("x-grpc-test-echo-initial", INITIAL.parse().unwrap());
        metadata.insert_bin(
            "x-grpc-test-echo-trailing-bin",
            MetadataValue::from_bytes(&trailing),
        );
    };
    let mut request = Request::new(SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..Default::default()
    });
    with_metadata(request.metadata_mut());
    let response = client
        .unary_call(request)
        .await
        .map_err(failed("UnaryCall"))?;
    // tonic merges a unary call's trailers into its metadata.
    let metadata = response.metadata();
    check(
        metadata
            .get("x-grpc-test-echo-initial")
            .is_some_and(|v| v == INITIAL),
        || format!("UnaryCall initial metadata: {metadata:?}"),
    )?;
    let echoed = metadata
        .get_bin("x-grpc-test-echo-trailing-bin")
        .map(|v| v.to_bytes());
    check(matches!(&echoed, Some(Ok(b)) if b[..] == trailing), || {
        format!("UnaryCall trailing metadata: {metadata:?}")
    })?;
    let mut request = Request::new(futures_util::stream::iter([output_request(&[(
        314_159, 271_828,
    )])]));
    with_metadata(request.metadata_mut());
    let response = client
        .full_duplex_call(request)
        .await
        .map_err(failed("FullDuplexCall"))?;
    check(
        response
            .metadata()
            .get("x-grpc-test-echo-initial")
            .is_some_and(|v| v == INITIAL),
        || format!("FullDuplexCall initial metadata: {:?}", response.metadata()),
    )?;
    let mut responses = response.into_inner();
    while responses
        .next()
        .await
        .transpose()
        .map_err(failed("stream"))?
        .is_some()
    {}
    let trailers = responses
        .trailers()
        .await
        .map_err(failed("trailers"))?
        .unwrap_or_default();
    let echoed = trailers
        .get_bin("x-grpc-test-echo-trailing-bin")
        .map(|v| v.to_bytes());
    check(matches!(&echoed, Some(Ok(b)) if b[..] == trailing), || {
        format!("FullDuplexCall trailers: {trailers:?}")
    })
}
