//! The RDMA transport's own protocol, sans-IO: what a slot carries, the credit
//! accounting that keeps every SEND matched by a posted RECV, and the loan accounting
//! of rendezvous transfers.

mod credits;
mod lie;
mod loans;
mod message;
pub(crate) mod session;

pub(crate) use credits::Credits;
pub(crate) use lie::Lie;
pub(crate) use loans::{Borrower, Lender, LoanLimit};
pub(crate) use message::{
    split_batch, Kind, Prefix, Rendezvous, MAX_BATCH, PIECE_TOKEN_LEN, PREFIX_LEN, RENDEZVOUS_LEN,
};
