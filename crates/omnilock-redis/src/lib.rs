//! Redis as a lock store: one master (fair FIFO queue, one wake-up per
//! release, reentrant, fencing tokens) reached as one server (`redis://`),
//! through Redis Cluster (`redis+cluster://`) or through Sentinel
//! (`redis+sentinel://`); and Redlock over N independent nodes
//! (`redlock://`).
//! See [docs/backends/redis.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/redis.md) for the protocol and what breaks it.
//!
//! Open a store from a URL (`omnilock::connect("redis://...")`), or on the
//! application's own clients with [`RedisStore::builder`] and
//! [`RedlockStore::builder`].

mod builder;
mod config;
mod conn;
mod fence;
mod redlock;
mod scan;
mod scripts;
mod single;
mod wake;

pub use builder::{RedisBuilder, RedlockBuilder};
pub use config::{Deployment, RedisConfig, RedisOptions, WaitReplicas};
pub use conn::RedisConnection;
pub use fence::FencedKey;
pub use redlock::{Hold as RedlockHold, RedlockStore};
pub use single::{GuardedWrite, HoldId as RedisHold, RedisStore};

/// The redis-rs crate this backend is built on, so that an application
/// names the same version when it builds clients for
/// [`RedisStore::builder`] and [`RedlockStore::builder`].
pub use redis;

use omnilock_core::{Locks, Result};

/// Opens the store a Redis URL names.
pub async fn connect(config: RedisConfig) -> Result<Locks> {
    let kind = config.deployment.kind();
    let locks = if config.is_redlock() {
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

/// How `omnilock::connect(url)` opens Redis URLs: one server, Cluster,
/// Sentinel (each also over TLS) and Redlock.
pub const DRIVER: omnilock_core::Driver = omnilock_core::Driver {
    feature: Some("redis"),
    schemes: &[
        "redis",
        "rediss",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "rediss+sentinel",
        "redlock",
    ],
    connect: |url| Box::pin(async move { connect(RedisConfig::from_url(&url)?).await }),
};
