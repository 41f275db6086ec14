//! The standard health service, `grpc.health.v1.Health`, for servers of this framework.
//!
//! Built from the unmodified `health.proto` of gRPC: `Check` answers a service's status,
//! `List` all of them, `Watch` streams a service's status, now and on every change (the
//! protocol Kubernetes probes and load balancers speak). The application sets statuses
//! through a [`HealthReporter`]:
//!
//! ```
//! # async fn f() {
//! use rdmarpc_health::{health_reporter, ServingStatus};
//!
//! let (reporter, health) = health_reporter();
//! reporter.set_service_status("echo.Echo", ServingStatus::Serving);
//! let server = rdmarpc_core::Server::builder().add_service(health).unwrap().build();
//! // ... later, while draining:
//! reporter.set_service_status("echo.Echo", ServingStatus::NotServing);
//! # drop(server); }
//! ```
//!
//! The empty service name is the server as a whole; [`health_reporter`] reports it
//! `SERVING`. A watch of an unknown service gets `SERVICE_UNKNOWN` and stays open, as
//! the protocol asks; watchers hold no state in the reporter (each follows one change
//! counter), so any number of them, on any names, costs the reporter nothing.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use rdmarpc_core::codegen::NamedService;
use rdmarpc_core::{BoxStream, Request, Response, Status};
use tokio::sync::watch;

pub mod pb {
    //! The generated `grpc.health.v1` package: messages, client and server.
    rdmarpc_core::include_proto!("grpc.health.v1");
}

/// The encoded `FileDescriptorSet` of `health.proto`, for the reflection service
/// (`rdmarpc_reflection::Builder::register_encoded_file_descriptor_set`).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/health_descriptor_set.bin"));

pub use pb::health_check_response::ServingStatus;
use pb::{
    health_server::{Health, HealthServer},
    HealthCheckRequest, HealthCheckResponse, HealthListRequest, HealthListResponse,
};

/// The most services `List` answers; beyond, it fails with `RESOURCE_EXHAUSTED`, as the
/// protocol allows.
pub const MAX_LISTED_SERVICES: usize = 10_000;

/// A reporter and the health service it feeds, with the server as a whole (`""`)
/// reported `SERVING`.
pub fn health_reporter() -> (HealthReporter, HealthServer<HealthService>) {
    let reporter = HealthReporter::new();
    reporter.set_service_status("", ServingStatus::Serving);
    let service = HealthService {
        shared: reporter.shared.clone(),
    };
    (reporter, HealthServer::new(service))
}

/// Sets the statuses a [`HealthService`] reports. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HealthReporter {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    statuses: RwLock<HashMap<String, ServingStatus>>,
    /// Bumped on every change; watchers re-read their service's status.
    changes: watch::Sender<u64>,
}

impl Shared {
    fn status(&self, service: &str) -> Option<ServingStatus> {
        self.statuses.read().get(service).copied()
    }
}

impl Default for HealthReporter {
    fn default() -> Self {
        HealthReporter::new()
    }
}

impl HealthReporter {
    /// A reporter with no statuses (see [`health_reporter`] for one with its service).
    pub fn new() -> HealthReporter {
        HealthReporter {
            shared: Arc::new(Shared {
                statuses: RwLock::new(HashMap::new()),
                changes: watch::Sender::new(0),
            }),
        }
    }

    /// A health service reporting this reporter's statuses.
    pub fn service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService {
            shared: self.shared.clone(),
        })
    }

    /// Reports generated service `S` as `SERVING`.
    pub fn set_serving<S: NamedService>(&self) {
        self.set_service_status(S::NAME, ServingStatus::Serving);
    }

    /// Reports generated service `S` as `NOT_SERVING`.
    pub fn set_not_serving<S: NamedService>(&self) {
        self.set_service_status(S::NAME, ServingStatus::NotServing);
    }

    /// Reports `service` (`package.Service`, or `""` for the whole server) as `status`;
    /// its watchers see the change.
    pub fn set_service_status(&self, service: impl Into<String>, status: ServingStatus) {
        let previous = self.shared.statuses.write().insert(service.into(), status);
        if previous != Some(status) {
            self.shared.changes.send_modify(|n| *n += 1);
        }
    }

    /// Forgets `service`: `Check` answers `NOT_FOUND`, watchers see `SERVICE_UNKNOWN`.
    pub fn clear_service_status(&self, service: &str) {
        if self.shared.statuses.write().remove(service).is_some() {
            self.shared.changes.send_modify(|n| *n += 1);
        }
    }

    /// The status reported for `service`, if any.
    pub fn status(&self, service: &str) -> Option<ServingStatus> {
        self.shared.status(service)
    }
}

/// The `grpc.health.v1.Health` implementation; serve it wrapped in its `HealthServer`
/// (as [`health_reporter`] returns it).
#[derive(Debug, Clone)]
pub struct HealthService {
    shared: Arc<Shared>,
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

impl Health for HealthService {
    type WatchStream = BoxStream<HealthCheckResponse>;

    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        match self.shared.status(service) {
            Some(status) => Ok(Response::new(response(status))),
            None => Err(Status::not_found(format!("unknown service {service:?}"))),
        }
    }

    async fn list(
        &self,
        _request: Request<HealthListRequest>,
    ) -> Result<Response<HealthListResponse>, Status> {
        let statuses = self.shared.statuses.read();
        if statuses.len() > MAX_LISTED_SERVICES {
            return Err(Status::resource_exhausted(format!(
                "{} services, more than {MAX_LISTED_SERVICES}",
                statuses.len()
            )));
        }
        let statuses = statuses
            .iter()
            .map(|(name, status)| (name.clone(), response(*status)))
            .collect();
        Ok(Response::new(HealthListResponse { statuses }))
    }

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        let shared = self.shared.clone();
        let changes = shared.changes.subscribe();
        // Sends the current status, then each different one after a change. A watcher
        // that does not read holds the stream at its window: nothing queues up here.
        let stream = futures_util::stream::unfold(
            (shared, changes, service, None::<ServingStatus>),
            |(shared, mut changes, service, last)| async move {
                loop {
                    // Seen before reading, so that a change while reading is not lost.
                    changes.borrow_and_update();
                    let now = shared
                        .status(&service)
                        .unwrap_or(ServingStatus::ServiceUnknown);
                    if last != Some(now) {
                        return Some((Ok(response(now)), (shared, changes, service, Some(now))));
                    }
                    // The reporter lives as long as the service: `changed` fails only
                    // when both are gone.
                    changes.changed().await.ok()?;
                }
            },
        );
        Ok(Response::new(Box::pin(stream) as Self::WatchStream))
    }
}
