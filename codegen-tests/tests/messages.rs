//! prost-generated messages (nested, enums, oneofs, maps, cross-package fields, `bytes::Bytes`)
//! survive an encode/decode round trip.

use std::collections::HashMap;

use codegen_tests::acme::common::{self, address, AuditRecord, Currency, Money};
use codegen_tests::acme::store::{self, item, order, receipt, Item, Order, Receipt};
use prost::Message;

fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(message: &M) {
    let bytes = message.encode_to_vec();
    assert_eq!(bytes.len(), message.encoded_len());
    assert_eq!(&M::decode(bytes.as_slice()).unwrap(), message);
}

fn euros(units: i64) -> Money {
    Money {
        currency: Currency::Eur as i32,
        units,
        nanos: 0,
    }
}

fn item() -> Item {
    Item {
        sku: "sku-1".to_owned(),
        name: "Lamp".to_owned(),
        price: Some(euros(30)),
        kind: item::Kind::Physical as i32,
        thumbnail: prost::bytes::Bytes::from_static(b"\x89PNG"),
    }
}

fn order(delivery: Option<order::Delivery>) -> Order {
    Order {
        id: 7,
        lines: vec![order::Line {
            item: Some(item()),
            quantity: 2,
        }],
        delivery,
        labels: HashMap::from([("gift".to_owned(), "yes".to_owned())]),
    }
}

#[test]
fn every_oneof_case_round_trips() {
    let deliveries = [
        None,
        Some(order::Delivery::Email("a@example.invalid".to_owned())),
        Some(order::Delivery::ShipTo(common::Address {
            street: "1 Main St".to_owned(),
            city: "Springfield".to_owned(),
            geo: Some(address::Geo {
                lat: 1.5,
                lon: -2.25,
            }),
        })),
        Some(order::Delivery::Pickup(order::Pickup {
            store_id: "s-9".to_owned(),
            slot: Some(order::pickup::Slot { day: 3, hour: 17 }),
        })),
    ];
    for delivery in deliveries {
        round_trip(&order(delivery));
    }
}

#[test]
fn enums_convert_both_ways_and_keep_proto_names() {
    let receipt = Receipt {
        order_id: 7,
        total: Some(euros(60)),
        status: receipt::Status::Cancelled as i32,
    };
    round_trip(&receipt);
    assert_eq!(receipt.status(), receipt::Status::Cancelled);
    assert_eq!(Currency::try_from(2), Ok(Currency::Usd));
    assert_eq!(item::Kind::Digital.as_str_name(), "KIND_DIGITAL");
    assert_eq!(
        receipt::Status::from_str_name("STATUS_ACCEPTED"),
        Some(receipt::Status::Accepted)
    );
}

#[test]
fn messages_of_one_package_nest_messages_of_the_other() {
    // acme.common.AuditRecord holds an acme.store.Order, which holds acme.common types.
    let record = AuditRecord {
        actor: "ops".to_owned(),
        order: Some(order(Some(order::Delivery::Email("x".to_owned())))),
        refund: Some(euros(-5)),
    };
    round_trip(&record);
    let _: &store::Order = record.order.as_ref().unwrap();
}

#[test]
fn unknown_enum_values_survive_as_integers() {
    let mut item = item();
    item.kind = 42;
    round_trip(&item);
    assert_eq!(
        item.kind(),
        item::Kind::Unspecified,
        "the accessor falls back to the default"
    );
}
