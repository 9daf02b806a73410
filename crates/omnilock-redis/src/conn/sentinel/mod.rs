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
//! at once (`watch`).

mod ask;
mod watch;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use omnilock_core::{Backoff, Error, HostPort, Result, lock_unpoisoned};
use redis::{Cmd, RedisFuture, Value};

use crate::config::{Deployment, RedisConfig};
use crate::conn::{Conn, Node, Subscriber};

use ask::{Master, connect_first_master, resolve, sentinel_client, sentinel_list};
use watch::watch_switches;

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
