//! The client side: [`Channel`] multiplexes concurrent calls over one connection.

mod calls;
mod channel;

pub use channel::{Channel, MAX_REDIAL_BACKOFF, REDIAL_BACKOFF};

#[cfg(test)]
mod tests;
