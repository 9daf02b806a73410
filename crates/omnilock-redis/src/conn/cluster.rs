//! Redis Cluster (`redis+cluster://`): the lock scripts run on the master of
//! the lock's slot (every key of one lock shares the hash tag
//! `{prefix:name}`), through redis-rs's cluster connection, which follows
//! `MOVED`/`ASK` and re-reads the slot map after a failover.
//!
//! The lock scripts do not go through redis-rs's cluster connection, whose
//! routing costs about as much again as the command itself on loopback:
//! [`Router`] keeps omnilock's own connection to each master and a slot map
//! from `CLUSTER SLOTS`, and sends each script straight to the master of its
//! key's slot. A `MOVED`, `ASK` or `CLUSTERDOWN` answer, or a failing
//! master, sends that call through redis-rs's cluster connection instead
//! (which follows redirects) and refreshes the map in the background.
//!
//! Wake-ups use sharded pub/sub, in the lock's slot: see `wake/shards.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use omnilock_core::{Error, HostPort, Result};
use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, ProtocolVersion, PushInfo, RedisFuture, TlsMode, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::RedisConfig;
use crate::conn::{
    Conn, Login, Node, Subscriber, connection_info, connection_manager, ensure_crypto_provider,
    map_err, tls_certificates,
};

/// Commands for the cluster: straight to the master of a key's slot when
/// [`Router::conn_for`] found one (`direct`), else (and after a redirect)
/// through redis-rs's cluster connection.
#[derive(Clone)]
pub(crate) struct ClusterConn {
    pub(crate) fallback: ClusterConnection,
    direct: Option<ConnectionManager>,
    router: Arc<Router>,
}

impl ClusterConn {
    /// The connection for commands on `key`: its master's, if known.
    pub(crate) fn for_key(&self, key: &str) -> ClusterConn {
        ClusterConn {
            fallback: self.fallback.clone(),
            direct: self.router.conn_for(slot(key.as_bytes())),
            router: self.router.clone(),
        }
    }

    /// The master of `key`'s slot by the slot map as last read: its
    /// address and a client for connections of one's own to it.
    pub(crate) fn master_client(&self, key: &str) -> Option<(String, redis::Client)> {
        let slot = slot(key.as_bytes());
        let table = match self.router.table.read() {
            Ok(table) => table,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (_, _, address) = table
            .ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))?;
        let client = table.clients.get(address)?.clone();
        Some((address.clone(), client))
    }

    /// A connection to every master of the cluster, by the slot map read
    /// anew: `Unavailable` when a master serving some slots cannot be
    /// reached (a command over the whole keyspace would miss its keys).
    pub(crate) async fn masters(&self) -> Result<Vec<ConnectionManager>> {
        self.router.load().await?;
        let table = match self.router.table.read() {
            Ok(table) => table,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut addresses: Vec<&String> = table.ranges.iter().map(|(_, _, a)| a).collect();
        addresses.sort();
        addresses.dedup();
        addresses
            .into_iter()
            .map(|address| {
                table.conns.get(address).cloned().ok_or_else(|| {
                    Error::unavailable(format!(
                        "cannot reach the Redis Cluster master at {address}"
                    ))
                })
            })
            .collect()
    }
}

impl redis::aio::ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if let Some(direct) = self.direct.as_mut() {
                match direct.req_packed_command(cmd).await {
                    Ok(value) if !redirected(&value) => return Ok(value),
                    Ok(_) => self.router.refresh(),
                    Err(e) if !self.router.after_direct_failure(&e) => return Err(e),
                    Err(_) => {}
                }
            }
            self.fallback.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            if let Some(direct) = self.direct.as_mut() {
                match direct.req_packed_commands(pipeline, offset, count).await {
                    Ok(values) if !values.iter().any(redirected) => return Ok(values),
                    Ok(_) => self.router.refresh(),
                    Err(e) if !self.router.after_direct_failure(&e) => return Err(e),
                    Err(_) => {}
                }
            }
            self.fallback
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Whether a direct call's answer is a refusal that sends it elsewhere:
/// the slot is served by another node now (`MOVED`, `ASK`; nothing ran) or
/// the cluster is changing (`CLUSTERDOWN`, `TRYAGAIN`). redis-rs gives
/// server errors as values, not as `Err`.
pub(crate) fn redirected(value: &Value) -> bool {
    matches!(value, Value::ServerError(e)
        if matches!(e.code(), "MOVED" | "ASK" | "CLUSTERDOWN" | "TRYAGAIN"))
}

/// The slot map and a connection per master.
pub(crate) struct Router {
    config: RedisConfig,
    fallback: ClusterConnection,
    table: RwLock<Table>,
    refreshing: AtomicBool,
    last_refresh: std::sync::Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Table {
    /// (first slot, last slot, master address), sorted.
    ranges: Vec<(u16, u16, String)>,
    /// Master address → omnilock's connection to it (absent while it does
    /// not answer).
    conns: std::collections::HashMap<String, ConnectionManager>,
    /// Master address → a client for connections of one's own to it.
    clients: std::collections::HashMap<String, redis::Client>,
}

impl Router {
    /// After a direct call failed: reads the map again, and says whether to
    /// send the call through redis-rs's cluster connection. Yes when the
    /// node refused it before running anything (the slot moved, the cluster
    /// is changing); redis-rs follows the redirect. No when the master may
    /// be gone: the caller retries, by then on the new map.
    fn after_direct_failure(self: &Arc<Self>, e: &redis::RedisError) -> bool {
        self.refresh();
        e.redirect_node().is_some() || matches!(e.code(), Some("CLUSTERDOWN" | "TRYAGAIN"))
    }

    fn conn_for(self: &Arc<Self>, slot: u16) -> Option<ConnectionManager> {
        let found = {
            let table = match self.table.read() {
                Ok(table) => table,
                Err(poisoned) => poisoned.into_inner(),
            };
            table
                .ranges
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&slot))
                .and_then(|(_, _, address)| table.conns.get(address).cloned())
        };
        if found.is_none() {
            // A master we have no connection to (yet): look again, now
            // and then, while calls take the slow way.
            self.refresh();
        }
        found
    }

    /// Reads the slot map again in the background (one at a time, at most
    /// every 200 ms) and connects to masters it does not know yet.
    pub(crate) fn refresh(self: &Arc<Self>) {
        {
            let mut last = match self.last_refresh.lock() {
                Ok(last) => last,
                Err(poisoned) => poisoned.into_inner(),
            };
            if last.is_some_and(|at| at.elapsed() < Duration::from_millis(200)) {
                return;
            }
            if self.refreshing.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
        }
        let router = self.clone();
        tokio::spawn(async move {
            let _ = router.load().await;
            router.refreshing.store(false, Ordering::Release);
        });
    }

    /// Reads the slot map and connects to masters not known yet.
    async fn load(&self) -> Result<()> {
        let slots = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Value>(&mut self.fallback.clone())
            .await
            .map_err(|e| map_err(e, "the cluster"))?;
        let map = slot_map(slots);
        let known: std::collections::HashMap<String, ConnectionManager> = match self.table.read() {
            Ok(table) => table.conns.clone(),
            Err(poisoned) => poisoned.into_inner().conns.clone(),
        };
        let mut ranges = Vec::new();
        let mut conns = std::collections::HashMap::new();
        let mut clients = std::collections::HashMap::new();
        for range in &map {
            let Some(master) = range.nodes.first() else {
                continue;
            };
            let address = master.to_string();
            ranges.push((range.first, range.last, address.clone()));
            if clients.contains_key(&address) {
                continue;
            }
            let Ok(client) = Node::client(&self.config, master) else {
                continue;
            };
            clients.insert(address.clone(), client.clone());
            if let Some(conn) = known.get(&address) {
                conns.insert(address, conn.clone());
                continue;
            }
            if let Ok(conn) = connection_manager(&client, &self.config.options).await {
                conns.insert(address, conn);
            }
        }
        ranges.sort();
        let table = Table {
            ranges,
            conns,
            clients,
        };
        match self.table.write() {
            Ok(mut current) => *current = table,
            Err(poisoned) => *poisoned.into_inner() = table,
        }
        Ok(())
    }
}

/// One range of slots and the nodes serving it, master first.
struct SlotRange {
    first: u16,
    last: u16,
    nodes: Vec<HostPort>,
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, ..] (master), [..]
/// (replicas)..], ..]`. Entries that do not parse are left out.
fn slot_map(slots: Value) -> Vec<SlotRange> {
    let Value::Array(ranges) = slots else {
        return Vec::new();
    };
    ranges
        .into_iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let mut parts = parts.into_iter();
            let first: u16 = redis::from_redis_value(parts.next()?).ok()?;
            let last: u16 = redis::from_redis_value(parts.next()?).ok()?;
            let nodes = parts
                .filter_map(|node| {
                    let (host, port): (String, u16) =
                        redis::from_redis_value(first_two(node)).ok()?;
                    (!host.is_empty()).then_some(HostPort {
                        host,
                        port: Some(port),
                    })
                })
                .collect();
            Some(SlotRange { first, last, nodes })
        })
        .collect()
}

/// The hash slot of `key` (CRC16-XMODEM of its hash tag, mod 16384).
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in tagged {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Connects to the cluster through any reachable seed node and reads its
/// slot map.
pub(crate) async fn open(config: &RedisConfig) -> Result<Node> {
    let address = seed_list(config);
    let within_timeout = async {
        check_is_cluster(config).await?;
        connect(config, None).await
    };
    let conn = tokio::time::timeout(config.options.connect_timeout, within_timeout)
        .await
        .map_err(|_| {
            Error::unavailable(format!(
                "cannot reach the Redis Cluster at {address} (timed out connecting)"
            ))
        })??;
    let router = Arc::new(Router {
        config: config.clone(),
        fallback: conn.clone(),
        table: RwLock::new(Table::default()),
        refreshing: AtomicBool::new(false),
        last_refresh: std::sync::Mutex::new(None),
    });
    // Without the map every call takes the slow way; with a partial one
    // (a master down), the rest are direct.
    let _ = router.load().await;
    Ok(Node {
        conn: Conn::Cluster(ClusterConn {
            fallback: conn,
            direct: None,
            router,
        }),
        subscriber: Subscriber::Shards(Box::new(config.clone())),
        address,
    })
}

/// The seed nodes, as shown in messages.
fn seed_list(config: &RedisConfig) -> String {
    config
        .nodes
        .iter()
        .map(HostPort::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// redis-rs's cluster connection, through any reachable seed (no timeout
/// of its own: callers give one). With `pushes`, in RESP3, with pub/sub
/// messages and disconnection notices sent there.
pub(crate) async fn connect(
    config: &RedisConfig,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> Result<ClusterConnection> {
    let options = &config.options;
    let address = seed_list(config);
    let seeds = config
        .nodes
        .iter()
        .map(|node| {
            let login = Login {
                default_port: 6379,
                username: config.username.as_deref(),
                password: config.password.as_ref(),
                db: 0,
            };
            connection_info(config, node, login)
        })
        .collect::<Result<Vec<_>>>()?;
    if config.tls {
        ensure_crypto_provider();
    }
    let mut builder = ClusterClient::builder(seeds)
        // Half: redis-rs connects to every seed; one that is down must
        // leave time for the rest.
        .connection_timeout(options.connect_timeout / 2)
        .response_timeout(options.response_timeout)
        // omnilock's own loops retry after a backoff; a few quick retries
        // here ride out a redirect or a reconnect.
        .retries(3);
    if let Some(username) = &config.username {
        builder = builder.username(username);
    }
    if let Some(password) = &config.password {
        builder = builder.password(password.expose());
    }
    if config.tls {
        builder = builder.tls(TlsMode::Secure);
        if config.tls_ca.is_some() {
            builder = builder.certs(tls_certificates(config)?);
        }
    }
    if let Some(pushes) = pushes {
        builder = builder
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(pushes);
    }
    let client = builder.build().map_err(|e| map_err(e, &address))?;
    client
        .get_async_connection()
        .await
        .map_err(|e| map_err(e, &address))
}

/// The seeds are asked at once, each for half the connect timeout; the
/// first that answers must be a cluster node: a plain server would
/// otherwise fail later with redis-rs's less telling error.
async fn check_is_cluster(config: &RedisConfig) -> Result<()> {
    let probe = config.options.connect_timeout / 2;
    let asks = config.nodes.iter().map(|node| async move {
        let address = node.to_string();
        let ask = async {
            let client = Node::client(config, node)?;
            let mut connection = client
                .get_multiplexed_async_connection_with_config(
                    &AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(probe))
                        .set_response_timeout(Some(config.options.response_timeout)),
                )
                .await
                .map_err(|e| map_err(e, &address))?;
            let info: String = redis::cmd("INFO")
                .arg("cluster")
                .query_async(&mut connection)
                .await
                .map_err(|e| map_err(e, &address))?;
            Ok::<_, Error>(info.lines().any(|line| line.trim() == "cluster_enabled:1"))
        };
        let answer = tokio::time::timeout(probe, ask).await.unwrap_or_else(|_| {
            Err(Error::unavailable(format!(
                "cannot reach Redis at {address} (no answer within {probe:?})"
            )))
        });
        (address, answer)
    });
    let mut failures = Vec::new();
    let mut refused = None;
    for (address, answer) in futures_util::future::join_all(asks).await {
        match answer {
            Ok(true) => return Ok(()),
            Ok(false) => {
                return Err(Error::config(format!(
                    "Redis at {address} is not part of a Redis Cluster (cluster_enabled is 0): \
                     use redis:// for one server, or redis+sentinel:// for a master watched by \
                     sentinels"
                )));
            }
            Err(e) if !e.is_retryable() => refused = Some(e),
            Err(e) => failures.push(e.message().to_string()),
        }
    }
    if let Some(refused) = refused {
        return Err(refused);
    }
    Err(Error::unavailable(format!(
        "cannot reach any seed node of the Redis Cluster: {}",
        failures.join("; ")
    )))
}

/// `[host, port, id, ...]` → `[host, port]`.
fn first_two(node: Value) -> Value {
    match node {
        Value::Array(mut fields) => {
            fields.truncate(2);
            Value::Array(fields)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_match_redis() {
        // CRC16-XMODEM's check value, and what CLUSTER KEYSLOT answers.
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"{omnilock:x}"), 9284);
        assert_eq!(slot(b"{omnilock:x}:queue"), 9284);
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        // An empty tag hashes the whole key.
        assert_ne!(slot(b"a{}"), slot(b"{}"));
    }
}
