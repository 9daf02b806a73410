//! Bring your own client: a store on the application's
//! `zookeeper_client::Client` and its session instead of a URL. The options
//! and their checks are the URL's ([`ZkOptions`]).

use std::time::Duration;

use omnilock_core::{Error, Locks, Operation, Result, check_ttl};
use zookeeper_client::Client;

use crate::config::ZkOptions;
use crate::store::{ZkStore, ttl_fits_session};

/// Builds a [`Locks`] handle on the application's own
/// [`zookeeper_client::Client`]; start with [`ZkStore::builder`].
///
/// **The lease is the application's session.** From a `zk://` URL omnilock
/// opens one session per TTL, because on ZooKeeper a lock is an ephemeral
/// node and lives exactly as long as its session: the session timeout is
/// the lease. A client that omnilock is given has one session, with the
/// timeout the application asked for and the server granted, and omnilock
/// cannot open another from it (a client does not reveal its servers or
/// credentials). So on this store:
/// - every lock lives on that session; a holder that dies keeps the lock
///   until the session expires, that is for the session timeout;
/// - the handle's default TTL is the session timeout, and a TTL shorter than
///   it is refused (`InvalidConfig`, here or at the acquisition): a promise
///   to free a crashed holder's lock sooner cannot be kept. A longer TTL is
///   accepted, and the lock frees sooner than it says;
/// - while the application's process runs its client keeps the session
///   alive, so locks are renewed by the session itself, as from a URL;
/// - when the session ends (expired, closed), every guard on it is lost and
///   later acquisitions fail with a non-retryable `Unavailable`: build the
///   store again on a new client.
///
/// The client brings the servers, chroot, credentials (`with_auth`, SASL,
/// TLS): if its session has any identity (`whoami`, ZooKeeper 3.7+), lock
/// nodes get the ACL `creator_all`, as with `zk://user:pw@...`; otherwise
/// `anyone_all`. Closing the handle ends omnilock's use of the session but
/// leaves the application's client open.
///
/// Each setter is the URL option of the same name (the prefix is the URL's
/// path); [`build`](Self::build) checks them as `zk://` URLs are checked
/// (`InvalidConfig`).
///
/// ```no_run
/// # async fn example() -> omnilock_core::Result<()> {
/// use std::time::Duration;
/// use omnilock_zookeeper::ZkStore;
/// use omnilock_zookeeper::zookeeper_client::Client;
///
/// // The application's client: its session timeout is every lock's lease.
/// let client = Client::connector()
///     .with_session_timeout(Duration::from_secs(10))
///     .with_auth("digest", b"app:secret")
///     .connect("zk1:2181,zk2:2181,zk3:2181")
///     .await
///     .expect("ZooKeeper answers");
///
/// let locks = ZkStore::builder(client).prefix("/billing/locks").build().await?;
/// let guard = locks.acquire("close-month").await?; // a 10 s lease
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
pub struct ZkBuilder {
    client: Client,
    options: ZkOptions,
    ttl: Option<Duration>,
}

impl ZkBuilder {
    pub(crate) fn new(client: Client) -> Self {
        ZkBuilder {
            client,
            options: ZkOptions::default(),
            ttl: None,
        }
    }

    /// The path under which lock nodes live, as the URL's path (default
    /// `/omnilock`; the leading `/` may be left out). Relative to the
    /// client's chroot, if it has one.
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Self {
        let path = prefix.as_ref().trim_matches('/');
        // Unlike an empty URL path, an empty prefix here is a mistake: keep
        // it so that `build` refuses it.
        self.options.prefix = format!("/{path}");
        self
    }

    /// How long `build` waits for the ensemble's first answers, as
    /// `?connect_timeout=` (default 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Deadline of one request, as `?timeout=` (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// The handle's default lease, as `?ttl=`; default: the session timeout.
    /// Must not be shorter than the session timeout (see above).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Checks the options (before any I/O), creates the prefix through the
    /// client (which proves the ensemble answers and accepts its
    /// credentials), and returns the handle.
    pub async fn build(self) -> Result<Locks> {
        let context = |e: Error| {
            e.with_backend("zookeeper")
                .with_operation(Operation::Connect)
        };
        self.options.check().map_err(context)?;
        let session_timeout = self.client.session_timeout();
        if let Some(ttl) = self.ttl {
            check_ttl(ttl).map_err(context)?;
            ttl_fits_session(ttl, session_timeout).map_err(context)?;
        }
        let store = ZkStore::adopt(self.client, self.options)
            .await
            .map_err(context)?;
        let ttl = self.ttl.unwrap_or(session_timeout);
        Locks::new(store).with_ttl(ttl).map_err(context)
    }
}
