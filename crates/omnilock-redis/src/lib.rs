//! Redis as a lock store: one instance (fair FIFO queue, one wake-up per
//! release, reentrant, fencing tokens) and Redlock over N independent nodes.
//! See `docs/backends/redis.md` for the protocol and what breaks it.

mod config;
mod measure;
mod node;
mod redlock;
mod scripts;
mod single;

pub use config::RedisConfig;
pub use redlock::RedlockStore;
pub use single::RedisStore;

use omnilock_core::{Locks, Result};

/// Opens the store a `redis://` or `redlock://` URL names.
pub async fn connect(config: RedisConfig) -> Result<Locks> {
    let kind = if config.redlock { "redlock" } else { "redis" };
    let locks = if config.redlock {
        Locks::new(
            RedlockStore::connect(config)
                .await
                .map_err(|e| e.with_backend(kind))?,
        )
    } else {
        Locks::new(
            RedisStore::connect(config)
                .await
                .map_err(|e| e.with_backend(kind))?,
        )
    };
    Ok(locks)
}
