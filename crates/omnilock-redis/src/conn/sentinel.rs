//! A master watched by Sentinel (`redis+sentinel://s1,s2,s3/NAME`): the
//! sentinels name the current master, and omnilock runs the lock scripts on
//! it exactly as on one server.
//!
//! After a failover the old master's address stops working (refused, timed
//! out) or, once it is back as a replica, answers writes with `READONLY`.
//! Either error makes the connection ask the sentinels again and move to the
//! master they name; the failed call itself returns its error, which the
//! acquire and renewal loops retry.
//!
//! A failover the sentinels start while the old master still runs (`SENTINEL
//! FAILOVER`, or a master that comes back) gives no such error: the old
//! master keeps answering as a master for several seconds. So each store
//! also listens to the sentinels' `+switch-master` announcements and moves
//! at once.

use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use omnilock_core::{Backoff, Error, HostPort, Result, lock_unpoisoned};
use redis::aio::ConnectionManager;
use redis::{AsyncConnectionConfig, Cmd, RedisFuture, Value};

use crate::config::{Deployment, RedisConfig};
use crate::conn::{
    Conn, Login, Node, Subscriber, client_for, connection_manager, map_err, refused_credentials,
};

/// The command connection to whichever server the sentinels name as master.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<Shared>,
}

struct Shared {
    config: RedisConfig,
    master_name: String,
    sentinels: Vec<(String, redis::Client)>,
    current: RwLock<Master>,
    /// One re-resolution at a time; the others wait for its outcome (see
    /// [`Refreshes`]).
    refreshing: tokio::sync::Mutex<Refreshes>,
    /// Woken when the connection moves to a new master.
    moved: tokio::sync::Notify,
    /// The task that listens for `+switch-master`.
    watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.watcher.get_mut().ok().and_then(|t| t.take()) {
            task.abort();
        }
    }
}

/// When the sentinels were last asked, and how long to leave them be.
///
/// Calls that failed while a re-resolution ran take its answer instead of
/// asking again. And a re-resolution that found no new master is not
/// repeated for a gap that doubles (from [`FIRST_GAP`] to [`LAST_GAP`])
/// while they keep finding none: during a sentinel outage every failing
/// call would otherwise ask the sentinels again, one after another, and
/// wait on silent ones each time. A `+switch-master` moves the connection
/// whatever the gap.
#[derive(Default)]
struct Refreshes {
    ended: Option<Instant>,
    gap: Duration,
}

/// The gap after the first re-resolution that found nothing new.
const FIRST_GAP: Duration = Duration::from_millis(250);
/// The longest gap: a failover the announcement did not reach is followed
/// at most this late.
const LAST_GAP: Duration = Duration::from_secs(2);

impl Refreshes {
    /// Whether a call that failed at `asked_at` asks the sentinels.
    fn due(&self, asked_at: Instant) -> bool {
        match self.ended {
            None => true,
            // One ran since the call failed: its answer stands.
            Some(ended) if ended >= asked_at => false,
            Some(ended) => asked_at >= ended + self.gap,
        }
    }

    /// Records a re-resolution's end; `moved`: it found a new master.
    fn ended(&mut self, moved: bool) {
        let now = Instant::now();
        // Quiet for a while (or moved): the next trouble is news.
        let quiet = self.ended.is_some_and(|ended| now > ended + 4 * LAST_GAP);
        self.gap = if moved || quiet {
            Duration::ZERO
        } else {
            (self.gap * 2).clamp(FIRST_GAP, LAST_GAP)
        };
        self.ended = Some(now);
    }
}

#[derive(Clone)]
struct Master {
    address: String,
    client: redis::Client,
    conn: ConnectionManager,
}

/// Asks the sentinels for the master, connects to it, and returns the node
/// the lock scripts run on.
pub(crate) async fn open(config: &RedisConfig) -> Result<Node> {
    let Deployment::Sentinel {
        master,
        username,
        password,
    } = &config.deployment
    else {
        return Err(Error::config("not a redis+sentinel:// store"));
    };
    let sentinels = config
        .nodes
        .iter()
        .map(|node| {
            let address = node.to_string();
            sentinel_client(config, node, username.as_deref(), password.as_ref())
                .map(|client| (address, client))
        })
        .collect::<Result<Vec<_>>>()?;
    let shared_config = config.clone();
    // During a failover the sentinels name a master that is down, or a
    // replica not yet promoted: asked again until the connect timeout, as
    // the connected clients follow the failover. Sentinels that cannot be
    // reached, or refuse, fail at once.
    let deadline = Instant::now() + config.options.connect_timeout;
    let resolve = async {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        loop {
            let candidates = resolve(&sentinels, master, config).await?;
            // Within what is left: a master that drops packets instead of
            // refusing would otherwise use it all, and the error would not
            // say which master the sentinels named.
            let connecting = connect_first_master(&shared_config, &candidates);
            let until = tokio::time::Instant::from_std(deadline);
            let connected = tokio::time::timeout_at(until, connecting)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::unavailable(format!(
                        "the master the sentinels name ({}) did not answer in time",
                        candidates
                            .first()
                            .map(HostPort::to_string)
                            .unwrap_or_default()
                    )))
                });
            match connected {
                Err(err) if err.is_retryable() => {
                    let delay = backoff.next_delay();
                    if Instant::now() + delay >= deadline {
                        return Err(err);
                    }
                    tracing::debug!(error = %err, "omnilock sentinel: no master yet; asking again");
                    tokio::time::sleep(delay).await;
                }
                result => return result,
            }
        }
    };
    let current = tokio::time::timeout(config.options.connect_timeout, resolve)
        .await
        .map_err(|_| {
            Error::unavailable(format!(
                "cannot reach the sentinels at {} and the master they name (timed out)",
                sentinel_list(&sentinels)
            ))
        })??;
    let address = format!("{} (master {master})", current.address);
    let conn = SentinelConn {
        shared: Arc::new(Shared {
            config: shared_config,
            master_name: master.clone(),
            sentinels,
            current: RwLock::new(current),
            refreshing: tokio::sync::Mutex::new(Refreshes::default()),
            moved: tokio::sync::Notify::new(),
            watcher: std::sync::Mutex::new(None),
        }),
    };
    let watcher = tokio::spawn(watch_switches(Arc::downgrade(&conn.shared)));
    *lock_unpoisoned(&conn.shared.watcher) = Some(watcher);
    Ok(Node {
        conn: Conn::Sentinel(conn.clone()),
        subscriber: Subscriber::Sentinel(conn),
        address,
    })
}

impl SentinelConn {
    fn current(&self) -> Master {
        match self.shared.current.read() {
            Ok(master) => master.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The master of the moment: its address and a client for
    /// connections of one's own to it.
    pub(crate) fn master(&self) -> (String, redis::Client) {
        let master = self.current();
        (master.address, master.client)
    }

    /// Completes the next time the connection moves to a new master.
    pub(crate) async fn moved(&self) {
        self.shared.moved.notified().await;
    }

    /// The client of the current master (for the wake-up subscription),
    /// after asking the sentinels again: the subscription is re-opened only
    /// after a failure, which may be a failover.
    pub(crate) async fn master_client(&self) -> redis::RedisResult<redis::Client> {
        let stale = self.current().address;
        self.refresh(&stale).await;
        Ok(self.current().client)
    }

    /// Moves to the master the sentinels name now, unless another call has
    /// already moved away from `stale`, or the sentinels were asked lately
    /// (see [`Refreshes`]). Failures are logged: the caller's own error is
    /// what it reports, and a later failure tries again.
    async fn refresh(&self, stale: &str) {
        let shared = &self.shared;
        let asked_at = Instant::now();
        let mut last = shared.refreshing.lock().await;
        if self.current().address != stale || !last.due(asked_at) {
            return;
        }
        let moved = async {
            let candidates =
                resolve(&shared.sentinels, &shared.master_name, &shared.config).await?;
            if candidates.first().map(HostPort::to_string).as_deref() == Some(stale) {
                // The sentinels have not moved on (yet): stay.
                return Ok(None);
            }
            connect_first_master(&shared.config, &candidates)
                .await
                .map(Some)
        };
        let found = tokio::time::timeout(shared.config.options.connect_timeout, moved).await;
        last.ended(matches!(found, Ok(Ok(Some(_)))));
        match found {
            Ok(Ok(Some(master))) => {
                tracing::warn!(
                    from = stale,
                    to = %master.address,
                    "omnilock redis: the sentinels name a new master; moving to it"
                );
                match shared.current.write() {
                    Ok(mut current) => *current = master,
                    Err(poisoned) => *poisoned.into_inner() = master,
                }
                shared.moved.notify_waiters();
            }
            Ok(Ok(None)) => {}
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "omnilock redis: sentinels not settled yet")
            }
            Err(_) => tracing::debug!("omnilock redis: asking the sentinels timed out"),
        }
    }
}

/// Listens to one sentinel after another for `+switch-master` of this
/// master and moves the connection when it comes. Holds the store only
/// while handling a message, so dropping the store ends it.
async fn watch_switches(shared: Weak<Shared>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut next = 0;
    loop {
        let (client, master_name, timeout) = {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let (_, client) = &strong.sentinels[next % strong.sentinels.len()];
            (
                client.clone(),
                strong.master_name.clone(),
                strong.config.options.connect_timeout,
            )
        };
        next += 1;
        let subscribed = tokio::time::timeout(timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        let Ok(Ok(pubsub)) = subscribed else {
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        };
        backoff.reset();
        // A switch may have happened while nobody listened.
        if let Some(strong) = shared.upgrade() {
            let conn = SentinelConn { shared: strong };
            let stale = conn.current().address;
            conn.refresh(&stale).await;
        }
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            // "<name> <old host> <old port> <new host> <new port>"
            let Ok(text) = message.get_payload::<String>() else {
                continue;
            };
            let fields: Vec<&str> = text.split(' ').collect();
            if fields.first() != Some(&master_name.as_str()) {
                continue;
            }
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let conn = SentinelConn { shared: strong };
            // The announcement names the new master: go there even while
            // other sentinels, not caught up, still name the old one.
            let port = fields.get(4).and_then(|p| p.parse().ok());
            match (fields.get(3), port) {
                (Some(host), Some(port)) => {
                    let address = HostPort {
                        host: host.to_string(),
                        port: Some(port),
                    };
                    conn.move_to(address).await;
                }
                _ => {
                    let stale = conn.current().address;
                    conn.refresh(&stale).await;
                }
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

impl SentinelConn {
    /// Moves to `address` if it is a master now (a `+switch-master`).
    async fn move_to(&self, address: HostPort) {
        let shared = &self.shared;
        let mut last = shared.refreshing.lock().await;
        if self.current().address == address.to_string() {
            return;
        }
        let connect = connect_master(&shared.config, &address);
        match tokio::time::timeout(shared.config.options.connect_timeout, connect).await {
            Ok(Ok(master)) => {
                last.ended(true);
                tracing::warn!(to = %master.address, "omnilock redis: +switch-master; moving");
                match shared.current.write() {
                    Ok(mut current) => *current = master,
                    Err(poisoned) => *poisoned.into_inner() = master,
                }
                shared.moved.notify_waiters();
            }
            _ => tracing::debug!(%address, "omnilock redis: the announced master is not ready"),
        }
    }
}

/// An error code of a server that is no master (now).
fn no_master(code: &str) -> bool {
    matches!(code, "READONLY" | "MASTERDOWN" | "LOADING")
}

/// An error after which the master may have changed.
fn may_have_failed_over(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.code().is_some_and(no_master)
}

/// An answer (redis-rs gives server errors as values, not as `Err`) that
/// says this server is no master now: a replica's `READONLY`, or a
/// server that is not ready.
pub(crate) fn answered_as_no_master(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if no_master(e.code()))
}

impl redis::aio::ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let master = self.current();
            let mut conn = master.conn;
            let result = conn.req_packed_command(cmd).await;
            let moved = match &result {
                Err(e) => may_have_failed_over(e),
                Ok(value) => answered_as_no_master(value),
            };
            if moved {
                self.refresh(&master.address).await;
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let master = self.current();
            let mut conn = master.conn;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            let moved = match &result {
                Err(e) => may_have_failed_over(e),
                Ok(values) => values.iter().any(answered_as_no_master),
            };
            if moved {
                self.refresh(&master.address).await;
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.config.db
    }
}

/// A client for one sentinel: the sentinels' own credentials (none unless
/// `sentinel_username`/`sentinel_password` are given), the URL's TLS.
fn sentinel_client(
    config: &RedisConfig,
    node: &HostPort,
    username: Option<&str>,
    password: Option<&omnilock_core::Secret>,
) -> Result<redis::Client> {
    let login = Login {
        default_port: 26379,
        username,
        password,
        db: 0,
    };
    client_for(config, node, login)
}

fn sentinel_list(sentinels: &[(String, redis::Client)]) -> String {
    sentinels
        .iter()
        .map(|(address, _)| address.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The masters the sentinels name, the most named first (during a
/// failover, a sentinel that has not caught up names the old one). A
/// sentinel that answers but does not know `master` counts too: if none
/// knows it, the error says so (a wrong name is a configuration error, not
/// an outage).
async fn resolve(
    sentinels: &[(String, redis::Client)],
    master: &str,
    config: &RedisConfig,
) -> Result<Vec<HostPort>> {
    // Each sentinel gets half the connect timeout, so that one that is
    // down (or silent) cannot use up the whole budget of a connect or a
    // failover.
    let probe = config.options.connect_timeout / 2;
    let asks = sentinels.iter().map(|(address, client)| async move {
        let ask = async {
            let connection = client
                .get_multiplexed_async_connection_with_config(
                    &AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(config.options.connect_timeout))
                        .set_response_timeout(Some(config.options.response_timeout)),
                )
                .await;
            match connection {
                Ok(mut connection) => {
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(master)
                        .query_async::<Option<(String, u16)>>(&mut connection)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        match tokio::time::timeout(probe, ask).await {
            Ok(answer) => answer.map_err(|e| sentinel_error(e, address)),
            Err(_) => Err(Error::unavailable(format!(
                "the sentinel at {address} did not answer within {probe:?}"
            ))),
        }
    });
    let mut votes: Vec<(HostPort, usize)> = Vec::new();
    let (mut failures, mut unknown, mut refused) = (Vec::new(), 0, None);
    for answer in futures_util::future::join_all(asks).await {
        match answer {
            Ok(Some((host, port))) => {
                let named = HostPort {
                    host,
                    port: Some(port),
                };
                match votes.iter_mut().find(|(address, _)| *address == named) {
                    Some((_, count)) => *count += 1,
                    None => votes.push((named, 1)),
                }
            }
            Ok(None) => unknown += 1,
            Err(e) if !e.is_retryable() => refused = Some(e),
            Err(e) => failures.push(e.message().to_string()),
        }
    }
    if votes.is_empty() && unknown == 0 {
        // A sentinel that refused us (credentials) says more than the
        // ones that did not answer.
        if let Some(refused) = refused {
            return Err(refused);
        }
    }
    if !votes.is_empty() {
        votes.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        return Ok(votes.into_iter().map(|(address, _)| address).collect());
    }
    if unknown > 0 {
        return Err(Error::config(format!(
            "no sentinel at {} knows a master named {master:?} ({unknown} answered); \
             check the name in the URL's path",
            sentinel_list(sentinels)
        )));
    }
    Err(Error::unavailable(format!(
        "cannot reach any sentinel: {}",
        failures.join("; ")
    )))
}

/// Connects to the first of `candidates` that is a master.
async fn connect_first_master(config: &RedisConfig, candidates: &[HostPort]) -> Result<Master> {
    let mut last = Error::unavailable("the sentinels name no master");
    for candidate in candidates {
        match connect_master(config, candidate).await {
            Ok(master) => return Ok(master),
            Err(e) if e.kind() == omnilock_core::ErrorKind::InvalidConfig => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Sentinel errors name the sentinels' own credentials, which differ from
/// the data nodes'.
fn sentinel_error(e: redis::RedisError, address: &str) -> Error {
    let refused = refused_credentials(&e);
    let mapped = map_err(e, address);
    if refused {
        return Error::auth(format!(
            "the sentinel at {address} refused the credentials: give the sentinels' own with \
             sentinel_username= and sentinel_password= (the URL's user and password are the \
             data nodes')"
        ));
    }
    mapped
}

/// Connects to the server at `address`, checking it is a master: a
/// sentinel that has not yet noticed a failover may name a server that has
/// become a replica.
async fn connect_master(config: &RedisConfig, address: &HostPort) -> Result<Master> {
    let client = Node::client(config, address)?;
    let mut conn = connection_manager(&client, &config.options).await?;
    let shown = address.to_string();
    let role: Vec<Value> = redis::cmd("ROLE")
        .query_async(&mut conn)
        .await
        .map_err(|e| map_err(e, &shown))?;
    let role = role
        .first()
        .and_then(|r| redis::from_redis_value_ref::<String>(r).ok())
        .unwrap_or_default();
    if role != "master" {
        return Err(Error::unavailable(format!(
            "the sentinels name {shown} as master, but it is a {role} (failover in progress)"
        )));
    }
    Ok(Master {
        address: shown,
        client,
        conn,
    })
}
