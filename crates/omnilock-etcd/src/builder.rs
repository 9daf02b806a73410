//! Bring your own client: a store built on the application's
//! `etcd_client::Client` instead of a URL. The options and their checks are
//! the URL's ([`EtcdOptions`]).

use std::time::Duration;

use omnilock_core::{Error, Locks, Operation, Result, check_ttl};

use crate::config::{EtcdOptions, Mode};
use crate::conn::Etcd;
use crate::store::EtcdStore;

/// What messages call a store whose endpoints omnilock was not told: an
/// `etcd_client::Client` does not say which endpoints it has.
const SHOWN: &str = "(application's client)";

/// Builds a [`Locks`] handle on the application's own
/// [`etcd_client::Client`]; start with [`EtcdStore::builder`].
///
/// The client brings the endpoints, credentials (and their token refresh),
/// TLS settings and keep-alive settings: omnilock never sees a second copy
/// of the password and opens no connection of its own. Its requests, lease
/// grants, keep-alive streams and watches all run on the client's channel
/// (a clone of the client shares it). omnilock's leases are its own: it
/// grants them through the client and revokes only those.
///
/// Each setter is the URL option of the same name (the prefix is the URL's
/// path); [`build`](Self::build) checks them as `etcd://` URLs are checked
/// (`InvalidConfig`).
///
/// ```no_run
/// # async fn example() -> omnilock_core::Result<()> {
/// use std::time::Duration;
/// use omnilock_etcd::{EtcdStore, Mode};
/// use omnilock_etcd::etcd_client::{Client, ConnectOptions};
///
/// // The application's client, with its credentials.
/// let options = ConnectOptions::new().with_user("app", "secret");
/// let client = Client::connect(["http://127.0.0.1:2379"], Some(options))
///     .await
///     .expect("etcd answers");
///
/// let locks = EtcdStore::builder(client)
///     .prefix("billing")
///     .mode(Mode::Recipe)
///     .ttl(Duration::from_secs(30))
///     .build()
///     .await?;
/// let guard = locks.acquire("close-month").await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
pub struct EtcdBuilder {
    client: etcd_client::Client,
    options: EtcdOptions,
    ttl: Option<Duration>,
}

impl EtcdBuilder {
    pub(crate) fn new(client: etcd_client::Client) -> Self {
        EtcdBuilder {
            client,
            options: EtcdOptions::default(),
            ttl: None,
        }
    }

    /// Key prefix, as the URL's path (default `omnilock`); `/` in it is kept
    /// inside one key segment (see [`EtcdOptions::prefix`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// omnilock's recipe or etcd's lock protocol, as `?mode=` (default
    /// [`Mode::Recipe`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.options.mode = mode;
        self
    }

    /// How long `build` waits for the cluster's first answer, as
    /// `?connect_timeout=` (default 3 s). The client's own connect timeout
    /// is the application's.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Deadline of one request, as `?timeout=` (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// The default lease of the handle's locks, as `?ttl=` (default
    /// [`DEFAULT_TTL`](omnilock_core::DEFAULT_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Checks the options (before any I/O), checks that the cluster answers
    /// through the client and accepts its credentials, and returns the
    /// handle.
    pub async fn build(self) -> Result<Locks> {
        let context = |e: Error| e.with_backend("etcd").with_operation(Operation::Connect);
        self.options.check().map_err(context)?;
        if let Some(ttl) = self.ttl {
            check_ttl(ttl).map_err(context)?;
        }
        let deadline = tokio::time::Instant::now() + self.options.connect_timeout;
        // The client's endpoints are not known here: three reads, as for a
        // cluster of three members.
        let etcd = Etcd::open(self.client, &self.options, SHOWN.into(), deadline, 3)
            .await
            .map_err(context)?;
        let locks = EtcdStore::open(etcd, self.options.mode).into_locks();
        match self.ttl {
            Some(ttl) => locks.with_ttl(ttl).map_err(context),
            None => Ok(locks),
        }
    }
}
