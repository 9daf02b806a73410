//! One Redis master as the lock scripts see it (one server, the cluster's
//! master for a key, or the master the sentinels name): its connection, its
//! wake-up subscription, its keys, its errors.

use std::time::Duration;

use omnilock_core::{Error, ErrorKind, HostPort, Result, Secret};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisError,
    RedisFuture, Value,
};

use crate::config::{RedisConfig, RedisOptions, WaitReplicas};
use crate::sentinel::SentinelConn;

/// Braces would change the hash tag and `%` is the escape itself; everything
/// else in a lock name is kept as is.
const KEY: &AsciiSet = &CONTROLS.add(b'{').add(b'}').add(b'%');

/// The prefix is written with `:` (which ends it in a key) and `%` escaped,
/// so that `(prefix, name)` maps one-to-one to keys: prefix `app` with name
/// `x:y` and prefix `app:x` with name `y` are different locks.
const PREFIX: &AsciiSet = &KEY.add(b':');

/// The keys of one lock, all in the hash slot of `{prefix:name}`.
pub(crate) struct Keys {
    pub lock: String,
    pub fence: String,
    pub queue: String,
    pub timeouts: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        // Built by appending, not `format!`: this runs twice per lock and
        // release, on the path every uncontended acquire takes.
        let mut lock = String::with_capacity(prefix.len() + name.len() + 3);
        lock.push('{');
        lock.extend(utf8_percent_encode(prefix, PREFIX));
        lock.push(':');
        lock.extend(utf8_percent_encode(name, KEY));
        lock.push('}');
        let with = |suffix: &str| {
            let mut key = String::with_capacity(lock.len() + suffix.len());
            key.push_str(&lock);
            key.push_str(suffix);
            key
        };
        Keys {
            fence: with(":fence"),
            queue: with(":queue"),
            timeouts: with(":timeouts"),
            lock,
        }
    }
}

/// The keys of one semaphore or read-write lock (see `scripts.rs`), in the
/// slot of the mutex of the same name, apart from its keys: `family` is
/// `sem` or `rw`. The fencing counter is the mutex's (tokens rise across
/// all three).
pub(crate) struct CountedKeys {
    /// The mutex's key: what routes a command and names the wake-up channel.
    pub lock: String,
    pub order: String,
    pub entries: String,
    pub expiry: String,
    pub fence: String,
}

impl CountedKeys {
    pub(crate) fn new(prefix: &str, name: &str, family: &str) -> Self {
        let keys = Keys::new(prefix, name);
        CountedKeys {
            order: format!("{}:{family}:order", keys.lock),
            entries: format!("{}:{family}:entries", keys.lock),
            expiry: format!("{}:{family}:expiry", keys.lock),
            fence: keys.fence,
            lock: keys.lock,
        }
    }
}

/// The connection the lock scripts run on. Every variant reconnects by
/// itself; the cluster's also follows `MOVED`/`ASK` and slot-map changes, and
/// the sentinel's asks the sentinels again when its master stops being one.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(crate::cluster::ClusterConn),
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

/// Where this client's wake-up subscription goes.
#[derive(Clone)]
pub(crate) enum Subscriber {
    /// The one server.
    Server(Box<redis::Client>),
    /// A cluster: one sharded subscription per lock waited on, in the
    /// lock's slot (see `shard_wakeups.rs`), opened with this configuration.
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
                )))
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

    /// The connection for commands on `key`: on a cluster, straight to the
    /// master of its slot when known.
    /// Whether this is a Redis Cluster (each lock on its slot's master).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    pub(crate) fn conn_for(&self, key: &str) -> Conn {
        match &self.conn {
            Conn::Cluster(conn) => Conn::Cluster(conn.for_key(key)),
            conn => conn.clone(),
        }
    }
}

/// An `EVALSHA` of `script` on `keys`, for the caller to add the arguments
/// to. One command with one buffer for all its arguments: redis-rs's
/// `ScriptInvocation` copies each key and argument into a buffer of its own
/// and then into the command, which on the uncontended path is most of the
/// client's allocations.
pub(crate) fn evalsha(script: &redis::Script, keys: &[&str]) -> Cmd {
    let mut eval = redis::cmd("EVALSHA");
    eval.arg(script.get_hash()).arg(keys.len()).arg(keys);
    eval
}

/// Runs `eval` (from [`evalsha`]), loading `script` once more if the
/// server has lost it (a restart, `SCRIPT FLUSH`).
///
/// With `wait`, `WAIT` for `wait.replicas` runs right behind it, as one
/// pipeline on one connection: `WAIT` counts the writes of the connection it
/// runs on, so on any other (a reconnect in between, a different node's) it
/// would confirm at once what no replica has. Returns the script's answer
/// and, with `wait`, how many replicas acknowledged.
pub(crate) async fn run_script<T: redis::FromRedisValue>(
    conn: &mut Conn,
    script: &redis::Script,
    eval: Cmd,
    wait: Option<WaitReplicas>,
) -> redis::RedisResult<(T, Option<u32>)> {
    let no_script =
        |e: &RedisError| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
    let Some(wait) = wait else {
        let answer = match eval.query_async::<T>(conn).await {
            Err(e) if no_script(&e) => {
                script.load_async(conn).await?;
                eval.query_async::<T>(conn).await?
            }
            answer => answer?,
        };
        return Ok((answer, None));
    };
    let mut confirm = redis::cmd("WAIT");
    confirm
        .arg(wait.replicas)
        .arg(wait.timeout.as_millis() as u64);
    let mut pipe = redis::pipe();
    pipe.add_command(eval).add_command(confirm);
    let answer = match pipe.query_async::<(T, i64)>(conn).await {
        Err(e) if no_script(&e) => {
            script.load_async(conn).await?;
            pipe.query_async::<(T, i64)>(conn).await?
        }
        answer => answer?,
    };
    Ok((answer.0, Some(answer.1.max(0) as u32)))
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
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: any provider will do.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Classifies a Redis error; messages name the node, never the password.
pub(crate) fn map_err(e: RedisError, address: &str) -> Error {
    let code = e.code().unwrap_or("");
    let error = if refused_credentials(&e) {
        Error::config(format!(
            "Redis at {address} refused the credentials (user name or password)"
        ))
    } else if let Some(reason) = tls_refusal(&e) {
        Error::config(format!(
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_cannot_leave_their_hash_tag() {
        let keys = Keys::new("omnilock", "a}b{c%d");
        assert_eq!(keys.lock, "{omnilock:a%7Db%7Bc%25d}");
        assert_eq!(keys.queue, "{omnilock:a%7Db%7Bc%25d}:queue");
        // Distinct names stay distinct keys.
        assert_ne!(Keys::new("p", "a%7D").lock, Keys::new("p", "a}").lock);
    }

    #[test]
    fn abutting_prefixes_and_names_do_not_meet() {
        assert_ne!(Keys::new("app", "x:y").lock, Keys::new("app:x", "y").lock);
        assert_ne!(Keys::new("a%3Ab", "c").lock, Keys::new("a:b", "c").lock);
        assert_eq!(Keys::new("omnilock", "job").lock, "{omnilock:job}");
    }

    proptest! {
        /// Distinct (prefix, name) pairs never share a key.
        #[test]
        fn keys_are_one_to_one(
            a in ("[a-z:%{}]{1,6}", "[a-z:%{}/]{1,6}"),
            b in ("[a-z:%{}]{1,6}", "[a-z:%{}/]{1,6}"),
        ) {
            let (ka, kb) = (Keys::new(&a.0, &a.1), Keys::new(&b.0, &b.1));
            prop_assert_eq!(a == b, ka.lock == kb.lock);
            for key in [&ka.lock, &ka.fence, &ka.queue, &ka.timeouts] {
                for other in [&kb.lock, &kb.fence, &kb.queue, &kb.timeouts] {
                    if a != b {
                        prop_assert_ne!(key, other);
                    }
                }
            }
        }
    }
}
