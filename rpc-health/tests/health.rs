//! The health service end to end over rdmarpc-core's in-memory transport.

use std::time::Duration;

use rdmarpc_core::memory;
use rdmarpc_core::{Channel, Code, Server};
use rdmarpc_health::pb::health_client::HealthClient;
use rdmarpc_health::pb::{HealthCheckRequest, HealthListRequest};
use rdmarpc_health::{health_reporter, ServingStatus};

fn request(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.into(),
    }
}

#[tokio::test]
async fn check_list_and_watch_follow_the_reporter() {
    let (reporter, health) = health_reporter();
    let server = Server::builder().add_service(health).unwrap().build();
    let (client_end, server_end) = memory::pair(1 << 20);
    tokio::spawn(async move { server.serve_connection(server_end).await });
    let client = HealthClient::new(Channel::new(client_end));

    let overall = client.check(request("")).await.unwrap().into_inner();
    assert_eq!(overall.status(), ServingStatus::Serving);
    let unknown = client.check(request("echo.Echo")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    let mut watch = client
        .watch(request("echo.Echo"))
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::ServiceUnknown);
    reporter.set_service_status("echo.Echo", ServingStatus::Serving);
    let next = watch.message().await.unwrap().unwrap();
    assert_eq!(next.status(), ServingStatus::Serving);
    // The same status again is no change; a different one is.
    reporter.set_service_status("echo.Echo", ServingStatus::Serving);
    reporter.set_service_status("echo.Echo", ServingStatus::NotServing);
    let next = watch.message().await.unwrap().unwrap();
    assert_eq!(next.status(), ServingStatus::NotServing);
    // Nothing more until the next change.
    let idle = tokio::time::timeout(Duration::from_millis(100), watch.message()).await;
    assert!(idle.is_err(), "no message without a change: {idle:?}");
    reporter.clear_service_status("echo.Echo");
    let next = watch.message().await.unwrap().unwrap();
    assert_eq!(next.status(), ServingStatus::ServiceUnknown);

    reporter.set_service_status("kv.Kv", ServingStatus::Serving);
    let list = client
        .list(HealthListRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut names: Vec<_> = list.statuses.keys().cloned().collect();
    names.sort();
    assert_eq!(names, ["", "kv.Kv"]);
    assert_eq!(list.statuses["kv.Kv"].status(), ServingStatus::Serving);
}
