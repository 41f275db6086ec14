//! The gRPC interop test cases (the `interop-cases` crate, after grpc/grpc
//! `doc/interop-test-descriptions.md`) driven by tonic's generated client, so that a
//! standard gRPC implementation checks this framework's server:
//! `run_case(channel, "large_unary")`. The same cases run with this framework's client in
//! `examples::interop`.

use futures_util::StreamExt;
use interop_cases::{
    request_channel, Client, Duplex, DuplexCall, Echoed, Failure, OutputRequest, Requests,
    UnaryRequest, UnaryResponse, ECHO_INITIAL_VALUE, ECHO_TRAILING_VALUE,
};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::Channel;
use tonic::{Request, Streaming};

/// The generated messages and clients of `grpc.testing`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod grpc_testing {
    tonic::include_proto!("grpc.testing");
}

pub mod echo;
mod server;
pub use server::{EchoMetadata, TonicInteropService};

use grpc_testing::test_service_client::TestServiceClient;
use grpc_testing::unimplemented_service_client::UnimplementedServiceClient;
use grpc_testing::{
    EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest, StreamingInputCallRequest,
    StreamingOutputCallRequest, StreamingOutputCallResponse,
};

pub use interop_cases::CASES;

const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";

/// Runs interop case `case` over `channel` with tonic's client.
///
/// # Errors
/// What failed, for the case's report line.
pub async fn run_case(channel: Channel, case: &str) -> Result<(), String> {
    interop_cases::run_case(&TonicClient::new(channel), case).await
}

/// tonic's generated clients as an interop [`Client`].
#[derive(Debug, Clone)]
pub struct TonicClient {
    test: TestServiceClient<Channel>,
    unimplemented: UnimplementedServiceClient<Channel>,
}

impl TonicClient {
    /// The clients on `channel` (responses of up to 4 MiB).
    pub fn new(channel: Channel) -> TonicClient {
        TonicClient {
            test: TestServiceClient::new(channel.clone()).max_decoding_message_size(4 << 20),
            unimplemented: UnimplementedServiceClient::new(channel),
        }
    }
}

fn failure(status: tonic::Status) -> Failure {
    Failure {
        code: status.code() as i32,
        message: status.message().to_owned(),
    }
}

fn zeros(size: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0; size],
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

/// Adds the echo metadata to `metadata` when `echo` asks for it.
fn echo_metadata(metadata: &mut MetadataMap, echo: bool) {
    if echo {
        metadata.insert(ECHO_INITIAL, ECHO_INITIAL_VALUE.parse().expect("ASCII"));
        metadata.insert_bin(
            ECHO_TRAILING,
            MetadataValue::from_bytes(&ECHO_TRAILING_VALUE),
        );
    }
}

fn initial(metadata: &MetadataMap) -> Option<String> {
    metadata
        .get(ECHO_INITIAL)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn trailing(metadata: &MetadataMap) -> Option<Vec<u8>> {
    metadata
        .get_bin(ECHO_TRAILING)
        .and_then(|v| v.to_bytes().ok())
        .map(|b| b.to_vec())
}

/// A `FullDuplexCall` in progress on tonic's client.
#[derive(Debug)]
pub struct TonicDuplex {
    /// Dropped first: a dropped call is cancelled while its request stream is open.
    responses: Streaming<StreamingOutputCallResponse>,
    requests: Requests<StreamingOutputCallRequest>,
    initial: Option<String>,
}

impl Duplex for TonicDuplex {
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
        // tonic gives the trailers once every message was read.
        while self
            .responses
            .next()
            .await
            .transpose()
            .map_err(failure)?
            .is_some()
        {}
        let trailers = self.responses.trailers().await.map_err(failure)?;
        Ok(trailers.as_ref().and_then(trailing))
    }
}

impl Client for TonicClient {
    type Duplex = TonicDuplex;
    const OWN_DEADLINE: Option<(i32, &'static str)> =
        Some((interop_cases::code::CANCELLED, "Timeout expired"));

    async fn empty_call(&self) -> Result<(), Failure> {
        self.test
            .clone()
            .empty_call(Empty {})
            .await
            .map_err(failure)?;
        Ok(())
    }

    async fn unary_call(&self, request: UnaryRequest) -> Result<UnaryResponse, Failure> {
        let mut call = Request::new(SimpleRequest {
            response_size: request.response_size,
            payload: zeros(request.payload),
            response_status: echo_status(request.echo_status),
            ..Default::default()
        });
        echo_metadata(call.metadata_mut(), request.echo_metadata);
        let response = self.test.clone().unary_call(call).await.map_err(failure)?;
        // tonic merges a unary call's trailers into its metadata.
        let echoed = Echoed {
            initial: initial(response.metadata()),
            trailing: trailing(response.metadata()),
        };
        let payload = response.into_inner().payload.map(|p| p.body);
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
            .clone()
            .streaming_input_call(requests)
            .await
            .map_err(failure)?;
        Ok(response.into_inner().aggregated_payload_size)
    }

    async fn silent_input_call(&self) -> Result<i32, Failure> {
        let (tx, requests) = request_channel::<StreamingInputCallRequest>();
        let response = self.test.clone().streaming_input_call(requests).await;
        drop(tx);
        Ok(response
            .map_err(failure)?
            .into_inner()
            .aggregated_payload_size)
    }

    async fn streaming_output_call(&self, request: OutputRequest) -> Result<Vec<usize>, Failure> {
        let mut stream = self
            .test
            .clone()
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

    async fn full_duplex_call(&self, call: DuplexCall) -> Result<TonicDuplex, Failure> {
        let (tx, requests) = request_channel();
        for request in call.first {
            let _ = tx.send(output_request(request)).await;
        }
        // Half-closed (if asked) before the response headers are awaited: a server may
        // send them only with its first response, or at the end.
        let tx = Requests::new(tx, call.close);
        let mut request = Request::new(requests);
        echo_metadata(request.metadata_mut(), call.echo_metadata);
        if let Some(timeout) = call.timeout {
            request.set_timeout(timeout);
        }
        let response = self
            .test
            .clone()
            .full_duplex_call(request)
            .await
            .map_err(failure)?;
        Ok(TonicDuplex {
            requests: tx,
            initial: initial(response.metadata()),
            responses: response.into_inner(),
        })
    }

    async fn unimplemented_call(&self) -> Result<(), Failure> {
        self.test
            .clone()
            .unimplemented_call(Empty {})
            .await
            .map_err(failure)?;
        Ok(())
    }

    async fn unimplemented_service_call(&self) -> Result<(), Failure> {
        self.unimplemented
            .clone()
            .unimplemented_call(Empty {})
            .await
            .map_err(failure)?;
        Ok(())
    }
}
