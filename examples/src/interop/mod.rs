//! The gRPC interop test service (`grpc.testing.TestService`) and the interop cases,
//! after the gRPC interop test specification (doc/interop-test-descriptions.md of
//! grpc/grpc): the framework's own conformance suite, run by `interop-client` against
//! `interop-server` on every transport.
//!
//! Metadata values are text on this framework's wire, so the binary value the
//! `custom_metadata` case sends under `x-grpc-test-echo-trailing-bin` (0xababab) travels
//! as its base64 text `q6ur`, which is how gRPC carries it over HTTP/2.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use rpc_core::{BoxStream, Code, Connection, Metadata, Request, Response, Status, Streaming};

use crate::grpc_testing::test_service_client::TestServiceClient;
use crate::grpc_testing::test_service_server::TestService;
use crate::grpc_testing::unimplemented_service_client::UnimplementedServiceClient;
use crate::grpc_testing::{
    EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest, SimpleResponse,
    StreamingInputCallRequest, StreamingInputCallResponse, StreamingOutputCallRequest,
    StreamingOutputCallResponse,
};

/// The largest payload the service makes (gRPC's default message limit): a larger
/// requested size is `INVALID_ARGUMENT`, so that a peer cannot make it allocate at will.
pub const MAX_PAYLOAD: usize = 4 << 20;
/// The most responses a `HalfDuplexCall` collects before answering, and a
/// `FullDuplexCall` has waiting to be sent: more are `RESOURCE_EXHAUSTED` (one request
/// could otherwise ask for millions).
pub const MAX_HALF_DUPLEX_RESPONSES: usize = 10_000;

fn too_many_responses() -> Status {
    Status::resource_exhausted(format!(
        "more than {MAX_HALF_DUPLEX_RESPONSES} responses asked for"
    ))
}

/// Zeros for payloads: sent as slices of one static buffer, never allocated per call.
static ZEROS: [u8; MAX_PAYLOAD] = [0; MAX_PAYLOAD];

/// The initial-metadata key the server echoes in its response headers.
pub const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
/// The trailing-metadata key the server echoes in its trailers.
pub const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";

/// What the service counts, for tests: handlers (and response streams) alive now.
#[derive(Debug, Default)]
pub struct InteropProbe {
    running: AtomicUsize,
}

impl InteropProbe {
    /// Handlers and response streams alive now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    fn enter(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }
}

/// Counted in [`InteropProbe::running`] while alive.
#[derive(Debug)]
struct Running(Arc<InteropProbe>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The `grpc.testing.TestService` implementation.
#[derive(Debug, Default, Clone)]
pub struct InteropService {
    probe: Arc<InteropProbe>,
}

impl InteropService {
    /// A service counting into `probe`.
    pub fn with_probe(probe: Arc<InteropProbe>) -> InteropService {
        InteropService { probe }
    }
}

/// `size` zeros.
fn payload(size: i32) -> Result<Payload, Status> {
    let size = usize::try_from(size)
        .map_err(|_| Status::invalid_argument(format!("negative payload size {size}")))?;
    if size > MAX_PAYLOAD {
        return Err(Status::invalid_argument(format!(
            "payload size {size} exceeds {MAX_PAYLOAD}"
        )));
    }
    Ok(Payload {
        r#type: 0,
        body: Bytes::from_static(&ZEROS[..size]),
    })
}

/// The status a request asks for, if any.
fn requested_status(status: Option<&EchoStatus>) -> Option<Status> {
    let status = status?;
    if status.code == 0 {
        return None;
    }
    let code = u8::try_from(status.code).map_or(Code::Unknown, Code::from_u8);
    Some(Status::new(code, status.message.clone()))
}

/// Copies the echo keys of `request` into a response's headers and trailers.
fn echo_metadata<T>(request: &Metadata, response: &mut Response<T>) {
    if let Some(value) = request.get(ECHO_INITIAL) {
        response.metadata_mut().insert(ECHO_INITIAL, value);
    }
    if let Some(value) = request.get(ECHO_TRAILING) {
        response.trailers_mut().insert(ECHO_TRAILING, value);
    }
}

async fn respond_after(
    parameters: &ResponseParameters,
) -> Result<StreamingOutputCallResponse, Status> {
    let body = payload(parameters.size)?;
    if parameters.interval_us > 0 {
        tokio::time::sleep(Duration::from_micros(parameters.interval_us as u64)).await;
    }
    Ok(StreamingOutputCallResponse {
        payload: Some(body),
    })
}

impl TestService for InteropService {
    type StreamingOutputCallStream = BoxStream<StreamingOutputCallResponse>;
    type FullDuplexCallStream = BoxStream<StreamingOutputCallResponse>;
    type HalfDuplexCallStream = BoxStream<StreamingOutputCallResponse>;

    async fn empty_call(&self, _request: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let _running = self.probe.enter();
        let (metadata, request, _) = request.into_parts();
        if let Some(status) = requested_status(request.response_status.as_ref()) {
            return Err(status);
        }
        let mut response = Response::new(SimpleResponse {
            payload: Some(payload(request.response_size)?),
            ..Default::default()
        });
        echo_metadata(&metadata, &mut response);
        Ok(response)
    }

    async fn cacheable_unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        self.unary_call(request).await
    }

    async fn streaming_output_call(
        &self,
        request: Request<StreamingOutputCallRequest>,
    ) -> Result<Response<Self::StreamingOutputCallStream>, Status> {
        let running = self.probe.enter();
        let (metadata, request, _) = request.into_parts();
        let status = requested_status(request.response_status.as_ref());
        let parameters: VecDeque<_> = request.response_parameters.into();
        let stream = futures_util::stream::unfold(
            (parameters, status, running),
            |(mut parameters, status, running)| async move {
                match parameters.pop_front() {
                    Some(p) => {
                        let response = respond_after(&p).await;
                        Some((response, (parameters, status, running)))
                    }
                    None => status.map(|s| (Err(s), (parameters, None, running))),
                }
            },
        );
        let mut response = Response::new(Box::pin(stream) as Self::StreamingOutputCallStream);
        echo_metadata(&metadata, &mut response);
        Ok(response)
    }

    async fn streaming_input_call(
        &self,
        request: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        let _running = self.probe.enter();
        let mut requests = request.into_inner();
        let mut total: usize = 0;
        while let Some(request) = requests.message().await? {
            total += request.payload.map_or(0, |p| p.body.len());
        }
        let total = i32::try_from(total)
            .map_err(|_| Status::new(Code::OutOfRange, "aggregated payload size over i32"))?;
        Ok(Response::new(StreamingInputCallResponse {
            aggregated_payload_size: total,
        }))
    }

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Self::FullDuplexCallStream>, Status> {
        let running = self.probe.enter();
        let (metadata, requests, _) = request.into_parts();
        // Each request's responses go out before the next request is read.
        let stream = futures_util::stream::unfold(
            (requests, VecDeque::new(), false, running),
            |(mut requests, mut pending, done, running)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(p) = pending.pop_front() {
                        let response = respond_after(&p).await;
                        let done = response.is_err();
                        return Some((response, (requests, pending, done, running)));
                    }
                    match requests.message().await {
                        Ok(Some(request)) => {
                            if let Some(status) = requested_status(request.response_status.as_ref())
                            {
                                return Some((Err(status), (requests, pending, true, running)));
                            }
                            if pending.len() + request.response_parameters.len()
                                > MAX_HALF_DUPLEX_RESPONSES
                            {
                                let status = too_many_responses();
                                return Some((Err(status), (requests, pending, true, running)));
                            }
                            pending.extend(request.response_parameters);
                        }
                        Ok(None) => return None,
                        Err(status) => {
                            return Some((Err(status), (requests, pending, true, running)))
                        }
                    }
                }
            },
        );
        let mut response = Response::new(Box::pin(stream) as Self::FullDuplexCallStream);
        echo_metadata(&metadata, &mut response);
        Ok(response)
    }

    async fn half_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Self::HalfDuplexCallStream>, Status> {
        let running = self.probe.enter();
        let mut requests = request.into_inner();
        let mut parameters = Vec::new();
        while let Some(request) = requests.message().await? {
            if let Some(status) = requested_status(request.response_status.as_ref()) {
                return Err(status);
            }
            if parameters.len() + request.response_parameters.len() > MAX_HALF_DUPLEX_RESPONSES {
                return Err(too_many_responses());
            }
            parameters.extend(request.response_parameters);
        }
        let stream = futures_util::stream::iter(parameters)
            .then(|p| async move { respond_after(&p).await })
            .map(move |response| {
                let _ = &running;
                response
            });
        Ok(Response::new(Box::pin(stream) as Self::HalfDuplexCallStream))
    }

    async fn unimplemented_call(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented(
            "UnimplementedCall is not implemented",
        ))
    }
}

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

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), CaseError> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn status_err(what: &str) -> impl FnOnce(Status) -> CaseError + '_ {
    move |s| format!("{what}: {} {}", s.code(), s.message())
}

fn zeros(size: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: Bytes::from_static(&ZEROS[..size]),
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
const PING_PONG: [(i32, usize); 4] = [(31415, 27182), (9, 8), (2653, 1828), (58979, 45904)];

/// Runs interop case `case` with `clients`.
///
/// # Errors
/// What failed, for the case's report line.
pub async fn run_case<C: Connection>(
    clients: &InteropClients<C>,
    case: &str,
) -> Result<(), CaseError> {
    let client = &clients.test;
    match case {
        "empty_unary" => {
            client
                .empty_call(Empty {})
                .await
                .map_err(status_err("EmptyCall"))?;
            Ok(())
        }
        "large_unary" => {
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
        "client_streaming" => {
            let sizes = [27_182, 8, 1_828, 45_904];
            let requests =
                futures_util::stream::iter(sizes.map(|size| StreamingInputCallRequest {
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
        "server_streaming" => {
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
        "ping_pong" => {
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
        "empty_stream" => {
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
        "status_code_and_message" => {
            let message = "test status message";
            expect_echoed_status(client, 2, message).await
        }
        "special_status_message" => {
            let message = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n";
            expect_echoed_status(client, 2, message).await
        }
        "custom_metadata" => custom_metadata(client).await,
        "unimplemented_method" => {
            let status = client
                .unimplemented_call(Empty {})
                .await
                .err()
                .ok_or("UnimplementedCall succeeded")?;
            check(status.code() == Code::Unimplemented, || {
                format!("status {}, not UNIMPLEMENTED", status.code())
            })
        }
        "unimplemented_service" => {
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
        "cancel_after_begin" => {
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
        "cancel_after_first_response" => {
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
        "timeout_on_sleeping_server" => {
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
        other => Err(format!("unknown test case {other:?}")),
    }
}

/// Asks UnaryCall and FullDuplexCall for status `code` with `message` and checks both
/// come back as sent.
async fn expect_echoed_status<C: Connection>(
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
async fn custom_metadata<C: Connection>(client: &TestServiceClient<C>) -> Result<(), CaseError> {
    const INITIAL: &str = "test_initial_metadata_value";
    const TRAILING: &str = "q6ur"; // 0xababab, base64
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
