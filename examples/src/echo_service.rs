//! [`EchoService`].

use std::time::Duration;

use futures_util::StreamExt;
use rdmarpc_core::{BoxStream, Code, Request, Response, Status, Streaming};

use crate::echo::echo_server::Echo;
use crate::echo::{EchoReply, EchoRequest, RepeatRequest};

/// Answers each request with its payload, after the requested delay; see `echo.proto`
/// for the test hooks `reply_size`, `panic`, `fail_code` and `describe_peer`.
#[derive(Debug, Default, Clone)]
pub struct EchoService;

impl Echo for EchoService {
    type RepeatStream = BoxStream<EchoReply>;
    type ChatStream = BoxStream<EchoReply>;

    async fn repeat(
        &self,
        request: Request<RepeatRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        Ok(Response::new(repeat(request.into_inner())))
    }

    async fn chat(
        &self,
        request: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<Self::ChatStream>, Status> {
        Ok(Response::new(echo_each(request.into_inner())))
    }

    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let peer = request.peer().map(|p| {
            let addr = p.addr().map_or_else(|| "?".to_owned(), |a| a.to_string());
            let certs = p.certificates().map_or(0, <[_]>::len);
            format!("transport={} addr={addr} certs={certs}", p.transport())
        });
        let request = request.into_inner();
        if request.describe_peer {
            let described = peer.unwrap_or_else(|| "no peer".to_owned());
            return Ok(Response::new(EchoReply {
                payload: described.into_bytes().into(),
            }));
        }
        if request.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(request.delay_ms.into())).await;
        }
        if request.panic {
            panic!("echo: the request asked the handler to panic");
        }
        if request.fail_code != 0 {
            let code = u8::try_from(request.fail_code).map_or(Code::Unknown, Code::from_u8);
            let mut status = Status::with_details(code, "failed as requested", request.payload);
            status.metadata_mut().append("x-failed", "yes");
            return Err(status);
        }
        let payload = match request.reply_size {
            0 => request.payload,
            n => (0..n).map(|i| i as u8).collect(),
        };
        Ok(Response::new(EchoReply { payload }))
    }
}

/// `request.count` replies carrying `request.payload` (shared, not copied).
pub fn repeat(request: RepeatRequest) -> BoxStream<EchoReply> {
    let payload = request.payload;
    Box::pin(futures_util::stream::iter(0..request.count).map(move |_| {
        Ok(EchoReply {
            payload: payload.clone(),
        })
    }))
}

/// One reply per request of `requests`, carrying its payload, in order; the request
/// stream's error ends the replies with it.
pub fn echo_each(requests: Streaming<EchoRequest>) -> BoxStream<EchoReply> {
    Box::pin(requests.map(|request| {
        request.map(|request| EchoReply {
            payload: request.payload,
        })
    }))
}
