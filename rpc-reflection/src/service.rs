//! [`ReflectionService`]: the `ServerReflectionInfo` stream of both protocol versions.

use std::sync::Arc;

use futures_util::StreamExt;
use rdmarpc_core::{BoxStream, Request, Response, Status, Streaming};

use crate::answer::answer;
use crate::index::Index;
use crate::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use crate::pb::{v1, v1alpha};

/// The server reflection service over the registered descriptors, built by a
/// [`Builder`](crate::Builder). Serve both protocol versions: [`ReflectionService::v1`]
/// and [`ReflectionService::v1alpha`] (many tools still ask v1alpha first). Cheap to
/// clone: clones share the descriptors, which are never copied into an answer.
///
/// Each stream answers its requests in order, one at a time: the next request is read
/// only once the previous answer was taken by the server's stream window. A client that
/// sends requests without reading answers therefore stops at its request window: one
/// stream holds at most one answer and the window's worth of requests, whatever the
/// client does. A request that does not decode ends the stream with
/// `INVALID_ARGUMENT`; one over [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES) is
/// answered with an error and the stream goes on.
#[derive(Debug, Clone)]
pub struct ReflectionService {
    index: Arc<Index>,
}

/// `grpc.reflection.v1.ServerReflection`, as [`ReflectionService::v1`] returns it.
pub type ServerReflectionV1 =
    v1::server_reflection_server::ServerReflectionServer<ReflectionService>;

/// `grpc.reflection.v1alpha.ServerReflection`, as [`ReflectionService::v1alpha`] returns
/// it.
pub type ServerReflectionV1alpha =
    v1alpha::server_reflection_server::ServerReflectionServer<ReflectionService>;

impl ReflectionService {
    pub(crate) fn new(index: Arc<Index>) -> ReflectionService {
        ReflectionService { index }
    }

    /// The service as `grpc.reflection.v1.ServerReflection`, to add to a server.
    pub fn v1(&self) -> ServerReflectionV1 {
        ServerReflectionV1::new(self.clone())
    }

    /// The service as `grpc.reflection.v1alpha.ServerReflection` (the same messages in
    /// the older package), to add to a server.
    pub fn v1alpha(&self) -> ServerReflectionV1alpha {
        ServerReflectionV1alpha::new(self.clone())
    }

    /// The answer to one request, as a stream would give it.
    #[cfg(test)]
    pub(crate) fn answer_for_test(
        &self,
        request: ServerReflectionRequest,
    ) -> ServerReflectionResponse {
        answer(&self.index, request)
    }

    /// The answers to `requests`, in order; the stream's end or its first failure
    /// ends them.
    fn answers(
        &self,
        requests: Streaming<ServerReflectionRequest>,
    ) -> BoxStream<ServerReflectionResponse> {
        let index = self.index.clone();
        // `map` is lazy: a request is read when its answer is asked for, which the
        // server does only while the client's window has room (see the type's docs).
        Box::pin(requests.map(move |request| request.map(|request| answer(&index, request))))
    }
}

impl v1::server_reflection_server::ServerReflection for ReflectionService {
    type ServerReflectionInfoStream = BoxStream<ServerReflectionResponse>;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<ServerReflectionRequest>>,
    ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
        Ok(Response::new(self.answers(request.into_inner())))
    }
}

impl v1alpha::server_reflection_server::ServerReflection for ReflectionService {
    type ServerReflectionInfoStream = BoxStream<ServerReflectionResponse>;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<ServerReflectionRequest>>,
    ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
        Ok(Response::new(self.answers(request.into_inner())))
    }
}
