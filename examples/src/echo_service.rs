//! [`EchoService`].

use std::time::Duration;

use rpc_core::{Request, Response, Status};

use crate::echo::echo_server::Echo;
use crate::echo::{EchoReply, EchoRequest};

/// Answers each request with its payload, after the requested delay; see `echo.proto`
/// for the test hooks `reply_size` and `panic`.
#[derive(Debug, Default, Clone)]
pub struct EchoService;

impl Echo for EchoService {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let request = request.into_inner();
        if request.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(request.delay_ms.into())).await;
        }
        if request.panic {
            panic!("echo: the request asked the handler to panic");
        }
        let payload = match request.reply_size {
            0 => request.payload,
            n => (0..n).map(|i| i as u8).collect(),
        };
        Ok(Response::new(EchoReply { payload }))
    }
}
