//! The client side: [`Channel`] multiplexes concurrent calls over one connection, or
//! balances them over several endpoints.

mod balance;
mod calls;
mod channel;
mod target;

pub use balance::EndpointStatus;
pub use channel::{Channel, MAX_REDIAL_BACKOFF, REDIAL_BACKOFF};

#[cfg(test)]
mod tests;
