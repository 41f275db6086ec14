//! The interop test service (`grpc.testing.TestService`) as the interop server runs it,
//! with its probe of calls running.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use rdmarpc_core::{BoxStream, Code, Metadata, Request, Response, Status, Streaming};

use crate::grpc_testing::test_service_server::TestService;
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

pub(super) fn too_many_responses() -> Status {
    Status::resource_exhausted(format!(
        "more than {MAX_HALF_DUPLEX_RESPONSES} responses asked for"
    ))
}

/// Zeros for payloads: sent as slices of one static buffer, never allocated per call.
pub(super) static ZEROS: [u8; MAX_PAYLOAD] = [0; MAX_PAYLOAD];

/// The initial-metadata key the server echoes in its response headers.
pub const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";

/// The trailing-metadata key the server echoes in its trailers.
pub const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";

/// What the service counts, for tests: handlers (and response streams) alive now.
#[derive(Debug, Default)]
pub struct InteropProbe {
    pub(super) running: AtomicUsize,
}

impl InteropProbe {
    /// Handlers and response streams alive now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub(super) fn enter(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }
}

/// Counted in [`InteropProbe::running`] while alive.
#[derive(Debug)]
pub(super) struct Running(pub(super) Arc<InteropProbe>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The `grpc.testing.TestService` implementation.
#[derive(Debug, Default, Clone)]
pub struct InteropService {
    pub(super) probe: Arc<InteropProbe>,
}

impl InteropService {
    /// A service counting into `probe`.
    pub fn with_probe(probe: Arc<InteropProbe>) -> InteropService {
        InteropService { probe }
    }
}

/// `size` zeros.
pub(super) fn payload(size: i32) -> Result<Payload, Status> {
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
pub(super) fn requested_status(status: Option<&EchoStatus>) -> Option<Status> {
    let status = status?;
    if status.code == 0 {
        return None;
    }
    let code = u8::try_from(status.code).map_or(Code::Unknown, Code::from_u8);
    Some(Status::new(code, status.message.clone()))
}

/// Copies the echo keys of `request` into a response's headers and trailers.
pub(super) fn echo_metadata<T>(request: &Metadata, response: &mut Response<T>) {
    if let Some(value) = request.get(ECHO_INITIAL) {
        response.metadata_mut().insert(ECHO_INITIAL, value);
    }
    if let Some(value) = request.get(ECHO_TRAILING) {
        response.trailers_mut().insert(ECHO_TRAILING, value);
    }
}

pub(super) async fn respond_after(
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
