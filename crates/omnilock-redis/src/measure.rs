//! Benchmark hooks for one master: the server's own command counters (on a
//! cluster, summed over every master) and the classic single-instance floor
//! (`SET NX PX` + an owner-checked `EVALSHA` delete); for Redlock the same
//! summed over its nodes, and the floor on all nodes in parallel.

use futures_util::future::try_join_all;
use omnilock_core::{async_trait, Measure, Result};
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Script, Value};

use crate::node::{Conn, Node};
use crate::redlock::RedlockStore;
use crate::single::RedisStore;

/// The owner-checked delete every Redis lock needs at least.
const FLOOR_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

#[async_trait]
impl Measure for RedisStore {
    /// Commands run (`INFO commandstats`, commands inside scripts included),
    /// except `INFO` itself and connection housekeeping; on a cluster,
    /// summed over every master.
    async fn requests_served(&self) -> Result<u64> {
        Ok(self
            .commandstats()
            .await?
            .iter()
            .map(|info| commands_run(info))
            .sum())
    }

    /// Scripts run, and the commands omnilock sends outside scripts;
    /// commands inside scripts are not counted.
    async fn round_trips_served(&self) -> Result<u64> {
        Ok(self
            .commandstats()
            .await?
            .iter()
            .map(|info| requests_sent(info))
            .sum())
    }

    fn floor_ops(&self) -> &'static str {
        "SET NX PX + EVALSHA owner-checked DEL"
    }

    async fn floor_round(&self) -> Result<()> {
        floor_round_on(self.node(), self.prefix()).await
    }
}

#[async_trait]
impl Measure for RedlockStore {
    /// Commands run on all nodes (see [`RedisStore`]'s).
    async fn requests_served(&self) -> Result<u64> {
        let infos = try_join_all(self.nodes().iter().map(node_commandstats)).await?;
        Ok(infos.iter().map(|info| commands_run(info)).sum())
    }

    /// Scripts run on all nodes, and commands sent outside scripts.
    async fn round_trips_served(&self) -> Result<u64> {
        let infos = try_join_all(self.nodes().iter().map(node_commandstats)).await?;
        Ok(infos.iter().map(|info| requests_sent(info)).sum())
    }

    fn floor_ops(&self) -> &'static str {
        "SET NX PX + EVALSHA owner-checked DEL on every node in parallel"
    }

    async fn floor_round(&self) -> Result<()> {
        try_join_all(
            self.nodes()
                .iter()
                .map(|node| floor_round_on(node, self.prefix())),
        )
        .await?;
        Ok(())
    }
}

/// The floor on one server: take a key with `SET NX PX`, then delete it
/// with an owner-checked script.
async fn floor_round_on(node: &Node, prefix: &str) -> Result<()> {
    let mut conn = node.conn.clone();
    let key = format!("{prefix}:floor");
    let token = format!("{:x}", rand::random::<u64>());
    let _: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(15_000)
        .query_async(&mut conn)
        .await
        .map_err(|e| node.err(e))?;
    let _: i64 = Script::new(FLOOR_RELEASE)
        .key(&key)
        .arg(&token)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| node.err(e))?;
    Ok(())
}

/// `INFO commandstats` of one server.
async fn node_commandstats(node: &Node) -> Result<String> {
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut node.conn.clone())
        .await
        .map_err(|e| node.err(e))
}

impl RedisStore {
    /// `INFO commandstats` of the master (on a cluster, of every master).
    async fn commandstats(&self) -> Result<Vec<String>> {
        let node = self.node();
        let mut info = redis::cmd("INFO");
        info.arg("commandstats");
        let replies: Vec<String> = match &node.conn {
            Conn::Cluster(conn) => {
                let all_masters =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let value = conn
                    .fallback
                    .clone()
                    .route_command(info, all_masters)
                    .await
                    .map_err(|e| node.err(e))?;
                match value {
                    // One reply per master, keyed by its address.
                    // A master that failed answers an error here: fail,
                    // rather than count too few.
                    Value::Map(replies) => replies
                        .into_iter()
                        .map(|(_, reply)| {
                            redis::from_redis_value::<String>(reply).map_err(|e| node.err(e.into()))
                        })
                        .collect::<Result<_>>()?,
                    reply => vec![redis::from_redis_value(reply).map_err(|e| node.err(e.into()))?],
                }
            }
            _ => vec![node_commandstats(node).await?],
        };
        Ok(replies)
    }
}

/// What clients sent, from one `INFO commandstats` reply: scripts run, and
/// the commands omnilock sends outside scripts (every other command it
/// sends runs inside a script, where `INFO` counts it too).
fn requests_sent(info: &str) -> u64 {
    calls(info)
        .filter(|(command, _)| {
            // `script|load`: a subcommand is listed under its command.
            let base = command.split('|').next().unwrap_or(command);
            base.starts_with("eval")
                || base.starts_with("fcall")
                || [
                    "wait",
                    "subscribe",
                    "unsubscribe",
                    "ssubscribe",
                    "sunsubscribe",
                    "script",
                ]
                .contains(&base)
        })
        .map(|(_, calls)| calls)
        .sum()
}

/// `(command, calls)` of each command one `INFO commandstats` reply lists.
fn calls(info: &str) -> impl Iterator<Item = (&str, u64)> {
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (command, rest) = line.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((command, calls))
        })
}

/// The commands one `INFO commandstats` reply counts, less `INFO` itself
/// and connection housekeeping.
fn commands_run(info: &str) -> u64 {
    calls(info)
        .filter(|(command, _)| {
            ![
                "info", "ping", "hello", "auth", "client", "select", "cluster", "readonly",
            ]
            .contains(command)
        })
        .map(|(_, calls)| calls)
        .sum()
}
