//! This framework's generated clients as an interop [`Client`]: the cases of the
//! `interop-cases` crate, run on any transport.

use bytes::Bytes;
use interop_cases::{
    request_channel, Client, Duplex, DuplexCall, Echoed, Failure, OutputRequest, Requests,
    UnaryRequest, UnaryResponse, ECHO_INITIAL_VALUE, ECHO_TRAILING_VALUE,
};
use rdmarpc_core::codegen::Streaming;
use rdmarpc_core::{Connection, Metadata, Request, Status};

use super::service::{ECHO_INITIAL, ECHO_TRAILING, ZEROS};
use crate::grpc_testing::test_service_client::TestServiceClient;
use crate::grpc_testing::unimplemented_service_client::UnimplementedServiceClient;
use crate::grpc_testing::{
    EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest, StreamingInputCallRequest,
    StreamingOutputCallRequest, StreamingOutputCallResponse,
};

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
    pub fn new(channel: rdmarpc_core::Channel<C>) -> Self {
        InteropClients {
            test: TestServiceClient::new(channel.clone()),
            unimplemented: UnimplementedServiceClient::new(channel),
        }
    }
}

fn failure(status: Status) -> Failure {
    Failure {
        code: status.code() as i32,
        message: status.message().to_owned(),
    }
}

fn zeros(size: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: Bytes::from_static(&ZEROS[..size]),
    })
}

fn body_len(payload: Option<&Payload>) -> usize {
    payload.map_or(0, |p| p.body.len())
}

fn echo_status(echo: Option<interop_cases::EchoStatus>) -> Option<EchoStatus> {
    echo.map(|e| EchoStatus {
        code: e.code,
        message: e.message,
    })
}

fn output_request(request: OutputRequest) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: request
            .response_sizes
            .iter()
            .map(|&size| ResponseParameters {
                size,
                ..Default::default()
            })
            .collect(),
        payload: zeros(request.payload),
        response_status: echo_status(request.echo_status),
        ..Default::default()
    }
}

/// The echo metadata, when `echo` asks for it. Metadata values are text on this
/// framework's wire: the binary trailing value travels as base64, as over HTTP/2.
fn echo_metadata(echo: bool) -> Metadata {
    let mut metadata = Metadata::new();
    if echo {
        metadata.insert(ECHO_INITIAL, ECHO_INITIAL_VALUE);
        metadata
            .append_bin(ECHO_TRAILING, ECHO_TRAILING_VALUE)
            .expect("a -bin key");
    }
    metadata
}

fn trailing(trailers: &Metadata) -> Option<Vec<u8>> {
    trailers.get_bin(ECHO_TRAILING).ok().flatten()
}

/// A `FullDuplexCall` in progress on this framework's client.
#[derive(Debug)]
pub struct RpcDuplex {
    /// Dropped first: a dropped call is cancelled while its request stream is open.
    responses: Streaming<StreamingOutputCallResponse>,
    requests: Requests<StreamingOutputCallRequest>,
    initial: Option<String>,
}

impl Duplex for RpcDuplex {
    async fn send(&mut self, request: OutputRequest) -> Result<(), Failure> {
        self.requests.send(output_request(request)).await
    }

    fn close(&mut self) {
        self.requests.close();
    }

    async fn cancel(self, request: OutputRequest) {
        let Self {
            responses,
            requests,
            ..
        } = self;
        drop(responses);
        let _ = requests.send(output_request(request)).await;
    }

    async fn next(&mut self) -> Result<Option<usize>, Failure> {
        let response = self.responses.message().await.map_err(failure)?;
        Ok(response.map(|r| body_len(r.payload.as_ref())))
    }

    fn initial(&self) -> Option<String> {
        self.initial.clone()
    }

    async fn trailing(&mut self) -> Result<Option<Vec<u8>>, Failure> {
        let trailers = self.responses.trailers().await.map_err(failure)?;
        Ok(trailing(&trailers.unwrap_or_default()))
    }
}

impl<C: Connection> Client for InteropClients<C> {
    type Duplex = RpcDuplex;

    async fn empty_call(&self) -> Result<(), Failure> {
        self.test.empty_call(Empty {}).await.map_err(failure)?;
        Ok(())
    }

    async fn unary_call(&self, request: UnaryRequest) -> Result<UnaryResponse, Failure> {
        let mut call = Request::new(SimpleRequest {
            response_size: request.response_size,
            payload: zeros(request.payload),
            response_status: echo_status(request.echo_status),
            ..Default::default()
        });
        *call.metadata_mut() = echo_metadata(request.echo_metadata);
        let response = self.test.unary_call(call).await.map_err(failure)?;
        let echoed = Echoed {
            initial: response.metadata().get(ECHO_INITIAL).map(str::to_owned),
            trailing: trailing(response.trailers()),
        };
        let payload = response.into_inner().payload.map(|p| p.body.to_vec());
        Ok(UnaryResponse {
            payload: payload.unwrap_or_default(),
            echoed,
        })
    }

    async fn streaming_input_call(&self, payloads: Vec<usize>) -> Result<i32, Failure> {
        let requests = futures_util::stream::iter(payloads.into_iter().map(|size| {
            StreamingInputCallRequest {
                payload: zeros(size),
                ..Default::default()
            }
        }));
        let response = self
            .test
            .streaming_input_call(requests)
            .await
            .map_err(failure)?;
        Ok(response.into_inner().aggregated_payload_size)
    }

    async fn silent_input_call(&self) -> Result<i32, Failure> {
        let (tx, requests) = request_channel::<StreamingInputCallRequest>();
        let response = self.test.streaming_input_call(requests).await;
        drop(tx);
        Ok(response
            .map_err(failure)?
            .into_inner()
            .aggregated_payload_size)
    }

    async fn streaming_output_call(&self, request: OutputRequest) -> Result<Vec<usize>, Failure> {
        let mut stream = self
            .test
            .streaming_output_call(output_request(request))
            .await
            .map_err(failure)?
            .into_inner();
        let mut sizes = Vec::new();
        while let Some(response) = stream.message().await.map_err(failure)? {
            sizes.push(body_len(response.payload.as_ref()));
        }
        Ok(sizes)
    }

    async fn full_duplex_call(&self, call: DuplexCall) -> Result<RpcDuplex, Failure> {
        let (tx, requests) = request_channel();
        for request in call.first {
            let _ = tx.send(output_request(request)).await;
        }
        // Half-closed (if asked) before the response headers are awaited: a server may
        // send them only with its first response, or at the end.
        let tx = Requests::new(tx, call.close);
        let mut request = Request::new(requests);
        *request.metadata_mut() = echo_metadata(call.echo_metadata);
        if let Some(timeout) = call.timeout {
            request.set_timeout(timeout);
        }
        let response = self.test.full_duplex_call(request).await.map_err(failure)?;
        Ok(RpcDuplex {
            requests: tx,
            initial: response.metadata().get(ECHO_INITIAL).map(str::to_owned),
            responses: response.into_inner(),
        })
    }

    async fn unimplemented_call(&self) -> Result<(), Failure> {
        self.test
            .unimplemented_call(Empty {})
            .await
            .map_err(failure)?;
        Ok(())
    }

    async fn unimplemented_service_call(&self) -> Result<(), Failure> {
        self.unimplemented
            .unimplemented_call(Empty {})
            .await
            .map_err(failure)?;
        Ok(())
    }
}
