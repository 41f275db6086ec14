//! [`RouteGuideService`], [`WrappedService`] and [`ImageService`]: the other services
//! of ghz's examples, each as small as its examples need.

use rdmarpc_core::{BoxStream, Request, Response, Status, Streaming};

use crate::image::image_service_server;
use crate::image::{ImageSaveRequest, ImageSaveResponse};
use crate::routeguide::route_guide_server::RouteGuide;
use crate::routeguide::{Feature, Point, Rectangle, RouteNote, RouteSummary};
use crate::wrapped::wrapped_service_server;

/// `routeguide.RouteGuide` over a map of ten features along a line.
#[derive(Debug, Default, Clone, Copy)]
pub struct RouteGuideService;

/// The map: ten features from (40.0, -75.0) to (40.9, -74.1), as points times 10^7.
fn features() -> impl Iterator<Item = Feature> {
    (0..10).map(|i| Feature {
        name: format!("feature {i}"),
        location: Some(Point {
            latitude: 400_000_000 + i * 10_000_000,
            longitude: -750_000_000 + i * 10_000_000,
        }),
    })
}

fn within(point: &Point, rectangle: &Rectangle) -> bool {
    let (lo, hi) = (
        rectangle.lo.unwrap_or_default(),
        rectangle.hi.unwrap_or_default(),
    );
    let (lat, long) = (
        (lo.latitude.min(hi.latitude))..=(lo.latitude.max(hi.latitude)),
        (lo.longitude.min(hi.longitude))..=(lo.longitude.max(hi.longitude)),
    );
    lat.contains(&point.latitude) && long.contains(&point.longitude)
}

impl RouteGuide for RouteGuideService {
    type ListFeaturesStream = BoxStream<Feature>;
    type RouteChatStream = BoxStream<RouteNote>;

    async fn get_feature(&self, request: Request<Point>) -> Result<Response<Feature>, Status> {
        let point = request.into_inner();
        let found = features().find(|f| f.location == Some(point));
        Ok(Response::new(found.unwrap_or(Feature {
            name: String::new(),
            location: Some(point),
        })))
    }

    async fn list_features(
        &self,
        request: Request<Rectangle>,
    ) -> Result<Response<Self::ListFeaturesStream>, Status> {
        let rectangle = request.into_inner();
        let found: Vec<_> = features()
            .filter(|f| f.location.is_some_and(|p| within(&p, &rectangle)))
            .map(Ok)
            .collect();
        Ok(Response::new(
            Box::pin(futures_util::stream::iter(found)) as Self::ListFeaturesStream
        ))
    }

    async fn record_route(
        &self,
        request: Request<Streaming<Point>>,
    ) -> Result<Response<RouteSummary>, Status> {
        let mut points = request.into_inner();
        let mut summary = RouteSummary::default();
        while let Some(point) = points.message().await? {
            summary.point_count = summary.point_count.saturating_add(1);
            if features().any(|f| f.location == Some(point)) {
                summary.feature_count = summary.feature_count.saturating_add(1);
            }
        }
        Ok(Response::new(summary))
    }

    async fn route_chat(
        &self,
        request: Request<Streaming<RouteNote>>,
    ) -> Result<Response<Self::RouteChatStream>, Status> {
        let notes = request.into_inner();
        Ok(Response::new(Box::pin(notes) as Self::RouteChatStream))
    }
}

/// `wrapped.WrappedService`: answers a string with itself.
#[derive(Debug, Default, Clone, Copy)]
pub struct WrappedService;

impl wrapped_service_server::WrappedService for WrappedService {
    async fn get_message(&self, request: Request<String>) -> Result<Response<String>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

/// `bytes.ImageService`: takes any image, keeps nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct ImageService;

impl image_service_server::ImageService for ImageService {
    async fn save(
        &self,
        _request: Request<ImageSaveRequest>,
    ) -> Result<Response<ImageSaveResponse>, Status> {
        Ok(Response::new(ImageSaveResponse {}))
    }
}
