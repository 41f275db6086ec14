//! The generated clients and servers, end to end over rdmarpc-core's in-memory transport: the server
//! traits are implemented with `async fn`, every client method is called, and the routing data
//! (`NAME`, `METHODS`, method ids) is what the wire expects.

use std::collections::HashMap;
use std::sync::Mutex;

use codegen_tests::acme::common::{audit_client::AuditClient, audit_server, AuditRecord, Money};
use codegen_tests::acme::store::{
    catalog_client::CatalogClient, catalog_methods, catalog_server, orders_client::OrdersClient,
    orders_server, receipt, CancelRequest, GetItemRequest, Item, MatchRequest, Order, Receipt,
};
use codegen_tests::manual_types::{PingReply, PingRequest};
use codegen_tests::ping::{ping_client::PingClient, ping_methods, ping_server};
use prost::Message;
use rdmarpc_core::codegen::{method_id, NamedService, Service};
use rdmarpc_core::memory::{self, MemoryConnection};
use rdmarpc_core::{Channel, Code, Payload, Request, Response, Server, Status};

/// An in-memory catalogue.
#[derive(Debug, Default)]
struct Shop {
    items: Mutex<HashMap<String, Item>>,
}

impl catalog_server::Catalog for Shop {
    async fn get_item(&self, request: Request<GetItemRequest>) -> Result<Response<Item>, Status> {
        let sku = &request.get_ref().sku;
        let item = self.items.lock().unwrap().get(sku).cloned();
        item.map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no item {sku}")))
    }

    async fn put_item(&self, request: Request<Item>) -> Result<Response<()>, Status> {
        let item = request.into_inner();
        self.items.lock().unwrap().insert(item.sku.clone(), item);
        Ok(Response::new(()))
    }

    async fn r#match(&self, request: Request<MatchRequest>) -> Result<Response<Item>, Status> {
        let query = request.into_inner().query;
        let items = self.items.lock().unwrap();
        let found = items
            .values()
            .find(|item| item.name.contains(&query))
            .cloned();
        found
            .map(Response::new)
            .ok_or_else(|| Status::not_found(query))
    }
}

/// Accepts orders and prices them at 10 units per line item.
#[derive(Debug)]
struct Till;

impl orders_server::Orders for Till {
    async fn place_order(&self, request: Request<Order>) -> Result<Response<Receipt>, Status> {
        let order = request.into_inner();
        let quantity: u32 = order.lines.iter().map(|line| line.quantity).sum();
        Ok(Response::new(Receipt {
            order_id: order.id,
            total: Some(Money {
                units: 10 * i64::from(quantity),
                ..Money::default()
            }),
            status: receipt::Status::Accepted as i32,
        }))
    }

    async fn cancel(&self, request: Request<CancelRequest>) -> Result<Response<Receipt>, Status> {
        Ok(Response::new(Receipt {
            order_id: request.get_ref().order_id,
            total: None,
            status: receipt::Status::Cancelled as i32,
        }))
    }
}

/// Records audit entries and reads request metadata.
#[derive(Debug)]
struct Auditor;

impl audit_server::Audit for Auditor {
    async fn record(&self, request: Request<AuditRecord>) -> Result<Response<Receipt>, Status> {
        if request.metadata().get("actor-checked") != Some("yes") {
            return Err(Status::new(Code::PermissionDenied, "unchecked actor"));
        }
        let record = request.into_inner();
        Ok(Response::new(Receipt {
            order_id: record.order.map_or(0, |order| order.id),
            total: record.refund,
            status: receipt::Status::Cancelled as i32,
        }))
    }
}

/// The manual service.
#[derive(Debug)]
struct Pong;

impl ping_server::Ping for Pong {
    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
        Ok(Response::new(PingReply {
            seq: request.get_ref().seq,
        }))
    }
}

/// A channel to a server hosting all four services.
fn connect() -> Channel<MemoryConnection> {
    let server = Server::builder()
        .add_service(catalog_server::CatalogServer::new(Shop::default()))
        .and_then(|b| b.add_service(orders_server::OrdersServer::new(Till)))
        .and_then(|b| b.add_service(audit_server::AuditServer::new(Auditor)))
        .and_then(|b| b.add_service(ping_server::PingServer::new(Pong)))
        .expect("method ids are distinct")
        .build();
    let (client_end, server_end) = memory::pair(1 << 20);
    tokio::spawn(async move { server.serve_connection(server_end).await });
    Channel::new(client_end)
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::test]
async fn every_generated_client_method_reaches_its_handler() {
    let channel = connect();
    let catalog = CatalogClient::new(channel.clone());
    let lamp = Item {
        sku: "sku-1".to_owned(),
        name: "Desk lamp".to_owned(),
        ..Item::default()
    };

    // Bare messages and `Request`s both convert; `()` stands for google.protobuf.Empty.
    let put: Response<()> = catalog.put_item(lamp.clone()).await.unwrap();
    put.into_inner();
    let got = catalog
        .get_item(Request::new(GetItemRequest {
            sku: "sku-1".to_owned(),
        }))
        .await
        .unwrap();
    assert_eq!(got.into_inner(), lamp);
    let matched = catalog
        .r#match(MatchRequest {
            query: "lamp".to_owned(),
        })
        .await
        .unwrap();
    assert_eq!(matched.get_ref().sku, "sku-1");

    // A handler's status reaches the caller.
    let missing = catalog
        .get_item(GetItemRequest {
            sku: "nope".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(missing.message(), "no item nope");

    let orders = OrdersClient::new(channel.clone());
    let order = Order {
        id: 9,
        lines: vec![codegen_tests::acme::store::order::Line {
            item: Some(lamp),
            quantity: 3,
        }],
        ..Order::default()
    };
    // Client futures are Send, so they can be spawned.
    let receipt = tokio::spawn(assert_send(async move { orders.place_order(order).await }))
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(receipt.order_id, 9);
    assert_eq!(receipt.total.unwrap().units, 30);
    assert_eq!(receipt.status(), receipt::Status::Accepted);
    let orders = OrdersClient::new(channel.clone());
    let cancelled = orders.cancel(CancelRequest { order_id: 9 }).await.unwrap();
    assert_eq!(cancelled.get_ref().status(), receipt::Status::Cancelled);

    // Cross-package request and response types; metadata travels with the request.
    let audit = AuditClient::new(channel.clone());
    let record = AuditRecord {
        actor: "ops".to_owned(),
        order: Some(Order {
            id: 4,
            ..Order::default()
        }),
        refund: None,
    };
    let denied = audit.record(record.clone()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let mut request = Request::new(record);
    request.metadata_mut().insert("actor-checked", "yes");
    assert_eq!(audit.record(request).await.unwrap().get_ref().order_id, 4);

    // The protoless service.
    let ping = PingClient::new(channel);
    assert_eq!(
        ping.ping(PingRequest { seq: 77 })
            .await
            .unwrap()
            .get_ref()
            .seq,
        77
    );
}

#[test]
fn routing_data_matches_the_wire_format() {
    assert_eq!(
        <catalog_server::CatalogServer<Shop> as NamedService>::NAME,
        "acme.store.Catalog"
    );
    assert_eq!(
        <ping_server::PingServer<Pong> as NamedService>::NAME,
        "ping.Ping"
    );
    let paths: Vec<_> = catalog_methods::METHODS.iter().map(|m| m.path).collect();
    assert_eq!(
        paths,
        [
            "/acme.store.Catalog/GetItem",
            "/acme.store.Catalog/PutItem",
            "/acme.store.Catalog/Match",
        ]
    );
    for method in catalog_methods::METHODS
        .iter()
        .chain(&ping_methods::METHODS)
    {
        assert_eq!(method.id, method_id(method.path));
    }

    let server = catalog_server::CatalogServer::new(Shop::default());
    assert_eq!(Service::name(&server), "acme.store.Catalog");
    assert!(std::ptr::eq(
        server.methods(),
        &catalog_methods::METHODS[..]
    ));
}

#[tokio::test]
async fn servers_reject_bad_payloads_and_unknown_indexes() {
    let server = catalog_server::CatalogServer::new(Shop::default());
    // Field 1 (sku, a string) with a length running past the end of the buffer.
    let garbage = [0x0a, 0x10, b'x'];
    let error = server
        .call(0, Request::new(Payload::Borrowed(&garbage[..])))
        .await
        .err()
        .unwrap();
    assert_eq!(error.code(), Code::InvalidArgument);
    let error = server
        .call(3, Request::new(Payload::Borrowed(&[][..])))
        .await
        .err()
        .unwrap();
    assert_eq!(error.code(), Code::Unimplemented);
    assert!(
        error.message().contains("/acme.store.Catalog/#3"),
        "{error:?}"
    );

    // A valid payload runs the handler; the response is a type-erased message.
    let payload = Item {
        sku: "a".to_owned(),
        ..Item::default()
    }
    .encode_to_vec();
    let response = server
        .call(1, Request::new(Payload::Borrowed(&payload[..])))
        .await
        .unwrap();
    assert_eq!(response.get_ref().encoded_len(), 0, "PutItem answers Empty");
}

#[test]
fn generated_types_are_debug_and_clone_without_bounds_on_their_parameters() {
    /// Neither Debug nor Clone.
    struct Opaque;
    impl ping_server::Ping for Opaque {
        async fn ping(&self, _: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
            Err(Status::unimplemented("opaque"))
        }
    }
    let server = ping_server::PingServer::new(Opaque);
    let clone = server.clone();
    assert!(std::ptr::eq(server.get_ref(), clone.get_ref()));
    assert_eq!(
        format!("{server:?}"),
        "PingServer { service: \"ping.Ping\", .. }"
    );
    let shared = std::sync::Arc::new(Till);
    let _ = orders_server::OrdersServer::from_arc(shared);
}
