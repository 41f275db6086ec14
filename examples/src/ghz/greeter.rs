//! [`GreeterService`]: `helloworld.Greeter`.

use futures_util::StreamExt;
use rdmarpc_core::{BoxStream, Request, Response, Status, Streaming};

use crate::helloworld::greeter_server::Greeter;
use crate::helloworld::{HelloReply, HelloRequest};

/// Greets: "Hello NAME" once (`SayHello`), three times (`SayHellos`), once for all the
/// names of a stream (`SayHelloCS`) or once for each (`SayHelloBidi`).
#[derive(Debug, Default, Clone, Copy)]
pub struct GreeterService;

fn hello(name: &str) -> HelloReply {
    HelloReply {
        message: format!("Hello {name}"),
    }
}

impl Greeter for GreeterService {
    type SayHellosStream = BoxStream<HelloReply>;
    type SayHelloBidiStream = BoxStream<HelloReply>;

    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        Ok(Response::new(hello(&request.into_inner().name)))
    }

    async fn say_hello_cs(
        &self,
        request: Request<Streaming<HelloRequest>>,
    ) -> Result<Response<HelloReply>, Status> {
        let mut requests = request.into_inner();
        let mut names = Vec::new();
        while let Some(request) = requests.message().await? {
            // A long stream is counted, not kept.
            if names.len() < 16 {
                names.push(request.name);
            }
        }
        Ok(Response::new(hello(&names.join(" and "))))
    }

    async fn say_hellos(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<Self::SayHellosStream>, Status> {
        let reply = hello(&request.into_inner().name);
        let replies = futures_util::stream::iter((0..3).map(move |_| Ok(reply.clone())));
        Ok(Response::new(Box::pin(replies) as Self::SayHellosStream))
    }

    async fn say_hello_bidi(
        &self,
        request: Request<Streaming<HelloRequest>>,
    ) -> Result<Response<Self::SayHelloBidiStream>, Status> {
        let replies = request
            .into_inner()
            .map(|request| request.map(|r| hello(&r.name)));
        Ok(Response::new(Box::pin(replies) as Self::SayHelloBidiStream))
    }
}
