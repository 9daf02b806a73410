//! Bring your own client: stores built on the application's `redis::Client`s
//! (and, for one instance, optionally its `ConnectionManager`) instead of a
//! URL. The options and their checks are the URL's ([`RedisOptions`]).

use std::time::Duration;

use omnilock_core::{Error, Locks, Operation, Result, check_ttl};
use redis::ConnectionAddr;
use redis::aio::ConnectionManager;

use crate::config::RedisOptions;
use crate::conn::address_of;
use crate::redlock::RedlockStore;
use crate::single::RedisStore;

/// Builds a [`Locks`] handle on one Redis instance from the application's
/// own [`redis::Client`]; start with [`RedisStore::builder`].
///
/// The client brings the address, credentials, database and TLS settings:
/// omnilock never sees a second copy of the password. A `redis::Client`
/// holds no connection itself, so omnilock opens two from it: a
/// `ConnectionManager` for its commands and a subscription for wake-ups.
/// Give the application's own `ConnectionManager` with
/// [`connection_manager`](Self::connection_manager) to send the commands on
/// it instead; only the subscription is then opened (a multiplexed
/// connection cannot also subscribe).
///
/// Each setter is the URL option of the same name; [`build`](Self::build)
/// checks them as `redis://` URLs are checked (`InvalidConfig`).
///
/// ```no_run
/// # async fn example() -> omnilock_core::Result<()> {
/// use std::time::Duration;
/// use omnilock_redis::RedisStore;
///
/// // The application's client, with its credentials.
/// let client = redis::Client::open("redis://:secret@127.0.0.1:6379/0").expect("valid URL");
/// let manager = client.get_connection_manager().await.expect("Redis answers");
///
/// let locks = RedisStore::builder(client)
///     .connection_manager(manager) // optional: share the command connection
///     .prefix("billing")
///     .ttl(Duration::from_secs(30))
///     .build()
///     .await?;
/// let guard = locks.acquire("close-month").await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
pub struct RedisBuilder {
    client: redis::Client,
    manager: Option<ConnectionManager>,
    options: RedisOptions,
    ttl: Option<Duration>,
}

impl RedisBuilder {
    pub(crate) fn new(client: redis::Client) -> Self {
        RedisBuilder {
            client,
            manager: None,
            options: RedisOptions::defaults(false),
            ttl: None,
        }
    }

    /// Sends omnilock's commands on the application's `manager`, which must
    /// reach the same server as the client (checked by `build`). Its own
    /// timeouts and retries apply to those commands; `connect_timeout` and
    /// `timeout` then bound only the wake-up subscription.
    pub fn connection_manager(mut self, manager: ConnectionManager) -> Self {
        self.manager = Some(manager);
        self
    }

    /// Key prefix, as `?prefix=` (default `omnilock`): keys are
    /// `{prefix:name}...`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// How long a waiter's place in the queue lasts without a refresh, as
    /// `?waiter_lease=` (default 3 s, at least 100 ms).
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.options.waiter_lease = lease;
        self
    }

    /// Connect timeout for the connections omnilock opens, as
    /// `?connect_timeout=` (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Reply timeout per command on the connection omnilock opens, as
    /// `?timeout=` (default 2 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.response_timeout = timeout;
        self
    }

    /// The default lease of the handle's locks, as `?ttl=` (default
    /// [`DEFAULT_TTL`](omnilock_core::DEFAULT_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Grants and renewals return only once `replicas` replicas have them
    /// (`WAIT`, bounded by `timeout`), as `?wait_replicas=N&wait_timeout=`.
    /// See [`WaitReplicas`](crate::WaitReplicas) for what it buys.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.options.wait_replicas = Some(crate::WaitReplicas { replicas, timeout });
        self
    }

    /// Checks the options (before any I/O), checks that the server answers
    /// and accepts the client's credentials, subscribes to this handle's
    /// wake-up channel, and returns the handle.
    pub async fn build(self) -> Result<Locks> {
        let context = |e: Error| e.with_backend("redis").with_operation(Operation::Connect);
        check_before_io(&self.options, self.ttl, false).map_err(context)?;
        let shown = shown(&[&self.client], false);
        let store = RedisStore::open(self.options, self.client, self.manager, shown)
            .await
            .map_err(context)?;
        with_ttl(Locks::new(store), self.ttl).map_err(context)
    }
}

/// Builds a [`Locks`] handle for Redlock from the application's own
/// [`redis::Client`]s, one per independent node (at least 3, usually 5);
/// start with [`RedlockStore::builder`].
///
/// Each client brings its node's address, credentials, database and TLS
/// settings; omnilock opens one `ConnectionManager` per node from it. As
/// with `redlock://` URLs, nodes that do not answer are tolerated while a
/// majority does, and wrong credentials on any node are an error.
///
/// Each setter is the URL option of the same name; [`build`](Self::build)
/// checks them as `redlock://` URLs are checked (`InvalidConfig`).
///
/// ```no_run
/// # async fn example() -> omnilock_core::Result<()> {
/// use std::time::Duration;
/// use omnilock_redis::RedlockStore;
///
/// let clients = (7001..=7005)
///     .map(|port| redis::Client::open(format!("redis://:secret@10.0.0.1:{port}/")))
///     .collect::<Result<Vec<_>, _>>()
///     .expect("valid URLs");
/// let locks = RedlockStore::builder(clients)
///     .timeout(Duration::from_millis(100))
///     .ttl(Duration::from_secs(10))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
pub struct RedlockBuilder {
    clients: Vec<redis::Client>,
    options: RedisOptions,
    ttl: Option<Duration>,
}

impl RedlockBuilder {
    pub(crate) fn new(clients: impl IntoIterator<Item = redis::Client>) -> Self {
        RedlockBuilder {
            clients: clients.into_iter().collect(),
            options: RedisOptions::defaults(true),
            ttl: None,
        }
    }

    /// Key prefix, as `?prefix=` (default `omnilock`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// How long a waiter's place in each node's line lasts without a
    /// refresh, as `?waiter_lease=` (default 3 s, at least 100 ms).
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.options.waiter_lease = lease;
        self
    }

    /// Connect timeout per node, as `?connect_timeout=` (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Reply timeout per node in each round, as `?timeout=` (default
    /// 250 ms; keep it far below the TTL).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.response_timeout = timeout;
        self
    }

    /// The default lease of the handle's locks, as `?ttl=`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Checks the options and the node count (before any I/O), connects to
    /// the nodes, and returns the handle.
    pub async fn build(self) -> Result<Locks> {
        let context = |e: Error| e.with_backend("redlock").with_operation(Operation::Connect);
        check_before_io(&self.options, self.ttl, true).map_err(context)?;
        let shown = shown(&self.clients.iter().collect::<Vec<_>>(), true);
        let store = RedlockStore::open(self.options, self.clients, shown)
            .await
            .map_err(context)?;
        with_ttl(Locks::new(store), self.ttl).map_err(context)
    }
}

/// Every check a builder can make without the network, as `connect` makes
/// them before any I/O.
fn check_before_io(options: &RedisOptions, ttl: Option<Duration>, redlock: bool) -> Result<()> {
    options.check(redlock)?;
    if let Some(ttl) = ttl {
        check_ttl(ttl)?;
    }
    Ok(())
}

fn with_ttl(locks: Locks, ttl: Option<Duration>) -> Result<Locks> {
    match ttl {
        Some(ttl) => locks.with_ttl(ttl),
        None => Ok(locks),
    }
}

/// The store as a URL without credentials, for `Debug`.
fn shown(clients: &[&redis::Client], redlock: bool) -> String {
    let tls = clients.iter().any(|c| {
        matches!(
            c.get_connection_info().addr(),
            ConnectionAddr::TcpTls { .. }
        )
    });
    let scheme = match (redlock, tls) {
        (true, _) => "redlock",
        (false, true) => "rediss",
        (false, false) => "redis",
    };
    let hosts: Vec<String> = clients.iter().map(|c| address_of(c)).collect();
    let db = clients
        .first()
        .map_or(0, |c| c.get_connection_info().redis_settings().db());
    format!("{scheme}://{}/{db}", hosts.join(","))
}
