//! The server side: a [`Server`] routes requests from any [`Listener`] to services.

mod admission;
pub(crate) mod connection;
mod lifetime;
mod respond;
mod router;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

pub use router::RegisterError;
pub(crate) use router::Router;

use crate::service::Service;
use crate::transport::{Connection, Listener, TransportError};
use crate::ServerConfig;

/// Serves services over connections of any transport.
///
/// ```no_run
/// # async fn f<L: rdmarpc_core::Listener>(listener: L, svc: impl rdmarpc_core::codegen::Service) {
/// let server = rdmarpc_core::Server::builder().add_service(svc).unwrap().build();
/// server.serve_with_shutdown(listener, async { tokio::signal::ctrl_c().await.unwrap() }).await.unwrap();
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    router: Router,
    config: ServerConfig,
    /// The accounts every connection charges: the server's, each peer's.
    ledger: crate::account::Ledger,
    /// Flips to true when a graceful shutdown starts; connections watch it.
    shutdown: watch::Sender<bool>,
}

/// Collects services and settings for a [`Server`].
#[derive(Default)]
pub struct ServerBuilder {
    router: Router,
    config: ServerConfig,
    /// tower layers, in the order added (the first outermost).
    layers: Vec<crate::layer::WrapServer>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("router", &self.router)
            .field("config", &self.config)
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl ServerBuilder {
    /// Adds a service (a generated `FooServer`).
    ///
    /// # Errors
    /// [`RegisterError`] (naming both paths) if one of its method ids collides with one
    /// already registered (or the method is registered twice).
    pub fn add_service(mut self, service: impl Service) -> Result<Self, RegisterError> {
        self.router.add(Arc::new(service))?;
        Ok(self)
    }

    /// Replaces the settings.
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Runs every call of every service through `layer` (a tower layer): concurrency
    /// and rate limits, timeouts, load shedding, authentication, metrics. The layered
    /// service takes a [`Request`](crate::Request) of
    /// [`ServerCall`](crate::layer::ServerCall) and answers a
    /// [`Response`](crate::Response) of [`ServerAnswer`](crate::layer::ServerAnswer);
    /// its errors become statuses ([`layer::to_status`](crate::layer::to_status)). Layers
    /// added first are outermost, as with `tower::ServiceBuilder`. The server's own
    /// limits ([`ServerConfig`]) apply before any layer: a call waiting in a layer holds
    /// its server permit.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let server = rdmarpc_core::Server::builder()
    ///     .layer(tower::limit::ConcurrencyLimitLayer::new(64))
    ///     .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(5)))
    ///     .build();
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<crate::layer::ServerStack> + Send + Sync + 'static,
        L::Service: tower::Service<
                crate::Request<crate::layer::ServerCall>,
                Response = crate::Response<crate::layer::ServerAnswer>,
            > + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<crate::Request<crate::layer::ServerCall>>>::Error:
            Into<crate::layer::BoxError>,
        <L::Service as tower::Service<crate::Request<crate::layer::ServerCall>>>::Future:
            Send + 'static,
    {
        use tower::ServiceExt;
        self.layers.push(Box::new(move |inner| {
            tower::util::BoxCloneSyncService::new(layer.layer(inner).map_err(Into::into))
        }));
        self
    }

    /// Builds the server.
    pub fn build(mut self) -> Server {
        if !self.layers.is_empty() {
            let stack = self
                .layers
                .drain(..)
                .rev()
                .fold(crate::layer::server_bottom(), |inner, wrap| wrap(inner));
            self.router.wrap(|service| {
                Arc::new(crate::layer::Layered {
                    inner: service,
                    stack: stack.clone(),
                })
            });
        }
        let (shutdown, _) = watch::channel(false);
        Server {
            inner: Arc::new(Inner {
                ledger: crate::account::Ledger::new(self.config.limits()),
                router: self.router,
                config: self.config,
                shutdown,
            }),
        }
    }
}

impl crate::MethodKinds for Inner {
    fn kind(&self, method_id: u32) -> Option<crate::codegen::MethodKind> {
        self.router.get(method_id).map(|route| route.method.kind)
    }

    fn method(&self, path: &str) -> Option<(u32, crate::codegen::MethodKind)> {
        let route = self.router.get(crate::codegen::method_id(path))?;
        // The id picks the route; the name decides: a path whose hash collides with a
        // method's id is not that method.
        (route.method.path == path).then_some((route.method.id, route.method.kind))
    }
}

impl Server {
    /// A builder.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Accepts connections from `listener` and serves each on its own task, forever.
    ///
    /// # Errors
    /// An error of the listener itself (not of one connection).
    pub async fn serve<L: Listener>(&self, listener: L) -> Result<(), TransportError> {
        self.serve_with_shutdown(listener, std::future::pending())
            .await
    }

    /// Like [`Server::serve`] until `signal` completes, then shuts down gracefully: stops
    /// accepting, tells every client (GOAWAY), answers new requests with `UNAVAILABLE`,
    /// lets in-flight calls finish (up to [`ServerConfig::shutdown_grace`]) and closes.
    ///
    /// # Errors
    /// An error of the listener itself.
    pub async fn serve_with_shutdown<L: Listener>(
        &self,
        mut listener: L,
        signal: impl Future<Output = ()>,
    ) -> Result<(), TransportError> {
        tracing::info!(addr = %listener.local_addr(), "serving");
        // Each connection task holds a clone of `alive`; when all are gone, `done` closes.
        let (alive, mut done) = tokio::sync::mpsc::channel::<()>(1);
        tokio::pin!(signal);
        let result = loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(conn) => self.spawn_connection(conn, alive.clone()),
                    Err(e) => break Err(e),
                },
                () = &mut signal => break Ok(()),
            }
        };
        // Closed before the GOAWAYs go out: a client dialling again on GOAWAY must not
        // land in this listener's backlog.
        let drains = listener.stop_accepting();
        self.shutdown();
        let grace = self.inner.config.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        // Connections established before the stop are served draining, not dropped with
        // their requests unread: GOAWAY, and every request refused as not started.
        if drains {
            while let Ok(Ok(conn)) = tokio::time::timeout_at(deadline, listener.accept()).await {
                self.spawn_connection(conn, alive.clone());
            }
        }
        drop(listener);
        drop(alive);
        if tokio::time::timeout_at(deadline, done.recv())
            .await
            .is_err()
        {
            tracing::warn!(?grace, "shutdown grace elapsed with calls still running");
        }
        result
    }

    /// Serves `conn` on a task of its own holding `alive` until it ends.
    fn spawn_connection<C: Connection>(&self, conn: C, alive: tokio::sync::mpsc::Sender<()>) {
        let server = self.clone();
        tokio::spawn(async move {
            server.serve_connection(conn).await;
            drop(alive);
        });
    }

    /// Starts a graceful shutdown of every connection this server serves.
    pub fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
    }

    /// Serves one connection until the peer closes it, it fails, or a shutdown completes.
    /// A malformed frame closes this connection only, with a logged reason.
    pub async fn serve_connection<C: Connection>(&self, conn: C) {
        connection::serve(self.inner.clone(), conn).await;
    }
}

#[cfg(test)]
mod spin_tests;
#[cfg(test)]
mod stream_regressions;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unsendable_tests;
