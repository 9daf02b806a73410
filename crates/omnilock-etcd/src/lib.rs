//! etcd as a lock store: a lease per client session, a queue of keys ordered
//! by create revision, a watch on the predecessor only, owner-fenced release,
//! the create revision as fencing token. Or, with `?mode=lockapi`, etcd's own
//! lock protocol (`etcdctl lock`'s keys, a lease per acquisition). See
//! [docs/backends/etcd.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/etcd.md) for the protocol and what breaks it.

mod builder;
mod config;
mod conn;
mod guarded;
mod queue;
mod session;
mod store;

pub use builder::EtcdBuilder;
pub use config::{EtcdConfig, EtcdOptions, Mode};
pub use guarded::is_owner;

/// The etcd-client crate this backend is built on, so that an application
/// names the same version when it builds the client for
/// [`EtcdStore::builder`].
pub use etcd_client;
pub use store::{EtcdStore, Held as EtcdHold};

use omnilock_core::{Locks, Result};

/// Opens the store an `etcd://` URL names.
pub async fn connect(config: EtcdConfig) -> Result<Locks> {
    Ok(EtcdStore::connect(config)
        .await
        .map_err(|e| e.with_backend("etcd"))?
        .into_locks())
}

/// How `omnilock::connect(url)` opens `etcd://` and `etcds://` URLs.
pub const DRIVER: omnilock_core::Driver = omnilock_core::Driver {
    feature: Some("etcd"),
    schemes: &["etcd", "etcds"],
    connect: |url| Box::pin(async move { connect(EtcdConfig::from_url(&url)?).await }),
};
