//! The client side: [`Channel`] multiplexes concurrent calls over one connection, or
//! balances them over several endpoints.

mod balance;
mod calls;
mod channel;
mod dns;
mod target;

pub use channel::{Channel, MAX_REDIAL_BACKOFF, REDIAL_BACKOFF};
pub use target::EndpointStatus;

#[cfg(test)]
mod tests;
