//! [`MeteredService`]: per-method call counts and latencies through the `metrics` facade
//! (a no-op until the application installs a recorder, e.g. a Prometheus exporter).
//!
//! Metrics, labelled `service` (`echo.Echo`) and `method` (`Echo`), named after
//! go-grpc-prometheus's:
//! - `rpc_server_started_total`: calls that reached the service;
//! - `rpc_server_handled_total` (and `code`: `OK`, `NOT_FOUND`, ...): calls that ended, a
//!   streamed response when its stream ended (`CANCELLED` when it was dropped first);
//! - `rpc_server_handling_seconds`: a histogram of the time from the call reaching the
//!   service to its end.
//!
//! [`ServerMetricsLayer`] records the same as a server's outermost tower layer, so that
//! calls refused by the layers inside it are counted too; [`ClientMetricsLayer`] records
//! `rpc_client_*` for a channel's unary calls.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::Stream;

use crate::service::{
    BoxMessage, MethodDescriptor, Service, ServiceFuture, StreamRequest, StreamResponse,
    StreamingFuture,
};
use crate::{Code, Payload, Request, Status};

/// A service whose calls are counted and timed ([module docs](self)).
#[derive(Debug)]
pub struct MeteredService<S> {
    inner: S,
}

impl<S: Service> MeteredService<S> {
    /// `service`, metered.
    pub fn new(service: S) -> Self {
        MeteredService { inner: service }
    }
}

/// `("echo.Echo", "Echo")` of `/echo.Echo/Echo`.
fn labels(path: &'static str) -> (&'static str, &'static str) {
    path.trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("", path))
}

/// The metric names of one side.
#[derive(Clone, Copy)]
struct Names {
    started: &'static str,
    handled: &'static str,
    seconds: &'static str,
}

const SERVER: Names = Names {
    started: "rpc_server_started_total",
    handled: "rpc_server_handled_total",
    seconds: "rpc_server_handling_seconds",
};

const CLIENT: Names = Names {
    started: "rpc_client_started_total",
    handled: "rpc_client_handled_total",
    seconds: "rpc_client_handling_seconds",
};

/// One call in progress; records its end once.
struct Meter {
    names: Names,
    service: &'static str,
    method: &'static str,
    started: Instant,
    done: bool,
}

impl Meter {
    fn start(path: &'static str) -> Meter {
        Meter::start_as(SERVER, path)
    }

    fn start_as(names: Names, path: &'static str) -> Meter {
        let (service, method) = labels(path);
        metrics::counter!(names.started, "service" => service, "method" => method).increment(1);
        Meter {
            names,
            service,
            method,
            started: Instant::now(),
            done: false,
        }
    }

    fn end(&mut self, code: Code) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let (service, method, names) = (self.service, self.method, self.names);
        metrics::counter!(names.handled, "service" => service, "method" => method, "code" => code.as_str())
            .increment(1);
        metrics::histogram!(names.seconds, "service" => service, "method" => method)
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// Counts and times a channel's unary calls (with
/// [`Channel::layer`](crate::Channel::layer)): `rpc_client_started_total`,
/// `rpc_client_handled_total` (with `code`) and `rpc_client_handling_seconds`, labelled
/// `service` and `method` as the server's.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientMetricsLayer;

impl<S> tower::Layer<S> for ClientMetricsLayer {
    type Service = ClientMetrics<S>;
    fn layer(&self, inner: S) -> ClientMetrics<S> {
        ClientMetrics { inner }
    }
}

/// The service of [`ClientMetricsLayer`].
#[derive(Debug, Clone)]
pub struct ClientMetrics<S> {
    inner: S,
}

impl<S> tower::Service<Request<crate::layer::ClientCall>> for ClientMetrics<S>
where
    S: tower::Service<Request<crate::layer::ClientCall>, Response = crate::Response<bytes::Bytes>>,
    S::Error: Into<crate::layer::BoxError>,
    S::Future: Send + 'static,
{
    type Response = crate::Response<bytes::Bytes>;
    type Error = crate::layer::BoxError;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<crate::layer::ClientCall>) -> Self::Future {
        let mut meter = Meter::start_as(CLIENT, request.get_ref().method().path);
        let call = self.inner.call(request);
        Box::pin(async move {
            let result = call.await.map_err(Into::into);
            meter.end(match &result {
                Ok(_) => Code::Ok,
                Err(e) => crate::layer::to_status_ref(&**e).code(),
            });
            result
        })
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // Dropped before its end: the call was cancelled (or its deadline passed).
        self.end(Code::Cancelled);
    }
}

fn code<T>(result: &Result<T, Status>) -> Code {
    result.as_ref().map_or_else(Status::code, |_| Code::Ok)
}

/// Counts and times a server's calls as a tower layer
/// ([`ServerBuilder::layer`](crate::ServerBuilder::layer)), under the same names and
/// labels as [`MeteredService`]: added first, it is outside the other layers, so calls
/// they refuse (a load-shedding layer's `UNAVAILABLE`, a timeout layer's
/// `DEADLINE_EXCEEDED`, an authentication layer's `UNAUTHENTICATED`) are counted too, which
/// a `MeteredService` inside the layers never sees. Use one or the other, not both.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerMetricsLayer;

impl<S> tower::Layer<S> for ServerMetricsLayer {
    type Service = ServerMetrics<S>;
    fn layer(&self, inner: S) -> ServerMetrics<S> {
        ServerMetrics { inner }
    }
}

/// The service of [`ServerMetricsLayer`].
#[derive(Debug, Clone)]
pub struct ServerMetrics<S> {
    inner: S,
}

type ServerResult = Result<crate::Response<crate::layer::ServerAnswer>, crate::layer::BoxError>;

impl<S> tower::Service<Request<crate::layer::ServerCall>> for ServerMetrics<S>
where
    S: tower::Service<
        Request<crate::layer::ServerCall>,
        Response = crate::Response<crate::layer::ServerAnswer>,
    >,
    S::Error: Into<crate::layer::BoxError>,
    S::Future: Send + 'static,
{
    type Response = crate::Response<crate::layer::ServerAnswer>;
    type Error = crate::layer::BoxError;
    type Future = Pin<Box<dyn std::future::Future<Output = ServerResult> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<crate::layer::ServerCall>) -> Self::Future {
        use crate::layer::ServerAnswer;
        let mut meter = Meter::start(request.get_ref().method().path);
        let call = self.inner.call(request);
        Box::pin(async move {
            match call.await.map_err(Into::into) {
                Ok(response) => Ok(response.map(|answer| match answer {
                    ServerAnswer::Streaming(StreamResponse::Stream(stream)) => {
                        ServerAnswer::Streaming(StreamResponse::Stream(Box::pin(MeteredStream {
                            inner: stream,
                            meter,
                        })))
                    }
                    answer => {
                        meter.end(Code::Ok);
                        answer
                    }
                })),
                Err(e) => {
                    meter.end(crate::layer::to_status_ref(&*e).code());
                    Err(e)
                }
            }
        })
    }
}

/// A response stream that records its call's end when it ends.
struct MeteredStream {
    inner: crate::service::BoxMessageStream,
    meter: Meter,
}

impl Stream for MeteredStream {
    type Item = Result<BoxMessage, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(None) => self.meter.end(Code::Ok),
            Poll::Ready(Some(Err(status))) => self.meter.end(status.code()),
            _ => {}
        }
        polled
    }
}

impl<S: Service> Service for MeteredService<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn methods(&self) -> &'static [MethodDescriptor] {
        self.inner.methods()
    }

    fn call(&self, index: usize, request: Request<Payload<'_>>) -> ServiceFuture {
        let path = self.inner.methods().get(index).map_or("/?/?", |m| m.path);
        let mut meter = Meter::start(path);
        let call = self.inner.call(index, request);
        Box::pin(async move {
            let result = call.await;
            meter.end(code(&result));
            result
        })
    }

    fn call_streaming(&self, index: usize, request: Request<StreamRequest<'_>>) -> StreamingFuture {
        let path = self.inner.methods().get(index).map_or("/?/?", |m| m.path);
        let mut meter = Meter::start(path);
        let call = self.inner.call_streaming(index, request);
        Box::pin(async move {
            let result = call.await;
            match result {
                Ok(response) => Ok(response.map(move |message| match message {
                    StreamResponse::Stream(stream) => {
                        StreamResponse::Stream(Box::pin(MeteredStream {
                            inner: stream,
                            meter,
                        }))
                    }
                    one @ StreamResponse::Message(_) => {
                        let mut meter = meter;
                        meter.end(Code::Ok);
                        one
                    }
                })),
                Err(status) => {
                    meter.end(status.code());
                    Err(status)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::MetricKind;

    use super::*;
    use crate::memory;
    use crate::{Channel, Response, Server};

    static METHODS: [MethodDescriptor; 2] = [
        MethodDescriptor::new("/t.Metered/Echo"),
        MethodDescriptor::new("/t.Metered/Fail"),
    ];

    /// `Echo` answers its `u32` after that many ms; `Fail` answers NOT_FOUND.
    struct Test;

    impl Service for Test {
        fn name(&self) -> &'static str {
            "t.Metered"
        }
        fn methods(&self) -> &'static [MethodDescriptor] {
            &METHODS
        }
        fn call(&self, index: usize, request: Request<Payload<'_>>) -> ServiceFuture {
            let ms: u32 = request.into_inner().decode().unwrap_or(0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms.into())).await;
                match index {
                    0 => Ok(Response::new(Box::new(ms) as BoxMessage)),
                    _ => Err(Status::not_found("no such thing")),
                }
            })
        }
    }

    /// Adds what was recorded since the last snapshot (which drains) to `seen`, as
    /// `name{label=value,...}` -> counter value or histogram sample count.
    fn absorb(
        snapshotter: &metrics_util::debugging::Snapshotter,
        seen: &mut std::collections::BTreeMap<String, u64>,
    ) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.key().name(), labels.join(","));
            let value = match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => n,
                (MetricKind::Histogram, DebugValue::Histogram(v)) => v.len() as u64,
                other => panic!("unexpected {other:?}"),
            };
            *seen.entry(name).or_default() += value;
        }
    }

    /// `seen` is exactly `expected`.
    fn assert_recorded(seen: &std::collections::BTreeMap<String, u64>, expected: &[(&str, u64)]) {
        let expected: std::collections::BTreeMap<String, u64> =
            expected.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(*seen, expected);
    }

    #[test]
    fn calls_are_counted_and_timed_per_method_and_code() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut seen = std::collections::BTreeMap::new();
        metrics::with_local_recorder(&recorder, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let server = Server::builder()
                    .add_service(MeteredService::new(Test))
                    .unwrap()
                    .build();
                let (listener, connector) = memory::listener(1 << 20);
                tokio::spawn(async move { server.serve(listener).await });
                let channel = Channel::new(connector.connect().await.unwrap());
                for ms in [0u32, 1, 2] {
                    let reply = channel.unary::<u32, u32>(Request::new(ms), &METHODS[0]);
                    assert_eq!(reply.await.unwrap().into_inner(), ms);
                }
                let failed = channel.unary::<u32, u32>(Request::new(0), &METHODS[1]);
                assert_eq!(failed.await.unwrap_err().code(), Code::NotFound);
                // A call given up by its caller: the server drops its handler.
                let mut slow = Request::new(10_000u32);
                slow.set_timeout(Duration::from_millis(20));
                let slow = channel.unary::<u32, u32>(slow, &METHODS[0]);
                assert_eq!(slow.await.unwrap_err().code(), Code::DeadlineExceeded);
                // The server drops the abandoned handler at its deadline (20 ms): wait
                // for its end to be recorded, a loaded host given seconds.
                for _ in 0..250 {
                    absorb(&snapshotter, &mut seen);
                    let ended: u64 = seen
                        .iter()
                        .filter(|(k, _)| k.starts_with("rpc_server_handled_total"))
                        .map(|(_, n)| n)
                        .sum();
                    if ended == 5 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        });
        absorb(&snapshotter, &mut seen);
        let expected = [
            ("rpc_server_started_total{service=t.Metered,method=Echo}", 4),
            ("rpc_server_started_total{service=t.Metered,method=Fail}", 1),
            (
                "rpc_server_handled_total{service=t.Metered,method=Echo,code=OK}",
                3,
            ),
            (
                "rpc_server_handled_total{service=t.Metered,method=Echo,code=CANCELLED}",
                1,
            ),
            (
                "rpc_server_handled_total{service=t.Metered,method=Fail,code=NOT_FOUND}",
                1,
            ),
            (
                "rpc_server_handling_seconds{service=t.Metered,method=Echo}",
                4,
            ),
            (
                "rpc_server_handling_seconds{service=t.Metered,method=Fail}",
                1,
            ),
        ];
        assert_recorded(&seen, &expected);
    }

    /// As the outermost server layer, the metrics count the calls a load-shedding layer
    /// inside refuses: two concurrent calls behind a concurrency limit of one, the
    /// second shed (`UNAVAILABLE`) and counted.
    #[test]
    fn the_server_layer_counts_calls_refused_by_inner_layers() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut seen = std::collections::BTreeMap::new();
        metrics::with_local_recorder(&recorder, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let server = Server::builder()
                    .layer(ServerMetricsLayer)
                    .layer(tower::load_shed::LoadShedLayer::new())
                    .layer(tower::limit::ConcurrencyLimitLayer::new(1))
                    .add_service(Test)
                    .unwrap()
                    .build();
                let (listener, connector) = memory::listener(1 << 20);
                tokio::spawn(async move { server.serve(listener).await });
                let channel = Channel::new(connector.connect().await.unwrap());
                let holder = channel.clone();
                let holder = tokio::spawn(async move {
                    holder
                        .unary::<u32, u32>(Request::new(300), &METHODS[0])
                        .await
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
                let shed = channel.unary::<u32, u32>(Request::new(0), &METHODS[0]);
                assert_eq!(shed.await.unwrap_err().code(), Code::Unavailable);
                assert_eq!(holder.await.unwrap().unwrap().into_inner(), 300);
            });
        });
        absorb(&snapshotter, &mut seen);
        let expected = [
            ("rpc_server_started_total{service=t.Metered,method=Echo}", 2),
            (
                "rpc_server_handled_total{service=t.Metered,method=Echo,code=OK}",
                1,
            ),
            (
                "rpc_server_handled_total{service=t.Metered,method=Echo,code=UNAVAILABLE}",
                1,
            ),
            (
                "rpc_server_handling_seconds{service=t.Metered,method=Echo}",
                2,
            ),
        ];
        assert_recorded(&seen, &expected);
    }
}
