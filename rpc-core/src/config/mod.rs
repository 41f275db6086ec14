//! Client and server configuration of the runtime (transports have their own).

mod balance;
mod client;
mod retry;
mod server;

pub use self::balance::{BalanceConfig, LbStrategy};
pub use self::client::ClientConfig;
pub use self::retry::RetryPolicy;
pub use self::server::ServerConfig;

/// The default maximum message size: 4 MiB, as in gRPC.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;

/// The default window of each received stream: 1 MiB of frames.
pub const DEFAULT_STREAM_WINDOW: u32 = 1024 * 1024;
