//! ZooKeeper as a lock store: ephemeral-sequential nodes under a container
//! node per lock, a watch on the predecessor only, the node's czxid as
//! fencing token, the session timeout as lease. See
//! [docs/backends/zookeeper.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/zookeeper.md).

mod builder;
mod config;
mod conn;
mod counted;
mod guarded;
mod inspect;
mod queue;
mod records;
mod session;
mod store;
#[cfg(feature = "tls")]
mod tls;
mod watch;

pub use builder::ZkBuilder;
pub use config::{ZkConfig, ZkOptions};
pub use guarded::{OwnerCheck, check_owner};

pub use store::{Held as ZkHold, ZkStore};
/// The zookeeper-client crate this backend is built on, so that an
/// application names the same version when it builds the client for
/// [`ZkStore::builder`].
pub use zookeeper_client;

use omnilock_core::{Locks, Result};

/// Opens the store a `zk://` URL names. `?session_timeout=` sets the default
/// TTL (the URL's `ttl`, read by the facade, takes precedence).
pub async fn connect(config: ZkConfig) -> Result<Locks> {
    let default_ttl = config.session_timeout;
    let locks = Locks::new(
        ZkStore::connect(config)
            .await
            .map_err(|e| e.with_backend("zookeeper"))?,
    );
    match default_ttl {
        Some(ttl) => locks.with_ttl(ttl),
        None => Ok(locks),
    }
}

/// zookeeper-client builds its rustls configuration from the process-wide
/// crypto provider, and with more than one compiled in it panics when none
/// is installed. An application that chose a provider has installed it by
/// now and keeps it; otherwise omnilock installs ring's, as its Redis and
/// etcd backends use.
#[cfg(feature = "tls")]
fn ensure_crypto_provider() {
    omnilock_core::ensure_crypto_provider();
}

/// How `omnilock::connect(url)` opens `zk://`, `zookeeper://` and `zks://`
/// URLs.
pub const DRIVER: omnilock_core::Driver = omnilock_core::Driver {
    feature: Some("zookeeper"),
    schemes: &["zk", "zookeeper", "zks"],
    connect: |url| Box::pin(async move { connect(ZkConfig::from_url(&url)?).await }),
};
