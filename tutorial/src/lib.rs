// src/lib.rs: the generated code, and the service
pub mod hello {
    rdmarpc_core::include_proto!("hello");
}

use hello::greeter_server::Greeter;
use hello::{CountdownRequest, HelloReply, HelloRequest};
use rdmarpc_core::{BoxStream, Request, Response, Status};

/// The service: what `hello::greeter_server::Greeter` asks for.
#[derive(Debug, Default)]
pub struct MyGreeter;

impl Greeter for MyGreeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        // Who called, over which transport (and, under mutual TLS, their certificate).
        let transport = request.peer().map_or("?", |p| p.transport()).to_owned();
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name is empty"));
        }
        Ok(Response::new(HelloReply {
            message: format!("Hello, {name} (over {transport})!"),
        }))
    }

    type CountdownStream = BoxStream<HelloReply>;

    async fn countdown(
        &self,
        request: Request<CountdownRequest>,
    ) -> Result<Response<Self::CountdownStream>, Status> {
        let CountdownRequest { name, count } = request.into_inner();
        let replies = (1..=count).rev().map(move |n| {
            Ok(HelloReply {
                message: format!("{n}... {name}"),
            })
        });
        Ok(Response::new(Box::pin(futures_util::stream::iter(replies))))
    }
}
