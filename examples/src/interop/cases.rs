//! The interop cases, each a function, run by [`run_case`] with the generated clients.

use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use rpc_core::{Code, Connection, Metadata, Request, Status};

use super::service::{ECHO_INITIAL, ECHO_TRAILING, ZEROS};
use crate::grpc_testing::test_service_client::TestServiceClient;
use crate::grpc_testing::unimplemented_service_client::UnimplementedServiceClient;
use crate::grpc_testing::{
    EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest, StreamingInputCallRequest,
    StreamingOutputCallRequest,
};

/// The cases [`run_case`] knows, in the specification's order.
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

/// The clients the cases use, on one channel.
#[derive(Debug, Clone)]
pub struct InteropClients<C: Connection> {
    /// `grpc.testing.TestService`.
    pub test: TestServiceClient<C>,
    /// `grpc.testing.UnimplementedService` (which the server does not register).
    pub unimplemented: UnimplementedServiceClient<C>,
}

impl<C: Connection> InteropClients<C> {
    /// Both clients on `channel`.
    pub fn new(channel: rpc_core::Channel<C>) -> Self {
        InteropClients {
            test: TestServiceClient::new(channel.clone()),
            unimplemented: UnimplementedServiceClient::new(channel),
        }
    }
}

/// Why a case failed.
pub type CaseError = String;

pub(super) fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), CaseError> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

pub(super) fn status_err(what: &str) -> impl FnOnce(Status) -> CaseError + '_ {
    move |s| format!("{what}: {} {}", s.code(), s.message())
}

pub(super) fn zeros(size: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: Bytes::from_static(&ZEROS[..size]),
    })
}

pub(super) fn body_len(payload: &Option<Payload>) -> usize {
    payload.as_ref().map_or(0, |p| p.body.len())
}

pub(super) fn output_request(sizes: &[(i32, usize)]) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: sizes
            .iter()
            .map(|&(size, _)| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        payload: sizes.first().and_then(|&(_, request)| zeros(request)),
        ..Default::default()
    }
}

/// A request stream fed by hand: messages sent on the sender go out in order; dropping
/// the sender half-closes.
pub fn request_channel<T: Send + 'static>() -> (
    tokio::sync::mpsc::Sender<T>,
    impl Stream<Item = T> + Send + 'static,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    (
        tx,
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)),
    )
}

/// The ping-pong sizes of the specification: (response size, request payload size).
pub(super) const PING_PONG: [(i32, usize); 4] =
    [(31415, 27182), (9, 8), (2653, 1828), (58979, 45904)];

/// Runs interop case `case` with `clients`.
///
/// # Errors
/// What failed, for the case's report line.
pub async fn run_case<C: Connection>(
    clients: &InteropClients<C>,
    case: &str,
) -> Result<(), CaseError> {
    match case {
        "empty_unary" => empty_unary(clients).await,
        "large_unary" => large_unary(clients).await,
        "client_streaming" => client_streaming(clients).await,
        "server_streaming" => server_streaming(clients).await,
        "ping_pong" => ping_pong(clients).await,
        "empty_stream" => empty_stream(clients).await,
        "status_code_and_message" => status_code_and_message(clients).await,
        "special_status_message" => special_status_message(clients).await,
        "custom_metadata" => custom_metadata(&clients.test).await,
        "unimplemented_method" => unimplemented_method(clients).await,
        "unimplemented_service" => unimplemented_service(clients).await,
        "cancel_after_begin" => cancel_after_begin(clients).await,
        "cancel_after_first_response" => cancel_after_first_response(clients).await,
        "timeout_on_sleeping_server" => timeout_on_sleeping_server(clients).await,
        other => Err(format!("unknown test case {other:?}")),
    }
}

/// The `empty_unary` case.
pub(super) async fn empty_unary<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    client
        .empty_call(Empty {})
        .await
        .map_err(status_err("EmptyCall"))?;
    Ok(())
}

/// The `large_unary` case.
pub(super) async fn large_unary<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let response = client
        .unary_call(SimpleRequest {
            response_size: 314_159,
            payload: zeros(271_828),
            ..Default::default()
        })
        .await
        .map_err(status_err("UnaryCall"))?
        .into_inner();
    let len = body_len(&response.payload);
    check(len == 314_159, || {
        format!("response payload of {len} bytes, not 314159")
    })?;
    check(
        response.payload.unwrap().body.iter().all(|b| *b == 0),
        || "response payload is not zeros".into(),
    )
}

/// The `client_streaming` case.
pub(super) async fn client_streaming<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let sizes = [27_182, 8, 1_828, 45_904];
    let requests = futures_util::stream::iter(sizes.map(|size| StreamingInputCallRequest {
        payload: zeros(size),
        ..Default::default()
    }));
    let response = client
        .streaming_input_call(requests)
        .await
        .map_err(status_err("StreamingInputCall"))?
        .into_inner();
    check(response.aggregated_payload_size == 74_922, || {
        format!(
            "aggregated size {}, not 74922",
            response.aggregated_payload_size
        )
    })
}

/// The `server_streaming` case.
pub(super) async fn server_streaming<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
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
        .map_err(status_err("StreamingOutputCall"))?
        .into_inner();
    let mut got = Vec::new();
    while let Some(response) = stream
        .message()
        .await
        .map_err(status_err("StreamingOutputCall stream"))?
    {
        got.push(body_len(&response.payload) as i32);
    }
    check(got == sizes, || {
        format!("response sizes {got:?}, not {sizes:?}")
    })
}

/// The `ping_pong` case.
pub(super) async fn ping_pong<C: Connection>(clients: &InteropClients<C>) -> Result<(), CaseError> {
    let client = &clients.test;
    let (tx, requests) = request_channel();
    tx.send(output_request(&PING_PONG[..1]))
        .await
        .map_err(|_| "request stream closed")?;
    let mut responses = client
        .full_duplex_call(requests)
        .await
        .map_err(status_err("FullDuplexCall"))?
        .into_inner();
    for (i, &(size, _)) in PING_PONG.iter().enumerate() {
        if i > 0 {
            tx.send(output_request(&PING_PONG[i..=i]))
                .await
                .map_err(|_| "request stream closed")?;
        }
        let response = responses
            .message()
            .await
            .map_err(status_err("FullDuplexCall stream"))?
            .ok_or_else(|| format!("stream ended before response {i}"))?;
        let len = body_len(&response.payload);
        check(len == size as usize, || {
            format!("response {i} of {len} bytes, not {size}")
        })?;
    }
    drop(tx);
    let end = responses
        .message()
        .await
        .map_err(status_err("FullDuplexCall end"))?;
    check(end.is_none(), || "a response after the last request".into())
}

/// The `empty_stream` case.
pub(super) async fn empty_stream<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let mut responses = client
        .full_duplex_call(futures_util::stream::empty())
        .await
        .map_err(status_err("FullDuplexCall"))?
        .into_inner();
    let first = responses
        .message()
        .await
        .map_err(status_err("FullDuplexCall stream"))?;
    check(first.is_none(), || "a response to no request".into())
}

/// The `status_code_and_message` case.
pub(super) async fn status_code_and_message<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let message = "test status message";
    expect_echoed_status(client, 2, message).await
}

/// The `special_status_message` case.
pub(super) async fn special_status_message<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let message = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n";
    expect_echoed_status(client, 2, message).await
}

/// The `unimplemented_method` case.
pub(super) async fn unimplemented_method<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let status = client
        .unimplemented_call(Empty {})
        .await
        .err()
        .ok_or("UnimplementedCall succeeded")?;
    check(status.code() == Code::Unimplemented, || {
        format!("status {}, not UNIMPLEMENTED", status.code())
    })
}

/// The `unimplemented_service` case.
pub(super) async fn unimplemented_service<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let status = clients
        .unimplemented
        .unimplemented_call(Empty {})
        .await
        .err()
        .ok_or("UnimplementedService.UnimplementedCall succeeded")?;
    check(status.code() == Code::Unimplemented, || {
        format!("status {}, not UNIMPLEMENTED", status.code())
    })
}

/// The `cancel_after_begin` case.
pub(super) async fn cancel_after_begin<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    // A client stream that sends nothing, cancelled (dropped) once started; the
    // call must not have completed, and the channel must go on working.
    let (tx, requests) = request_channel::<StreamingInputCallRequest>();
    let call = client.streaming_input_call(requests);
    let outcome = tokio::time::timeout(Duration::from_millis(50), call).await;
    check(outcome.is_err(), || {
        format!("the call completed: {outcome:?}")
    })?;
    drop(tx);
    client
        .empty_call(Empty {})
        .await
        .map_err(status_err("EmptyCall after the cancel"))?;
    Ok(())
}

/// The `cancel_after_first_response` case.
pub(super) async fn cancel_after_first_response<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let (tx, requests) = request_channel();
    tx.send(output_request(&PING_PONG[..1]))
        .await
        .map_err(|_| "request stream closed")?;
    let mut responses = client
        .full_duplex_call(requests)
        .await
        .map_err(status_err("FullDuplexCall"))?
        .into_inner();
    let first = responses
        .message()
        .await
        .map_err(status_err("FullDuplexCall stream"))?
        .ok_or("no first response")?;
    check(body_len(&first.payload) == 31_415, || {
        "first response size".into()
    })?;
    // Cancel: drop the response stream while the request stream is still open.
    drop(responses);
    let sent = tx.send(output_request(&PING_PONG[1..2])).await;
    drop(sent);
    client
        .empty_call(Empty {})
        .await
        .map_err(status_err("EmptyCall after the cancel"))?;
    Ok(())
}

/// The `timeout_on_sleeping_server` case.
pub(super) async fn timeout_on_sleeping_server<C: Connection>(
    clients: &InteropClients<C>,
) -> Result<(), CaseError> {
    let client = &clients.test;
    let (tx, requests) = request_channel();
    tx.send(StreamingOutputCallRequest {
        payload: zeros(27_182),
        ..Default::default()
    })
    .await
    .map_err(|_| "request stream closed")?;
    let mut request = Request::new(requests);
    request.set_timeout(Duration::from_millis(1));
    let outcome = match client.full_duplex_call(request).await {
        Ok(response) => response.into_inner().message().await.map(|_| ()),
        Err(status) => Err(status),
    };
    drop(tx);
    match outcome {
        Err(status) if status.code() == Code::DeadlineExceeded => Ok(()),
        other => Err(format!("{other:?}, not DEADLINE_EXCEEDED")),
    }
}

/// Asks UnaryCall and FullDuplexCall for status `code` with `message` and checks both
/// come back as sent.
pub(super) async fn expect_echoed_status<C: Connection>(
    client: &TestServiceClient<C>,
    code: i32,
    message: &str,
) -> Result<(), CaseError> {
    let echo = Some(EchoStatus {
        code,
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

/// Sends the echo keys on UnaryCall and FullDuplexCall and finds them in the response
/// headers and trailers.
pub(super) async fn custom_metadata<C: Connection>(
    client: &TestServiceClient<C>,
) -> Result<(), CaseError> {
    pub(super) const INITIAL: &str = "test_initial_metadata_value";
    pub(super) const TRAILING: &str = "q6ur"; // 0xababab, base64
    let with_metadata = |mut metadata: Metadata| {
        metadata.insert(ECHO_INITIAL, INITIAL);
        metadata.insert(ECHO_TRAILING, TRAILING);
        metadata
    };
    let mut request = Request::new(SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..Default::default()
    });
    *request.metadata_mut() = with_metadata(Metadata::new());
    let response = client
        .unary_call(request)
        .await
        .map_err(status_err("UnaryCall"))?;
    let metadata = response.metadata();
    check(metadata.get(ECHO_INITIAL) == Some(INITIAL), || {
        format!("UnaryCall headers: {metadata:?}")
    })?;
    let trailers = response.trailers();
    check(trailers.get(ECHO_TRAILING) == Some(TRAILING), || {
        format!("UnaryCall trailers: {trailers:?}")
    })?;

    let mut request = Request::new(futures_util::stream::iter([output_request(&[(
        314_159, 271_828,
    )])]));
    *request.metadata_mut() = with_metadata(Metadata::new());
    let response = client
        .full_duplex_call(request)
        .await
        .map_err(status_err("FullDuplexCall"))?;
    check(
        response.metadata().get(ECHO_INITIAL) == Some(INITIAL),
        || format!("FullDuplexCall headers: {:?}", response.metadata()),
    )?;
    let mut responses = response.into_inner();
    let trailers = responses
        .trailers()
        .await
        .map_err(status_err("FullDuplexCall stream"))?
        .unwrap_or_default();
    check(trailers.get(ECHO_TRAILING) == Some(TRAILING), || {
        format!("FullDuplexCall trailers: {trailers:?}")
    })
}
