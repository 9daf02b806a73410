//! Redis: `INFO commandstats` of every master (one instance, the cluster's
//! masters, or each Redlock node) and the classic single-instance floor,
//! `SET NX PX` + an owner-checked `EVALSHA` delete (on every Redlock node in
//! parallel).

use futures_util::future::try_join_all;
use omnilock_core::{Error, Result, StoreUrl};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Script, Value,
};

use super::{addresses, random_suffix};

/// The owner-checked delete every Redis lock needs at least.
const FLOOR_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Outside every lock's key space (omnilock's keys start with its prefix).
const FLOOR_KEY: &str = "omnilock-probe:floor";

pub(super) enum RedisProbe {
    /// One master (`redis://`, or the master a Sentinel names), or the
    /// independent nodes of Redlock.
    Nodes {
        nodes: Vec<MultiplexedConnection>,
        redlock: bool,
    },
    Cluster(ClusterConnection),
}

impl RedisProbe {
    pub(super) async fn connect(url: &StoreUrl) -> Result<Self> {
        let mut url = url.clone();
        let db = match url.scheme() {
            "redis" => url.path().trim_matches('/').parse::<i64>().unwrap_or(0),
            _ => 0,
        };
        let auth = settings(url.username(), url.password().map(|p| p.expose()), db);
        match url.scheme() {
            "redis+cluster" => {
                let seeds: Vec<ConnectionInfo> = addresses(&url, 6379)
                    .iter()
                    .map(|a| info(a, auth.clone()))
                    .collect::<Result<_>>()?;
                let client = redis::cluster::ClusterClient::builder(seeds)
                    .build()
                    .map_err(fail)?;
                Ok(RedisProbe::Cluster(
                    client.get_async_connection().await.map_err(fail)?,
                ))
            }
            "redis+sentinel" => {
                let master = url.path().trim_matches('/').to_string();
                let sentinel_auth = settings(
                    url.take("sentinel_username").as_deref(),
                    url.take("sentinel_password").as_deref(),
                    0,
                );
                let address = master_address(&url, &master, sentinel_auth).await?;
                let node = open(&info(&address, auth)?).await?;
                Ok(RedisProbe::Nodes {
                    nodes: vec![node],
                    redlock: false,
                })
            }
            scheme => {
                let nodes = try_join_all(
                    addresses(&url, 6379)
                        .iter()
                        .map(|a| async { open(&info(a, auth.clone())?).await }),
                )
                .await?;
                Ok(RedisProbe::Nodes {
                    nodes,
                    redlock: scheme == "redlock",
                })
            }
        }
    }

    /// Commands run (commands inside scripts included), except `INFO`
    /// itself and connection housekeeping.
    pub(super) async fn requests_served(&self) -> Result<u64> {
        let infos = self.commandstats().await?;
        Ok(infos.iter().map(|info| commands_run(info)).sum())
    }

    /// Scripts run, and the commands omnilock sends outside scripts.
    pub(super) async fn round_trips_served(&self) -> Result<u64> {
        let infos = self.commandstats().await?;
        Ok(infos.iter().map(|info| requests_sent(info)).sum())
    }

    pub(super) fn floor_ops(&self) -> &'static str {
        match self {
            RedisProbe::Nodes { redlock: true, .. } => {
                "SET NX PX + EVALSHA owner-checked DEL on every node in parallel"
            }
            _ => "SET NX PX + EVALSHA owner-checked DEL",
        }
    }

    pub(super) async fn floor_round(&self) -> Result<()> {
        match self {
            RedisProbe::Nodes { nodes, .. } => {
                try_join_all(nodes.iter().map(|n| floor_round_on(n.clone()))).await?;
                Ok(())
            }
            RedisProbe::Cluster(conn) => floor_round_on(conn.clone()).await,
        }
    }

    /// `INFO commandstats` of every master.
    async fn commandstats(&self) -> Result<Vec<String>> {
        let mut info = redis::cmd("INFO");
        info.arg("commandstats");
        match self {
            RedisProbe::Nodes { nodes, .. } => {
                try_join_all(nodes.iter().map(|node| query(node.clone(), &info))).await
            }
            RedisProbe::Cluster(conn) => {
                let all_masters =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let value = conn
                    .clone()
                    .route_command(info, all_masters)
                    .await
                    .map_err(fail)?;
                match value {
                    // One reply per master, keyed by its address. A master
                    // that failed answers an error here: fail, rather than
                    // count too few.
                    Value::Map(replies) => replies
                        .into_iter()
                        .map(|(_, reply)| {
                            redis::from_redis_value::<String>(reply).map_err(|e| fail(e.into()))
                        })
                        .collect(),
                    reply => Ok(vec![
                        redis::from_redis_value(reply).map_err(|e| fail(e.into()))?,
                    ]),
                }
            }
        }
    }
}

/// The floor on one server (or cluster): take a key with `SET NX PX`, then
/// delete it with an owner-checked script.
async fn floor_round_on<C: redis::aio::ConnectionLike + Send>(mut conn: C) -> Result<()> {
    let token = random_suffix();
    let _: Option<String> = redis::cmd("SET")
        .arg(FLOOR_KEY)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(15_000)
        .query_async(&mut conn)
        .await
        .map_err(fail)?;
    let _: i64 = Script::new(FLOOR_RELEASE)
        .key(FLOOR_KEY)
        .arg(&token)
        .invoke_async(&mut conn)
        .await
        .map_err(fail)?;
    Ok(())
}

async fn query(mut conn: MultiplexedConnection, cmd: &Cmd) -> Result<String> {
    cmd.query_async(&mut conn).await.map_err(fail)
}

/// The master's address, from the first sentinel that knows it.
async fn master_address(url: &StoreUrl, master: &str, auth: RedisConnectionInfo) -> Result<String> {
    let mut last = Error::unavailable(format!("no sentinel knows master {master:?}"));
    for sentinel in addresses(url, 26379) {
        let answer = async {
            let conn = open(&info(&sentinel, auth.clone())?).await?;
            let mut ask = redis::cmd("SENTINEL");
            ask.arg("get-master-addr-by-name").arg(master);
            let reply: Option<(String, u16)> =
                ask.query_async(&mut conn.clone()).await.map_err(fail)?;
            reply.ok_or_else(|| Error::unavailable(format!("{sentinel}: no master {master:?}")))
        };
        match answer.await {
            Ok((host, port)) => return Ok(format!("{host}:{port}")),
            Err(err) => last = err,
        }
    }
    Err(last)
}

fn settings(username: Option<&str>, password: Option<&str>, db: i64) -> RedisConnectionInfo {
    let mut settings = RedisConnectionInfo::default().set_db(db);
    if let Some(username) = username.filter(|u| !u.is_empty()) {
        settings = settings.set_username(username);
    }
    if let Some(password) = password.filter(|p| !p.is_empty()) {
        settings = settings.set_password(password);
    }
    settings
}

fn info(address: &str, settings: RedisConnectionInfo) -> Result<ConnectionInfo> {
    let (host, port) = address
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']).to_string(), p.parse().ok()?)))
        .ok_or_else(|| Error::config(format!("not host:port: {address}")))?;
    Ok(ConnectionAddr::Tcp(host, port)
        .into_connection_info()
        .map_err(fail)?
        .set_redis_settings(settings))
}

async fn open(info: &ConnectionInfo) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(info.clone()).map_err(fail)?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(fail)
}

fn fail(err: redis::RedisError) -> Error {
    Error::unavailable(format!("redis probe: {err}"))
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
