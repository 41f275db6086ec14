//! Watching an endpoint's health (`grpc.health.v1.Health/Watch`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;

use super::endpoint::{EndpointState, Health};
use crate::client::connection::Shared;
use crate::client::dial::{jitter, next_backoff, REDIAL_BACKOFF};
use crate::service::{MethodDescriptor, MethodKind};
use crate::transport::Connection;
use crate::{ClientConfig, Code, Request, Status};

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub(super) service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub(super) status: i32,
}

static HEALTH_WATCH: MethodDescriptor =
    MethodDescriptor::with_kind("/grpc.health.v1.Health/Watch", MethodKind::ServerStreaming);

/// Follows the endpoint's health over its connection (`Health/Watch`) until the
/// connection ends; a server without the health service counts as serving.
pub(super) async fn watch_health<C: Connection>(
    shared: Weak<Shared<C>>,
    state: Arc<EndpointState>,
    service: String,
    config: ClientConfig,
) {
    // The watch lives as long as the connection: no call timeout, no retries.
    let mut watch_config = config;
    watch_config.timeout = None;
    watch_config.retry = None;
    let mut backoff: Option<Duration> = None;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let channel = crate::client::Channel::over(strong, watch_config.clone());
        let request = Request::new(HealthCheckRequest {
            service: service.clone(),
        });
        let ended = match channel
            .server_streaming_with(request, &HEALTH_WATCH, |bytes| {
                <HealthCheckResponse as prost::Message>::decode(bytes)
            })
            .await
        {
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match stream.next().await {
                        Some(Ok(answer)) => {
                            backoff = None;
                            state.set_health(if answer.status == 1 {
                                Health::Serving
                            } else {
                                Health::NotServing
                            });
                        }
                        Some(Err(status)) => break status,
                        None => break Status::unavailable("the health watch ended"),
                    }
                }
            }
            Err(status) => status,
        };
        drop(channel);
        if ended.code() == Code::Unimplemented {
            tracing::info!("endpoint has no health service; counted as serving");
            state.set_health(Health::Serving);
            return;
        }
        tracing::debug!("health watch failed: {}", ended.message());
        state.set_health(Health::NotServing);
        let wait = backoff.map_or(REDIAL_BACKOFF, next_backoff);
        backoff = Some(wait);
        tokio::time::sleep(jitter(wait)).await;
    }
}
