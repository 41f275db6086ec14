//! The interop service on tonic's server: the other side of the interop cases, so that
//! this framework's client (`interop-client --addr grpc://...`) is checked against a
//! standard gRPC server. Metadata echo (`x-grpc-test-echo-initial` into the response
//! headers, `x-grpc-test-echo-trailing-bin` into its trailers) is done on the HTTP
//! messages by [`EchoMetadata`], as a tonic service cannot set a unary call's trailers.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use http_body::{Body, Frame};
use tonic::{Code, Request, Response, Status, Streaming};

use crate::grpc_testing::test_service_server::TestService;
use crate::grpc_testing::*;

const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";
/// The largest response payload the service makes.
const MAX_PAYLOAD: i32 = 4 << 20;

/// The interop service (`grpc.testing.TestService`) as the spec describes the server.
#[derive(Debug, Default, Clone, Copy)]
pub struct TonicInteropService;

type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<StreamingOutputCallResponse, Status>> + Send>>;

fn payload(size: i32) -> Result<Payload, Status> {
    if !(0..=MAX_PAYLOAD).contains(&size) {
        return Err(Status::invalid_argument(format!("response size {size}")));
    }
    Ok(Payload {
        r#type: 0,
        body: vec![0; size as usize],
    })
}

fn requested(status: Option<&EchoStatus>) -> Option<Status> {
    let status = status.filter(|s| s.code != 0)?;
    Some(Status::new(
        Code::from_i32(status.code),
        status.message.clone(),
    ))
}

async fn respond(parameters: ResponseParameters) -> Result<StreamingOutputCallResponse, Status> {
    if parameters.interval_us > 0 {
        tokio::time::sleep(Duration::from_micros(parameters.interval_us as u64)).await;
    }
    Ok(StreamingOutputCallResponse {
        payload: Some(payload(parameters.size)?),
    })
}

#[tonic::async_trait]
impl TestService for TonicInteropService {
    type StreamingOutputCallStream = ResponseStream;
    type FullDuplexCallStream = ResponseStream;
    type HalfDuplexCallStream = ResponseStream;

    async fn empty_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let request = request.into_inner();
        if let Some(status) = requested(request.response_status.as_ref()) {
            return Err(status);
        }
        Ok(Response::new(SimpleResponse {
            payload: Some(payload(request.response_size)?),
            ..Default::default()
        }))
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
    ) -> Result<Response<ResponseStream>, Status> {
        let request = request.into_inner();
        let status = requested(request.response_status.as_ref());
        let responses = futures_util::stream::iter(request.response_parameters)
            .then(respond)
            .chain(futures_util::stream::iter(status.map(Err)));
        Ok(Response::new(Box::pin(responses)))
    }

    async fn streaming_input_call(
        &self,
        request: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        let mut requests = request.into_inner();
        let mut total = 0usize;
        while let Some(request) = requests.message().await? {
            total += request.payload.map_or(0, |p| p.body.len());
        }
        Ok(Response::new(StreamingInputCallResponse {
            aggregated_payload_size: i32::try_from(total)
                .map_err(|_| Status::out_of_range("aggregated payload size"))?,
        }))
    }

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let requests = request.into_inner();
        // Each request's responses go out before the next request is read.
        let responses = futures_util::stream::unfold(
            (requests, VecDeque::new(), false),
            |(mut requests, mut pending, done)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(p) = pending.pop_front() {
                        let response = respond(p).await;
                        let done = response.is_err();
                        return Some((response, (requests, pending, done)));
                    }
                    match requests.message().await {
                        Ok(Some(request)) => {
                            if let Some(status) = requested(request.response_status.as_ref()) {
                                return Some((Err(status), (requests, pending, true)));
                            }
                            pending.extend(request.response_parameters);
                        }
                        Ok(None) => return None,
                        Err(status) => return Some((Err(status), (requests, pending, true))),
                    }
                }
            },
        );
        Ok(Response::new(Box::pin(responses)))
    }

    async fn half_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let mut requests = request.into_inner();
        let mut parameters = Vec::new();
        while let Some(request) = requests.message().await? {
            if let Some(status) = requested(request.response_status.as_ref()) {
                return Err(status);
            }
            parameters.extend(request.response_parameters);
        }
        Ok(Response::new(Box::pin(
            futures_util::stream::iter(parameters).then(respond),
        )))
    }

    async fn unimplemented_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented(
            "UnimplementedCall is not implemented",
        ))
    }
}

/// A tower layer's service that echoes the interop metadata keys: the request's
/// `x-grpc-test-echo-initial` into the response headers, its
/// `x-grpc-test-echo-trailing-bin` into the response trailers.
#[derive(Debug, Clone)]
pub struct EchoMetadata<S>(pub S);

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S, B> tower_service::Service<http::Request<B>> for EchoMetadata<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Send,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let initial = request.headers().get(ECHO_INITIAL).cloned();
        let trailing = request.headers().get(ECHO_TRAILING).cloned();
        let response = self.0.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            if let Some(value) = initial {
                response.headers_mut().insert(ECHO_INITIAL, value);
            }
            let Some(value) = trailing else {
                return Ok(response);
            };
            let (parts, body) = response.into_parts();
            let body = WithTrailer {
                inner: body,
                value: Some(value),
            };
            Ok(http::Response::from_parts(
                parts,
                tonic::body::Body::new(body),
            ))
        })
    }
}

/// A body that adds one trailer to the trailers it ends with.
struct WithTrailer {
    inner: tonic::body::Body,
    value: Option<http::HeaderValue>,
}

impl Body for WithTrailer {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, Status>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_trailers() {
                Ok(mut trailers) => {
                    if let Some(value) = self.value.take() {
                        trailers.insert(ECHO_TRAILING, value);
                    }
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}
