//! One Redis master as the lock scripts see it (one server, the cluster's
//! master for a key, or the master the sentinels name): its connection, its
//! wake-up subscription, its keys, its errors.

use std::time::Duration;

use omnilock_core::{Error, ErrorKind, HostPort, Result, Secret};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisError,
    RedisFuture, Value,
};

use crate::config::{RedisConfig, RedisOptions};

pub(crate) mod cluster;
pub(crate) mod sentinel;
use crate::conn::sentinel::SentinelConn;

/// The connection the lock scripts run on. Every variant reconnects by
/// itself; the cluster's also follows `MOVED`/`ASK` and slot-map changes, and
/// the sentinel's asks the sentinels again when its master stops being one.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(crate::conn::cluster::ClusterConn),
    Sentinel(SentinelConn),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
            Conn::Sentinel(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
            Conn::Sentinel(conn) => conn.get_db(),
        }
    }
}

/// The store's own connection to Redis, for the application's commands on
/// the data it keeps beside its locks (the keys of a
/// [`GuardedWrite`](crate::GuardedWrite), a [`FencedKey`](crate::FencedKey)):
/// with the store's credentials and TLS, reconnecting by itself, and on a
/// cluster routed by key (each command to its slot's master), through
/// Sentinel to the master of the moment. From
/// [`RedisStore::connection`](crate::RedisStore::connection).
///
/// It is shared with the locks: a command that blocks the connection
/// (`BLPOP`, `WAIT`) delays them too.
#[derive(Clone)]
pub struct RedisConnection(pub(crate) Conn);

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisConnection")
    }
}

impl redis::aio::ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// Where this client's wake-up subscription goes.
#[derive(Clone)]
pub(crate) enum Subscriber {
    /// The one server.
    Server(Box<redis::Client>),
    /// A cluster: one sharded subscription per lock waited on, in the
    /// lock's slot (see `wake/shards.rs`), opened with this configuration.
    Shards(Box<RedisConfig>),
    /// The master the sentinels name now.
    Sentinel(SentinelConn),
}

impl Subscriber {
    /// Completes when the subscription should move to another server (the
    /// sentinels named a new master); never for the other deployments.
    pub(crate) async fn moved(&self) {
        match self {
            Subscriber::Sentinel(conn) => conn.moved().await,
            _ => std::future::pending().await,
        }
    }

    /// Opens a subscription to `channel` (one server or the sentinels'
    /// master; a cluster subscribes per lock instead).
    pub(crate) async fn subscribe(&self, channel: &str) -> redis::RedisResult<redis::aio::PubSub> {
        let client = match self {
            Subscriber::Server(client) => (**client).clone(),
            Subscriber::Sentinel(conn) => conn.master_client().await?,
            Subscriber::Shards(_) => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "a cluster subscribes per lock, in the lock's slot",
                )));
            }
        };
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    }
}

/// The connection to the master(s) the lock scripts run on, where this
/// client subscribes to its wake-ups, and where the store is, for messages.
#[derive(Clone)]
pub(crate) struct Node {
    pub conn: Conn,
    pub subscriber: Subscriber,
    pub address: String,
}

impl Node {
    /// The client that a URL's settings describe for data node `node`.
    pub(crate) fn client(config: &RedisConfig, node: &HostPort) -> Result<redis::Client> {
        let login = Login {
            default_port: 6379,
            username: config.username.as_deref(),
            password: config.password.as_ref(),
            db: config.db,
        };
        client_for(config, node, login)
    }
}

/// Who a client logs in as, where: the data nodes' credentials and database,
/// or the sentinels' own.
pub(crate) struct Login<'a> {
    pub default_port: u16,
    pub username: Option<&'a str>,
    pub password: Option<&'a Secret>,
    pub db: i64,
}

/// A client for `node` with the URL's TLS settings and `login`.
pub(crate) fn client_for(
    config: &RedisConfig,
    node: &HostPort,
    login: Login<'_>,
) -> Result<redis::Client> {
    let address = node.to_string();
    if config.tls {
        // Every TLS client of this store is made here, before it connects.
        ensure_crypto_provider();
    }
    let info = connection_info(config, node, login)?;
    match &config.tls_ca {
        Some(_) => redis::Client::build_with_tls(info, tls_certificates(config)?),
        None => redis::Client::open(info),
    }
    .map_err(|e| map_err(e, &address))
}

/// The CA certificates of `?tls_ca=`, for redis-rs.
pub(crate) fn tls_certificates(config: &RedisConfig) -> Result<redis::TlsCertificates> {
    let root_cert =
        match &config.tls_ca {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                Error::config(format!("cannot read tls_ca {}: {e}", path.display()))
            })?),
            None => None,
        };
    Ok(redis::TlsCertificates {
        client_tls: None,
        root_cert,
    })
}

/// The address, TLS and login of a connection to `node`.
pub(crate) fn connection_info(
    config: &RedisConfig,
    node: &HostPort,
    login: Login<'_>,
) -> Result<ConnectionInfo> {
    let address = node.to_string();
    let (host, port) = (node.host.clone(), node.port.unwrap_or(login.default_port));
    let addr = if config.tls {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    };
    let mut settings = RedisConnectionInfo::default().set_db(login.db);
    if let Some(username) = login.username {
        settings = settings.set_username(username);
    }
    if let Some(password) = login.password {
        settings = settings.set_password(password.expose());
    }
    Ok(addr
        .into_connection_info()
        .map_err(|e| map_err(e, &address))?
        .set_redis_settings(settings))
}

impl Node {
    /// Opens omnilock's connection to the node `client` reaches, or adopts
    /// the application's `manager` (which must reach the same node), and
    /// checks that the node answers and accepts the credentials.
    pub(crate) async fn open(
        client: redis::Client,
        manager: Option<ConnectionManager>,
        options: &RedisOptions,
    ) -> Result<Self> {
        let address = address_of(&client);
        let conn = match manager {
            Some(mut manager) => {
                ping(&mut manager, &address).await?;
                manager
            }
            None => connection_manager(&client, options).await?,
        };
        Ok(Node {
            conn: Conn::Single(conn),
            subscriber: Subscriber::Server(Box::new(client)),
            address,
        })
    }

    pub(crate) fn err(&self, e: RedisError) -> Error {
        map_err(e, &self.address)
    }

    /// Whether this is a Redis Cluster (each lock on its slot's master).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// A connection to each master, for commands over the whole keyspace
    /// (`SCAN`): the one server or Sentinel's master, or every master of a
    /// cluster (by the slot map read anew; `Unavailable` when one of them
    /// cannot be reached, whose keys would be missed).
    pub(crate) async fn masters(&self) -> Result<Vec<Conn>> {
        match &self.conn {
            Conn::Cluster(conn) => Ok(conn
                .masters()
                .await?
                .into_iter()
                .map(Conn::Single)
                .collect()),
            conn => Ok(vec![conn.clone()]),
        }
    }

    /// The master that serves `key` now: its address and a client for
    /// connections of one's own to it (`None` while a cluster's slot map
    /// does not know).
    pub(crate) fn master_for(&self, key: &str) -> Option<(String, redis::Client)> {
        match (&self.conn, &self.subscriber) {
            (Conn::Cluster(conn), _) => conn.master_client(key),
            (Conn::Sentinel(conn), _) => Some(conn.master()),
            (Conn::Single(_), Subscriber::Server(client)) => {
                Some((self.address.clone(), (**client).clone()))
            }
            (Conn::Single(_), _) => None,
        }
    }

    /// The connection for commands on `key`: on a cluster, straight to the
    /// master of its slot when known.
    pub(crate) fn conn_for(&self, key: &str) -> Conn {
        match &self.conn {
            Conn::Cluster(conn) => Conn::Cluster(conn.for_key(key)),
            conn => conn.clone(),
        }
    }
}

/// An answer that says the command did not run on this server and belongs
/// on another: a cluster's redirect, or a server that is no master now.
pub(crate) fn sent_elsewhere(value: &Value) -> bool {
    cluster::redirected(value) || sentinel::answered_as_no_master(value)
}

/// omnilock's own auto-reconnecting connection to the server `client`
/// reaches, checked to answer and to accept the credentials.
pub(crate) async fn connection_manager(
    client: &redis::Client,
    options: &RedisOptions,
) -> Result<ConnectionManager> {
    let address = address_of(client);
    if matches!(
        client.get_connection_info().addr(),
        ConnectionAddr::TcpTls { .. }
    ) {
        ensure_crypto_provider();
    }
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        // Redlock's short per-node bound is applied per round by the caller;
        // connecting and one-off commands get the longer one.
        .set_response_timeout(Some(options.response_timeout.max(options.connect_timeout)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_secs(1));
    let mut conn = ConnectionManager::new_with_config(client.clone(), manager_config)
        .await
        .map_err(|e| map_err(e, &address))?;
    ping(&mut conn, &address).await?;
    Ok(conn)
}

async fn ping(conn: &mut ConnectionManager, address: &str) -> Result<()> {
    let _: String = redis::cmd("PING")
        .query_async(conn)
        .await
        .map_err(|e| map_err(e, address))?;
    Ok(())
}

/// Where `client` connects, for messages: `host:port` or the socket path,
/// never the credentials.
pub(crate) fn address_of(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

/// redis-rs 1.x builds its rustls configuration from the process-wide
/// crypto provider and panics when there is none. An application that chose
/// a provider has installed it by now and keeps it; otherwise omnilock
/// installs ring's (the one the etcd backend uses too), so that `rediss://`
/// works without set-up and never panics.
pub(crate) fn ensure_crypto_provider() {
    omnilock_core::ensure_crypto_provider();
}

/// Classifies a Redis error; messages name the node, never the password.
pub(crate) fn map_err(e: RedisError, address: &str) -> Error {
    let code = e.code().unwrap_or("");
    let error = if refused_credentials(&e) {
        Error::auth(format!(
            "Redis at {address} refused the credentials (user name or password)"
        ))
    } else if let Some(reason) = tls_refusal(&e) {
        Error::tls(format!(
            "the TLS handshake with Redis at {address} failed: {reason} (give the CA that \
             signed the server's certificate with ?tls_ca=, and a host name the \
             certificate names)"
        ))
    } else if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || matches!(
            code,
            "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "READONLY" | "CLUSTERDOWN"
        )
    {
        // The reason in the message too: Redlock joins several nodes'
        // messages into one line, without their causes.
        let why = if e.is_connection_refusal() {
            "connection refused"
        } else if e.is_timeout() {
            "timed out"
        } else if e.is_connection_dropped() {
            "connection dropped"
        } else if !code.is_empty() {
            code
        } else {
            "I/O error"
        };
        Error::unavailable(format!("cannot reach Redis at {address} ({why})"))
    } else {
        Error::new(
            ErrorKind::Backend,
            format!("Redis at {address} answered with an error"),
        )
    };
    error.with_cause(e)
}

/// Whether the server refused the user name or password.
pub(crate) fn refused_credentials(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
}

/// The reason a TLS handshake refused the server's certificate, if that is
/// what `e` is: a setting to fix, not an outage to wait out.
fn tls_refusal(e: &RedisError) -> Option<String> {
    if !e.is_io_error() {
        return None;
    }
    let text = e.to_string();
    let at = text.find("certificate")?;
    // From "invalid peer certificate: UnknownIssuer" on, say.
    let start = text[..at].rfind(": ").map_or(0, |i| i + 2);
    Some(text[start..].trim().to_string())
}
