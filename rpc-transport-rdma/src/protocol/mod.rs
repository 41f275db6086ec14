//! The RDMA transport's own protocol, sans-IO: what a slot carries and the credit
//! accounting that keeps every SEND matched by a posted RECV.

mod credits;
mod message;

pub(crate) use credits::Credits;
pub(crate) use message::{Kind, Prefix, Rendezvous, PREFIX_LEN, RENDEZVOUS_LEN};
