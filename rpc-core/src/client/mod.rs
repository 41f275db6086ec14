//! The client side: [`Channel`] multiplexes concurrent calls over one connection, or
//! balances them over several endpoints.

mod balance;
pub(crate) mod calls;
mod channel;
pub(crate) mod connection;
mod dial;
mod target;

pub use balance::EndpointStatus;
pub use channel::Channel;
pub use dial::{MAX_REDIAL_BACKOFF, REDIAL_BACKOFF};

#[cfg(test)]
mod spin_tests;
#[cfg(test)]
mod tests;
