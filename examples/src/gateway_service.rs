//! [`GatewayService`]: the front end of the two-service example.

use rdmarpc_core::{Request, Response, Status};

use crate::gateway::gateway_server::Gateway;
use crate::gateway::{LookupReply, LookupRequest, StoreReply, StoreRequest};
use crate::kv::kv_client::KvClient;
use crate::kv::{GetRequest, PutRequest};
use crate::transport::ClientConnection;

/// Answers lookups and stores from the key-value back end it holds a client of. Each
/// back-end call continues the caller's trace when the channel has
/// [`rdmarpc_core::trace::ClientTraceLayer`] (or the `propagate` interceptor).
#[derive(Debug, Clone)]
pub struct GatewayService {
    backend: KvClient<ClientConnection>,
}

impl GatewayService {
    /// A gateway in front of `backend`.
    pub fn new(backend: KvClient<ClientConnection>) -> Self {
        GatewayService { backend }
    }
}

impl Gateway for GatewayService {
    async fn lookup(
        &self,
        request: Request<LookupRequest>,
    ) -> Result<Response<LookupReply>, Status> {
        let key = request.into_inner().key;
        let reply = self.backend.get(GetRequest { key: key.clone() }).await?;
        Ok(Response::new(LookupReply {
            key,
            value: reply.into_inner().value,
        }))
    }

    async fn store(&self, request: Request<StoreRequest>) -> Result<Response<StoreReply>, Status> {
        let StoreRequest { key, value } = request.into_inner();
        let reply = self.backend.put(PutRequest { key, value }).await?;
        Ok(Response::new(StoreReply {
            replaced: reply.into_inner().replaced,
        }))
    }
}
