//! Tracing across services: a span per call with its method, status and latency, and the
//! W3C trace context (`traceparent`, <https://www.w3.org/TR/trace-context/>) carried in
//! call metadata, so that one request's spans in every service share a trace id.
//!
//! - On a server, [`ServerTraceLayer`] (with
//!   [`ServerBuilder::layer`](crate::ServerBuilder::layer)) opens an `rpc.server` span per
//!   call, continuing the caller's trace when its request carries a `traceparent`, and
//!   makes that context the handler's [`TraceContext::current`] (and a request
//!   extension).
//! - On a client, [`ClientTraceLayer`] (with [`Channel::layer`](crate::Channel::layer))
//!   opens an `rpc.client` span per unary call and sends the current context (a child of
//!   the call being served, or of a `traceparent` the caller set, or a new trace) as
//!   `traceparent`; [`propagate`], an interceptor, only sends it (streaming calls too).
//!
//! Spans are `tracing` spans at INFO with the trace and span ids as fields (`trace_id`,
//! `span_id`, `parent_id`): any subscriber records them, and logs searched by trace id
//! join a request's spans across services. (An OpenTelemetry exporter through
//! `tracing-opentelemetry` would assign ids of its own: wiring these ids into it is not
//! done.) A streaming call's span ends when its handler returns the stream: the latency
//! is to the response headers, and the stream's body runs outside the context.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tracing::Instrument;

use crate::layer::{BoxError, ClientCall, ServerAnswer, ServerCall};
use crate::{Code, Request, Response, Status};

/// The metadata key of the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// A W3C trace context: the trace, the span (the caller's, as sent; this call's, as
/// current) and whether it is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace id (never 0).
    pub trace_id: u128,
    /// The span id (never 0).
    pub span_id: u64,
    /// The `sampled` flag.
    pub sampled: bool,
}

tokio::task_local! {
    static CURRENT: TraceContext;
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

fn nonzero_u64() -> u64 {
    loop {
        let id = random_u64();
        if id != 0 {
            return id;
        }
    }
}

impl TraceContext {
    /// A new trace (random ids), sampled.
    pub fn new_root() -> TraceContext {
        let trace_id = (u128::from(random_u64()) << 64) | u128::from(nonzero_u64());
        TraceContext {
            trace_id,
            span_id: nonzero_u64(),
            sampled: true,
        }
    }

    /// A span of the same trace, below this one.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: nonzero_u64(),
            ..*self
        }
    }

    /// Parses a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`); `None` for
    /// anything else, all-zero ids included (the W3C rules: such a header is ignored and
    /// a new trace starts). A later version's value is read by its first four fields.
    pub fn parse(value: &str) -> Option<TraceContext> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        if !hex(version, 2)
            || version == "ff"
            || !hex(trace, 32)
            || !hex(span, 16)
            || !hex(flags, 2)
        {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && span_id != 0).then_some(TraceContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` value of this context.
    pub fn to_traceparent(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.span_id,
            u8::from(self.sampled)
        )
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The context of the call being served on this task (set by [`ServerTraceLayer`]
    /// for the handler's future, or by [`TraceContext::scope`]). A task the handler
    /// spawns does not inherit it: pass it along with `scope`.
    pub fn current() -> Option<TraceContext> {
        CURRENT.try_with(|c| *c).ok()
    }

    /// Runs `future` with this context as [`TraceContext::current`].
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, future)
    }
}

/// The parent of an outgoing call: a `traceparent` already in its metadata, else the
/// call being served, else (with OpenTelemetry) the current span's context.
fn parent_of(metadata: &crate::Metadata) -> Option<TraceContext> {
    let parent = metadata
        .get(TRACEPARENT)
        .and_then(TraceContext::parse)
        .or_else(TraceContext::current);
    #[cfg(feature = "otel")]
    let parent = parent.or_else(|| otel::of_span(&tracing::Span::current()));
    parent
}

/// The context an outgoing call continues (a child of [`parent_of`], or a new trace).
fn outgoing(metadata: &crate::Metadata) -> TraceContext {
    parent_of(metadata).map_or_else(TraceContext::new_root, |parent| parent.child())
}

/// The context of a call whose `span` was just opened (a child of `parent`, or a new
/// trace; with OpenTelemetry, the span joins the parent's trace there and its ids are
/// the exporter's), recorded in the span's fields.
fn open(span: &tracing::Span, parent: Option<TraceContext>) -> TraceContext {
    let context = parent.map_or_else(TraceContext::new_root, |p| p.child());
    #[cfg(feature = "otel")]
    let context = otel::link(span, parent, context);
    span.record("trace_id", context.trace_id_hex());
    span.record("span_id", format!("{:016x}", context.span_id));
    if let Some(parent) = parent {
        span.record("parent_id", format!("{:016x}", parent.span_id));
    }
    context
}

/// Records the call's status and latency in the current (its) span.
fn finish(code: Code, started: Instant) {
    let span = tracing::Span::current();
    span.record("rpc.code", code.as_str());
    span.record("latency_ms", started.elapsed().as_secs_f64() * 1e3);
}

/// With the `otel` feature: the spans join OpenTelemetry traces (through
/// `tracing-opentelemetry`), so that an exporter's spans of one request share the
/// caller's trace id and link parent to child across services.
#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TraceContext;

    /// Makes `span` (just created) a child of the remote `parent`, and returns the
    /// span's context as OpenTelemetry knows it (its ids), or `fallback` when no
    /// OpenTelemetry layer records spans.
    pub(super) fn link(
        span: &tracing::Span,
        parent: Option<TraceContext>,
        fallback: TraceContext,
    ) -> TraceContext {
        if let Some(parent) = parent {
            let flags = if parent.sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            };
            let remote = SpanContext::new(
                TraceId::from(parent.trace_id),
                SpanId::from(parent.span_id),
                flags,
                true,
                TraceState::default(),
            );
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
        }
        of_span(span).unwrap_or(fallback)
    }

    /// `span`'s OpenTelemetry context, if an OpenTelemetry layer records it.
    pub(super) fn of_span(span: &tracing::Span) -> Option<TraceContext> {
        let context = span.context();
        let otel = context.span();
        let ids = otel.span_context();
        ids.is_valid().then(|| TraceContext {
            trace_id: u128::from_be_bytes(ids.trace_id().to_bytes()),
            span_id: u64::from_be_bytes(ids.span_id().to_bytes()),
            sampled: ids.is_sampled(),
        })
    }
}

/// An interceptor that sends the current trace context (see [module docs](self)) with
/// every call: `channel.with_interceptor(rdmarpc_core::trace::propagate)`.
///
/// # Errors
/// Never.
pub fn propagate(mut request: Request<()>) -> Result<Request<()>, Status> {
    let context = outgoing(request.metadata());
    request
        .metadata_mut()
        .insert(TRACEPARENT, context.to_traceparent());
    Ok(request)
}

fn code_of<T, E: Into<BoxError>>(result: Result<T, E>) -> (Result<T, BoxError>, Code) {
    match result {
        Ok(value) => (Ok(value), Code::Ok),
        Err(e) => {
            let e = e.into();
            let code = crate::layer::to_status_ref(&*e).code();
            (Err(e), code)
        }
    }
}

/// Opens an `rpc.server` span per call, continuing the caller's trace ([module
/// docs](self)).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerTraceLayer;

impl<S> tower::Layer<S> for ServerTraceLayer {
    type Service = ServerTrace<S>;
    fn layer(&self, inner: S) -> ServerTrace<S> {
        ServerTrace { inner }
    }
}

/// The service of [`ServerTraceLayer`].
#[derive(Debug, Clone)]
pub struct ServerTrace<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S> tower::Service<Request<ServerCall>> for ServerTrace<S>
where
    S: tower::Service<Request<ServerCall>, Response = Response<ServerAnswer>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<ServerAnswer>;
    type Error = BoxError;
    type Future = BoxFuture<Response<ServerAnswer>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<ServerCall>) -> Self::Future {
        let parent = request
            .metadata()
            .get(TRACEPARENT)
            .and_then(TraceContext::parse);
        let span = tracing::info_span!(
            "rpc.server",
            rpc.method = request.get_ref().method().path,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
            parent_id = tracing::field::Empty,
            rpc.code = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let context = open(&span, parent);
        request.extensions_mut().insert(context);
        // What the inner service does in `call` (an interceptor, lower layers) runs in the
        // span and the context too.
        let inner = &mut self.inner;
        let call = span.in_scope(|| CURRENT.sync_scope(context, || inner.call(request)));
        let started = Instant::now();
        Box::pin(
            async move {
                let (result, code) = code_of(context.scope(call).await);
                finish(code, started);
                tracing::info!(code = code.as_str(), "served");
                result
            }
            .instrument(span),
        )
    }
}

/// Opens an `rpc.client` span per unary call and sends the trace context ([module
/// docs](self)).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientTraceLayer;

impl<S> tower::Layer<S> for ClientTraceLayer {
    type Service = ClientTrace<S>;
    fn layer(&self, inner: S) -> ClientTrace<S> {
        ClientTrace { inner }
    }
}

/// The service of [`ClientTraceLayer`].
#[derive(Debug, Clone)]
pub struct ClientTrace<S> {
    inner: S,
}

impl<S> tower::Service<Request<ClientCall>> for ClientTrace<S>
where
    S: tower::Service<Request<ClientCall>, Response = Response<bytes::Bytes>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<bytes::Bytes>;
    type Error = BoxError;
    type Future = BoxFuture<Response<bytes::Bytes>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<ClientCall>) -> Self::Future {
        let parent = parent_of(request.metadata());
        let span = tracing::info_span!(
            "rpc.client",
            rpc.method = request.get_ref().method().path,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
            parent_id = tracing::field::Empty,
            rpc.code = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let context = open(&span, parent);
        request
            .metadata_mut()
            .insert(TRACEPARENT, context.to_traceparent());
        let call = self.inner.call(request);
        let started = Instant::now();
        Box::pin(
            async move {
                let (result, code) = code_of(call.await);
                finish(code, started);
                result
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_bad_values_are_ignored() {
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::parse(value).unwrap();
        assert_eq!(context.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(context.span_id, 0x00f067aa0ba902b7);
        assert!(context.sampled);
        assert_eq!(context.to_traceparent(), value);
        let child = context.child();
        assert_eq!(child.trace_id, context.trace_id);
        assert_ne!(child.span_id, context.span_id);
        // A later version with more fields is read by its first four.
        assert!(TraceContext::parse(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra"
        )
        .is_some());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
        let root = TraceContext::new_root();
        assert_ne!(root.trace_id, TraceContext::new_root().trace_id);
        assert_eq!(TraceContext::parse(&root.to_traceparent()), Some(root));
    }

    #[tokio::test]
    async fn the_current_context_is_the_scopes() {
        assert_eq!(TraceContext::current(), None);
        let context = TraceContext::new_root();
        let seen = context.scope(async { TraceContext::current() }).await;
        assert_eq!(seen, Some(context));
        let mut request = Request::new(());
        request = context
            .scope(async move { propagate(request).unwrap() })
            .await;
        let sent = TraceContext::parse(request.metadata().get(TRACEPARENT).unwrap()).unwrap();
        assert_eq!(sent.trace_id, context.trace_id);
        assert_ne!(sent.span_id, context.span_id);
    }

    /// With the `otel` feature and an OpenTelemetry layer: the client's span is a child of
    /// the caller's `traceparent`, the server's a child of the client's, in one trace.
    #[cfg(feature = "otel")]
    #[test]
    fn spans_join_the_callers_opentelemetry_trace() {
        use opentelemetry::trace::{SpanId, TracerProvider as _};
        use tracing_subscriber::layer::SubscriberExt;

        use crate::service::{BoxMessage, MethodDescriptor, Service, ServiceFuture};

        static ECHO: MethodDescriptor = MethodDescriptor::new("/t.T/Echo");
        struct Echo;
        impl Service for Echo {
            fn name(&self) -> &'static str {
                "t.T"
            }
            fn methods(&self) -> &'static [MethodDescriptor] {
                std::slice::from_ref(&ECHO)
            }
            fn call(&self, _: usize, request: Request<crate::Payload<'_>>) -> ServiceFuture {
                let n: u32 = request.into_inner().decode().unwrap_or(0);
                Box::pin(async move { Ok(Response::new(Box::new(n) as BoxMessage)) })
            }
        }

        let exporter = opentelemetry_sdk::trace::InMemorySpanExporterBuilder::new().build();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _default = tracing::subscriber::set_default(subscriber);
        let caller =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = crate::Server::builder()
                .layer(ServerTraceLayer)
                .add_service(Echo)
                .unwrap()
                .build();
            let (client, served) = crate::memory::pair(1 << 20);
            tokio::spawn(async move { server.serve_connection(served).await });
            let channel = crate::Channel::new(client).layer(ClientTraceLayer);
            let mut request = Request::new(7u32);
            request
                .metadata_mut()
                .insert(TRACEPARENT, caller.to_traceparent());
            let reply = channel.unary::<u32, u32>(request, &ECHO).await.unwrap();
            assert_eq!(reply.into_inner(), 7);
        });
        let _ = provider.force_flush();
        let spans = exporter.get_finished_spans().unwrap();
        let named = |name: &str| {
            spans
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("no {name} span in {spans:?}"))
        };
        let (client, server) = (named("rpc.client"), named("rpc.server"));
        let trace = |s: &opentelemetry_sdk::trace::SpanData| {
            u128::from_be_bytes(s.span_context.trace_id().to_bytes())
        };
        assert_eq!(trace(client), caller.trace_id);
        assert_eq!(trace(server), caller.trace_id);
        assert_eq!(client.parent_span_id, SpanId::from(caller.span_id));
        assert_eq!(server.parent_span_id, client.span_context.span_id());
    }
}
