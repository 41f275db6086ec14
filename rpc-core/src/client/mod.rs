//! The client side: [`Channel`] multiplexes concurrent calls over one connection.

mod calls;
mod channel;

pub use channel::{Channel, REDIAL_BACKOFF};
