//! # omnilock
//!
//! One distributed-lock API over the stores applications already run: etcd,
//! ZooKeeper, Redis (one server, Cluster, Sentinel or Redlock), MySQL/MariaDB, PostgreSQL,
//! SQLite, and an in-memory store. Pick stores with cargo features and a URL;
//! the code stays the same.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> omnilock::Result<()> {
//! use std::time::Duration;
//!
//! let locks = omnilock::connect("mem://?ttl=10s").await?;
//! let guard = locks.lock("billing/close-month").timeout(Duration::from_secs(30)).acquire().await?;
//! // Pass the fencing token to the resource you protect, so it can refuse
//! // writes from a holder whose lease has run out.
//! println!("token {}", guard.token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! Every store gives the same semantics (see [docs/semantics.md](https://github.com/omnilock/omnilock/blob/main/docs/semantics.md)): mutual
//! exclusion, release by the owner only, leases with automatic renewal, a
//! lost-lock signal, fencing tokens, reentrancy, and FIFO fairness where the
//! store allows it. [`Locks::capabilities`] reports honestly what a store
//! cannot promise.
//!
//! ## Store URLs
//! | store | URL | cargo feature |
//! |---|---|---|
//! | in-memory (one process) | `mem://` or `mem://NAME` | always |
//! | etcd | `etcd://h1:p1,h2:p2/prefix`, `etcds://` (TLS) | `etcd` |
//! | ZooKeeper | `zk://h1:p1,h2:p2/prefix`, or `zookeeper://`; `zks://` (TLS) | `zookeeper`; `zookeeper-tls` for `zks://` |
//! | Redis | `redis://[:pw@]host:port[/db]`, `rediss://` (TLS) | `redis` |
//! | Redis Cluster | `redis+cluster://[:pw@]h1:p1,h2:p2,h3:p3`, `rediss+cluster://` (TLS) | `redis` |
//! | Redis Sentinel | `redis+sentinel://[:pw@]s1:p1,s2:p2,s3:p3/MASTER`, `rediss+sentinel://` (TLS) | `redis` |
//! | Redlock | `redlock://h1:p1,h2:p2,h3:p3/` | `redis` |
//! | MySQL/MariaDB | `mysql://user:pw@host:port/db`, or `mariadb://` | `mysql` |
//! | PostgreSQL | `postgres://user@host:port/db`, or `postgresql://` | `postgres` |
//! | SQLite | `sqlite:///abs/path.db` | `sqlite` |
//!
//! Every URL accepts `?ttl=DUR` (the default lease, 15 s unless set). The
//! facade has no default features; [`SCHEMES`] lists every scheme with the
//! feature it needs.
//!
//! ## Without an async runtime
//! [`blocking`] has the same API for synchronous programs, with a small
//! runtime of its own inside (always built: it needs nothing beyond what the
//! async API already uses). Do not call it from inside an async runtime:
//! it refuses with [`ErrorKind::WouldDeadlock`] there.
//!
//! ```
//! let locks = omnilock::blocking::connect("mem://")?;
//! let total = locks.with_lock("billing/close-month", || 40 + 2)?;
//! assert_eq!(total, 42);
//! # Ok::<(), omnilock::Error>(())
//! ```
//!
//! ## Metrics
//! With the cargo feature `metrics`, acquire latency, wait time, grants,
//! timeouts, losses, renewal failures and locks held are reported through
//! the [`metrics`](https://docs.rs/metrics) facade to whatever recorder the
//! application installs (a Prometheus or OpenTelemetry exporter), labelled
//! by store and, on request ([`Locks::with_metrics_names`]), by lock name.
//! [docs/observability.md](https://github.com/omnilock/omnilock/blob/main/docs/observability.md) lists the series; the module `omnilock::metrics`
//! (with the feature) has their names.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use omnilock_core::{
    AcquireOptions, Candidate, Capabilities, DEFAULT_TTL, Election, Error, ErrorKind, Held, Holder,
    Inspection, Leader, Leadership, Listed, LockGuard, LockKind, LockName, LockRequest, Locks,
    MAX_ELECTION_VALUE_BYTES, MAX_RECORD_KEEP, MAX_TTL, MIN_TTL, MemStore, MultiGuard,
    MultiLockRequest, Observer, Operation, Owner, Primitive, ReadWriteLock, Record, Result, Side,
    Waiting, check_hold_bounds, parse_duration,
};

pub mod blocking;

pub use omnilock_core::fence;

use omnilock_core::{StoreUrl, check_ttl};

/// For backend authors and tools, not for applications: the [`Backend`]
/// contract a store implements and the machinery written once for all
/// stores (store URLs, retries, detached store calls, TTL checks). An
/// application needs none of it: [`connect`] and [`Locks`] are the API.
///
/// [`Backend`]: raw::Backend
pub mod raw {
    pub use omnilock_core::{
        AcquireRequest, Backend, Backoff, CompleteOrUndo, Connecting, Driver, DynBackend,
        ErasedGrant, Grant, HostPort, LocalWaiters, LockSpec, LostNotifier, MAX_NAME_BYTES,
        Primitive, RW_CAPACITY, Secret, SessionGuards, SessionsPerTtl, Share, StoreUrl, WaitNotice,
        async_trait, check_ttl, complete_or_undo, lock_unpoisoned, retry, retry_in_background,
        retry_when,
    };
}

/// Installs ring's rustls crypto provider as the process default unless
/// one is installed: for applications that build TLS clients of their own
/// (a `redis::Client` over TLS, a sqlx pool) before omnilock's first TLS
/// connection, in a program with two providers built in (the
/// `zookeeper-tls` feature brings aws-lc beside ring). omnilock's stores
/// call it themselves before they connect.
///
/// ```
/// omnilock::ensure_crypto_provider();
/// // Now `redis::Client::open("rediss://…")`, a sqlx pool with
/// // `sslmode=verify-full`, … find a provider.
/// ```
#[cfg(any(
    feature = "etcd",
    feature = "redis",
    feature = "mysql",
    feature = "postgres",
    feature = "sqlite",
    feature = "zookeeper-tls"
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "etcd",
        feature = "redis",
        feature = "mysql",
        feature = "postgres",
        feature = "sqlite",
        feature = "zookeeper-tls"
    )))
)]
pub use omnilock_core::ensure_crypto_provider;

/// The names of the metric series and [`metrics::describe`] (cargo feature
/// `metrics`).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use omnilock_core::metrics;

/// The SQL backend (MySQL/MariaDB, PostgreSQL, SQLite).
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite")))
)]
pub use omnilock_sql as sql;

/// The etcd backend (lease + revision queue, or etcd's lock protocol).
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use omnilock_etcd as etcd;

/// The ZooKeeper backend (ephemeral-sequential nodes).
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use omnilock_zookeeper as zookeeper;

/// The Redis backend (one instance, Cluster, Sentinel, and Redlock).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use omnilock_redis as redis;

/// Connects to the store named by `url` and returns a handle whose type is
/// the same whatever the store.
///
/// Errors: [`ErrorKind::InvalidConfig`] for a malformed URL, an unknown
/// option, or a scheme whose cargo feature is not enabled (the message names
/// the feature); [`ErrorKind::Unavailable`] when the store cannot be reached.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let err = omnilock::connect("nosuch://host").await.unwrap_err();
/// assert_eq!(err.kind(), omnilock::ErrorKind::InvalidConfig);
/// # }
/// ```
pub async fn connect(url: &str) -> Result<Locks> {
    let context = |e: Error| e.with_operation(Operation::Connect);
    let mut url = StoreUrl::parse(url).map_err(context)?;
    let ttl = url.take_duration("ttl").map_err(context)?;
    // Every check before any I/O: a bad TTL must not create a SQLite file
    // or wait on an unreachable server first.
    if let Some(ttl) = ttl {
        check_ttl(ttl).map_err(context)?;
    }
    let locks = open(url).await.map_err(context)?;
    match ttl {
        Some(ttl) => locks.with_ttl(ttl).map_err(context),
        None => Ok(locks),
    }
}

/// The README's library examples, compiled and run with the crate's doc
/// tests, so that the front page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;

/// docs/fencing.md's Rust blocks, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../docs/fencing.md")]
pub struct FencingExamples;

/// Every scheme [`connect`] knows, aliases included, with the cargo feature
/// it needs (`None`: always built in).
///
/// ```
/// let (_, feature) = omnilock::SCHEMES.iter().find(|(s, _)| *s == "mariadb").unwrap();
/// assert_eq!(*feature, Some("mysql"));
/// ```
pub const SCHEMES: &[(&str, Option<&str>)] = &[
    ("mem", None),
    ("etcd", Some("etcd")),
    ("etcds", Some("etcd")),
    ("zk", Some("zookeeper")),
    ("zookeeper", Some("zookeeper")),
    ("zks", Some("zookeeper")),
    ("redis", Some("redis")),
    ("rediss", Some("redis")),
    ("redis+cluster", Some("redis")),
    ("rediss+cluster", Some("redis")),
    ("redis+sentinel", Some("redis")),
    ("rediss+sentinel", Some("redis")),
    ("redlock", Some("redis")),
    ("mysql", Some("mysql")),
    ("mariadb", Some("mysql")),
    ("postgres", Some("postgres")),
    ("postgresql", Some("postgres")),
    ("sqlite", Some("sqlite")),
];

/// Every store family built into this crate (see [`raw::Driver`]).
const DRIVERS: &[omnilock_core::Driver] = &[
    omnilock_core::mem::DRIVER,
    #[cfg(feature = "etcd")]
    omnilock_etcd::DRIVER,
    #[cfg(feature = "zookeeper")]
    omnilock_zookeeper::DRIVER,
    #[cfg(feature = "redis")]
    omnilock_redis::DRIVER,
    #[cfg(feature = "mysql")]
    omnilock_sql::MYSQL_DRIVER,
    #[cfg(feature = "postgres")]
    omnilock_sql::POSTGRES_DRIVER,
    #[cfg(feature = "sqlite")]
    omnilock_sql::SQLITE_DRIVER,
];

async fn open(url: StoreUrl) -> Result<Locks> {
    if let Some(driver) = DRIVERS.iter().find(|d| d.serves(url.scheme())) {
        return (driver.connect)(url).await;
    }
    match SCHEMES.iter().find(|(scheme, _)| *scheme == url.scheme()) {
        Some((_, Some(feature))) => not_built(&url, feature),
        _ => Err(Error::config(format!(
            "unknown store scheme {:?}; known: {}",
            url.scheme(),
            SCHEMES
                .iter()
                .map(|(scheme, _)| *scheme)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The answer for a scheme whose backend is not compiled in.
fn not_built(url: &StoreUrl, feature: &str) -> Result<Locks> {
    Err(Error::config(format!(
        "{}:// needs the cargo feature `{feature}` of omnilock (or `full`)",
        url.scheme()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the cargo feature `feature` of this crate is on.
    fn built(feature: &str) -> bool {
        match feature {
            "etcd" => cfg!(feature = "etcd"),
            "zookeeper" => cfg!(feature = "zookeeper"),
            "redis" => cfg!(feature = "redis"),
            "mysql" => cfg!(feature = "mysql"),
            "postgres" => cfg!(feature = "postgres"),
            "sqlite" => cfg!(feature = "sqlite"),
            other => panic!("SCHEMES names an unknown feature {other:?}"),
        }
    }

    /// `SCHEMES` (what the docs and the not-built errors say) and the
    /// drivers (what `connect` opens) agree: every scheme a driver serves is
    /// listed with that driver's feature, and every listed scheme whose
    /// feature is on has a driver.
    #[test]
    fn schemes_and_drivers_agree() {
        for driver in DRIVERS {
            for scheme in driver.schemes {
                assert!(
                    SCHEMES.contains(&(scheme, driver.feature)),
                    "{scheme}:// is served but not listed in SCHEMES with {:?}",
                    driver.feature
                );
            }
        }
        for (scheme, feature) in SCHEMES {
            let served = DRIVERS.iter().any(|d| d.serves(scheme));
            let expected = feature.is_none_or(built);
            assert_eq!(served, expected, "{scheme}:// (feature {feature:?})");
        }
    }
}
