//! Redis as a lock store: one instance (fair FIFO queue, one wake-up per
//! release, reentrant, fencing tokens) and Redlock over N independent nodes.
//! See `docs/backends/redis.md` for the protocol and what breaks it.
//!
//! Open a store from a URL (`omnilock::connect("redis://...")`), or on the
//! application's own clients with [`RedisStore::builder`] and
//! [`RedlockStore::builder`].

mod builder;
mod config;
mod measure;
mod node;
mod redlock;
mod scripts;
mod single;

pub use builder::{RedisBuilder, RedlockBuilder};
pub use config::{RedisConfig, RedisOptions};
pub use redlock::RedlockStore;
pub use single::RedisStore;

/// The redis-rs crate this backend is built on, so that an application
/// names the same version when it builds clients for
/// [`RedisStore::builder`] and [`RedlockStore::builder`].
pub use redis;

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
