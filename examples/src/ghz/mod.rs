//! The services ghz's documentation calls in its examples (`helloworld.Greeter`,
//! `routeguide.RouteGuide`, `wrapped.WrappedService`, `bytes.ImageService`), and one
//! server for all four with health and reflection ([`ghz_server`], the
//! `greeter-server` binary), so that ghz's documented command lines run against this
//! framework as they are written.

mod greeter;
mod others;

pub use self::greeter::GreeterService;
pub use self::others::{ImageService, RouteGuideService, WrappedService};

use crate::helloworld::greeter_server::GreeterServer;
use crate::image::image_service_server::ImageServiceServer;
use crate::routeguide::route_guide_server::RouteGuideServer;
use crate::wrapped::wrapped_service_server::WrappedServiceServer;

/// The full names of the four services.
pub const SERVICES: [&str; 4] = [
    "helloworld.Greeter",
    "routeguide.RouteGuide",
    "wrapped.WrappedService",
    "bytes.ImageService",
];

/// A server of the four services, health (all `SERVING`) and reflection (v1 and
/// v1alpha, listing them), with `config`.
///
/// # Errors
/// A method id collision between the services (there is none).
pub fn ghz_server(
    config: rdmarpc_core::ServerConfig,
) -> anyhow::Result<(rdmarpc_core::Server, rdmarpc_health::HealthReporter)> {
    let (reporter, health) = rdmarpc_health::health_reporter();
    for name in SERVICES {
        reporter.set_service_status(name, rdmarpc_health::ServingStatus::Serving);
    }
    let reflection = crate::transport::reflection(&SERVICES)?;
    let server = rdmarpc_core::Server::builder()
        .add_service(GreeterServer::new(GreeterService))
        .map_err(anyhow::Error::msg)?
        .add_service(RouteGuideServer::new(RouteGuideService))
        .map_err(anyhow::Error::msg)?
        .add_service(WrappedServiceServer::new(WrappedService))
        .map_err(anyhow::Error::msg)?
        .add_service(ImageServiceServer::new(ImageService))
        .map_err(anyhow::Error::msg)?
        .add_service(health)
        .map_err(anyhow::Error::msg)?
        .add_service(reflection.v1())
        .map_err(anyhow::Error::msg)?
        .add_service(reflection.v1alpha())
        .map_err(anyhow::Error::msg)?
        .config(config)
        .build();
    Ok((server, reporter))
}
