//! Redis Cluster (`redis+cluster://`): the lock scripts run on the master of
//! the lock's slot (every key of one lock shares the hash tag
//! `{prefix:name}`), through redis-rs's cluster connection, which follows
//! `MOVED`/`ASK` and re-reads the slot map after a failover.
//!
//! Wake-ups stay one `PUBLISH` per release: in a cluster a `PUBLISH` on any
//! node reaches the subscribers on every node (over the cluster bus), so a
//! client subscribes on any one node and hears the releases of every master.
//! Sharded pub/sub (`SPUBLISH`) would tie a waiter's subscription to the
//! lock's slot, one subscription per lock waited on; the closing note of
//! the issue that added the cluster and docs/backends/redis.md give the
//! measurement behind the choice.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use omnilock_core::{Error, HostPort, Result};
use redis::cluster::ClusterClient;
use redis::{AsyncConnectionConfig, TlsMode, Value};

use crate::config::RedisConfig;
use crate::node::{
    connection_info, ensure_crypto_provider, map_err, tls_certificates, Conn, Node, Subscriber,
};

/// Connects to the cluster through any reachable seed node, and lists every
/// node (seeds and discovered) as a place to subscribe.
pub(crate) async fn open(config: &RedisConfig) -> Result<Node> {
    let options = &config.options;
    let seeds = config
        .nodes
        .iter()
        .map(|node| connection_info(config, node))
        .collect::<Result<Vec<_>>>()?;
    let address = config
        .nodes
        .iter()
        .map(HostPort::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if config.tls {
        ensure_crypto_provider();
    }
    let within_timeout = async {
        check_is_cluster(config).await?;
        let mut builder = ClusterClient::builder(seeds)
            .connection_timeout(options.connect_timeout)
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
        let client = builder.build().map_err(|e| map_err(e, &address))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| map_err(e, &address))?;
        Ok::<_, Error>(conn)
    };
    let conn = tokio::time::timeout(options.connect_timeout, within_timeout)
        .await
        .map_err(|_| {
            Error::unavailable(format!(
                "cannot reach the Redis Cluster at {address} (timed out connecting)"
            ))
        })??;
    let mut subscribe_at = config.nodes.clone();
    let mut probe = conn.clone();
    if let Ok(slots) = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Value>(&mut probe)
        .await
    {
        for node in slot_nodes(slots) {
            if !subscribe_at.contains(&node) {
                subscribe_at.push(node);
            }
        }
    }
    let clients = subscribe_at
        .iter()
        .map(|node| Node::client(config, node))
        .collect::<Result<Vec<_>>>()?;
    Ok(Node {
        conn: Conn::Cluster(conn),
        subscriber: Subscriber::AnyOf(Arc::new(clients), Arc::new(AtomicUsize::new(0))),
        address,
    })
}

/// The first seed that answers must be a cluster node: a plain server would
/// otherwise fail later with redis-rs's less telling error.
async fn check_is_cluster(config: &RedisConfig) -> Result<()> {
    let mut failures = Vec::new();
    for node in &config.nodes {
        let address = node.to_string();
        let client = Node::client(config, node)?;
        let connection = client
            .get_multiplexed_async_connection_with_config(
                &AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(config.options.connect_timeout))
                    .set_response_timeout(Some(config.options.response_timeout)),
            )
            .await;
        let mut connection = match connection {
            Ok(connection) => connection,
            Err(e) => {
                let e = map_err(e, &address);
                if !e.is_retryable() {
                    return Err(e);
                }
                failures.push(e.message().to_string());
                continue;
            }
        };
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut connection)
            .await
            .map_err(|e| map_err(e, &address))?;
        if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
            return Ok(());
        }
        return Err(Error::config(format!(
            "Redis at {address} is not part of a Redis Cluster (cluster_enabled is 0): \
             use redis:// for one server, or redis+sentinel:// for a master watched by sentinels"
        )));
    }
    Err(Error::unavailable(format!(
        "cannot reach any seed node of the Redis Cluster: {}",
        failures.join("; ")
    )))
}

/// Every node `CLUSTER SLOTS` names: `[[start, end, [host, port, id, ..], ..], ..]`.
fn slot_nodes(slots: Value) -> Vec<HostPort> {
    let mut nodes = Vec::new();
    let Value::Array(ranges) = slots else {
        return nodes;
    };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        for node in parts.into_iter().skip(2) {
            let Ok((host, port)) = redis::from_redis_value::<(String, u16)>(first_two(node)) else {
                continue;
            };
            if host.is_empty() {
                continue;
            }
            nodes.push(HostPort {
                host,
                port: Some(port),
            });
        }
    }
    nodes
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
