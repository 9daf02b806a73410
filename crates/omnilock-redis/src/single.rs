//! One Redis master: a fair, herd-free, reentrant lock with fencing, on one
//! server, a cluster (the master of the lock's slot) or the master the
//! sentinels name.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use omnilock_core::{
    async_trait, complete_or_undo, lock_unpoisoned, retry_in_background, AcquireRequest, Backend,
    Backoff, Capabilities, Error, ErrorKind, Grant, LockName, Result,
};
use rand::Rng;
use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Notify;

use crate::builder::RedisBuilder;
use crate::config::{Deployment, RedisConfig, RedisOptions};
use crate::counted::Counted;
use crate::node::{Node, Subscriber};
use crate::scripts::counted::AcquireCounted;
use crate::scripts::keys::Keys;
use crate::scripts::mutex::{Acquire, Acquired, Released, Renewal};
use crate::scripts::Scripts;
use crate::shard_wakeups::{ShardWakeups, LINGER};
use crate::wake::{self, WakeTarget};

/// A lock store on one Redis master: one server (`redis://`), Redis Cluster
/// (`redis+cluster://`) or a master watched by Sentinel
/// (`redis+sentinel://`). Create it with `omnilock::connect(url)`,
/// [`RedisStore::connect`], or on the application's own client with
/// [`RedisStore::builder`].
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `redis`, `redis-cluster` or `redis-sentinel`.
    kind: &'static str,
    options: RedisOptions,
    /// Where the store is, for `Debug` (no credentials).
    shown: String,
    node: Node,
    scripts: Scripts,
    /// This client's id: waiter entries are `<client id>:<waiter id>` and
    /// wake-ups for them arrive on `<channel prefix><client id>`.
    client_id: String,
    channels: WakeChannels,
    next_waiter: AtomicU64,
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    wakeups: AtomicU64,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Where releases publish the wake-ups of this client's waiters.
enum WakeChannels {
    /// One channel per client, `<prefix>:wake:<client id>`, subscribed at
    /// connect: one server, or the master the sentinels name.
    PerClient { prefix: String },
    /// One channel per lock and client, `{prefix:name}:wake:<client id>` in
    /// the lock's slot, subscribed while waiting: a cluster.
    PerLock(ShardWakeups),
}

/// How the wake-up messages reach the listener task.
enum Incoming {
    Subscription(redis::aio::PubSub),
    Pushes(UnboundedReceiver<PushInfo>),
}

impl Inner {
    /// The channel prefix the scripts publish the wake-ups of the lock
    /// whose mutex key is `lock` under (its semaphore and read-write lock
    /// share it).
    fn channel_prefix(&self, lock: &str) -> Cow<'_, str> {
        match &self.channels {
            WakeChannels::PerClient { prefix } => Cow::Borrowed(prefix),
            WakeChannels::PerLock(_) => Cow::Owned(format!("{lock}:wake:")),
        }
    }

    /// A wake-up message for `entry`.
    fn deliver(&self, entry: &str) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        if let Some(notify) = lock_unpoisoned(&self.waiters).get(entry) {
            notify.notify_one();
        }
    }

    /// Wake-ups may have been missed: every local waiter checks again.
    fn recheck_all(&self) {
        for notify in lock_unpoisoned(&self.waiters).values() {
            notify.notify_one();
        }
    }
}

impl WakeTarget for Inner {
    fn deliver(&self, _from: usize, entry: &str) {
        Inner::deliver(self, entry);
    }

    fn recheck_all(&self, _from: usize) {
        Inner::recheck_all(self);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.listener.get_mut().ok().and_then(|t| t.take()) {
            task.abort();
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("store", &self.inner.shown)
            .finish()
    }
}

enum Attempt {
    Taken(u64),
    Busy(Option<Duration>),
    /// Granted, but fewer replicas than `wait_replicas` confirmed it in
    /// time; the grant is being undone by the task given (if a runtime ran
    /// it).
    Unconfirmed(Error, Option<tokio::task::JoinHandle<()>>),
}

impl RedisStore {
    pub(crate) fn node(&self) -> &Node {
        &self.inner.node
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.inner.options.prefix
    }

    pub(crate) fn scripts(&self) -> &Scripts {
        &self.inner.scripts
    }

    pub(crate) fn channel_prefix_for(&self, lock: &str) -> Cow<'_, str> {
        self.inner.channel_prefix(lock)
    }

    /// A fresh waiter entry id, `<client id>:<n>`.
    fn new_entry(&self) -> String {
        let waiter = self.inner.next_waiter.fetch_add(1, Ordering::Relaxed);
        format!("{}:{waiter}", self.inner.client_id)
    }

    /// Connects (checking the server answers and accepts the credentials;
    /// for a cluster, through any reachable seed; for Sentinel, to the
    /// master the sentinels name) and subscribes to this client's wake-up
    /// channel.
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        config.options.check(false)?;
        let node = match &config.deployment {
            Deployment::Single => {
                let client = Node::client(&config, &config.nodes[0])?;
                Node::open(client, None, &config.options).await?
            }
            Deployment::Cluster => crate::cluster::open(&config).await?,
            Deployment::Sentinel { .. } => crate::sentinel::open(&config).await?,
            Deployment::Redlock => {
                return Err(Error::config(
                    "a redlock:// store is a RedlockStore, not a RedisStore",
                ))
            }
        };
        let kind = config.deployment.kind();
        Self::start(config.options, node, false, config.shown, kind).await
    }

    /// Starts building a store on the application's own `client` (its
    /// address, credentials, database and TLS settings). See
    /// [`RedisBuilder`].
    pub fn builder(client: redis::Client) -> RedisBuilder {
        RedisBuilder::new(client)
    }

    /// The one way a store is made, from a URL or from a builder: checked
    /// `options`, the client, and optionally the application's connection
    /// for commands (else omnilock opens its own from `client`).
    pub(crate) async fn open(
        options: RedisOptions,
        client: redis::Client,
        manager: Option<ConnectionManager>,
        shown: String,
    ) -> Result<Self> {
        options.check(false)?;
        let shared = manager.is_some();
        let node = Node::open(client, manager, &options).await?;
        Self::start(options, node, shared, shown, "redis").await
    }

    /// Subscribes to this client's wake-up channel on `node` (a cluster
    /// connects for per-lock subscriptions instead) and starts the
    /// listener. `shared`: the command connection is the application's.
    async fn start(
        options: RedisOptions,
        node: Node,
        shared: bool,
        shown: String,
        kind: &'static str,
    ) -> Result<Self> {
        let client_id = format!("{:016x}", rand::random::<u64>());
        let timed_out = || {
            Error::unavailable(format!(
                "cannot reach Redis at {} (timed out subscribing)",
                node.address
            ))
        };
        let (channels, incoming) = match &node.subscriber {
            Subscriber::Shards(config) => {
                let (shards, pushes) =
                    tokio::time::timeout(options.connect_timeout, ShardWakeups::open(config))
                        .await
                        .map_err(|_| timed_out())??;
                (WakeChannels::PerLock(shards), Incoming::Pushes(pushes))
            }
            _ => {
                let prefix = format!("{}:wake:", options.prefix);
                let channel = format!("{prefix}{client_id}");
                // redis-rs gives the subscription no timeout of its own.
                let pubsub = tokio::time::timeout(
                    options.connect_timeout,
                    node.subscriber.subscribe(&channel),
                )
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| node.err(e))?;
                if shared {
                    check_same_server(&node, &channel).await?;
                }
                (
                    WakeChannels::PerClient { prefix },
                    Incoming::Subscription(pubsub),
                )
            }
        };
        let subscriber = node.subscriber.clone();
        let store = RedisStore {
            inner: Arc::new(Inner {
                kind,
                options,
                shown,
                node,
                scripts: Scripts::new(),
                client_id,
                channels,
                next_waiter: AtomicU64::new(0),
                waiters: Mutex::new(HashMap::new()),
                wakeups: AtomicU64::new(0),
                listener: Mutex::new(None),
            }),
        };
        let weak = Arc::downgrade(&store.inner);
        let task = match incoming {
            Incoming::Subscription(pubsub) => tokio::spawn(wake::listen(
                weak,
                0,
                Some(pubsub),
                subscriber,
                format!(
                    "{}:wake:{}",
                    store.inner.options.prefix, store.inner.client_id
                ),
                store.inner.options.connect_timeout,
            )),
            Incoming::Pushes(pushes) => tokio::spawn(listen_shards(weak, pushes)),
        };
        *lock_unpoisoned(&store.inner.listener) = Some(task);
        Ok(store)
    }

    /// The channel this client's wake-ups for `name` arrive on: the
    /// client's one channel, or in a cluster a channel in `name`'s slot.
    pub fn wake_channel(&self, name: &LockName) -> String {
        let keys = self.keys(name);
        format!(
            "{}{}",
            self.inner.channel_prefix(&keys.lock),
            self.inner.client_id
        )
    }

    /// Wake-up messages this client has received (each wakes one waiter).
    pub fn wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    fn keys(&self, name: &LockName) -> Keys {
        Keys::new(&self.inner.options.prefix, name.as_str())
    }

    /// One run of the acquire script. `call` is the same for every attempt
    /// of one acquire, so that an attempt whose grant ran but whose reply
    /// was lost gets that grant back on the next one. A mutex's try-acquire
    /// passes no `entry`; a semaphore's or read-write lock's always does
    /// (the entry id is its acquisition's identity), with `wait` false for
    /// a try.
    async fn attempt(
        &self,
        request: &AcquireRequest,
        entry: &str,
        call: &str,
        wait: bool,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        let (scripts, wait_replicas) = (&inner.scripts, inner.options.wait_replicas);
        let (owner, ttl) = (request.owner.as_str(), request.ttl);
        let entry_lease = inner.options.waiter_lease;
        let answer = match Counted::of(request.primitive) {
            None => {
                let keys = self.keys(&request.name);
                let mut conn = inner.node.conn_for(&keys.lock);
                let acquire = Acquire {
                    owner,
                    ttl,
                    reentrant: request.reentrant,
                    entry,
                    entry_lease,
                    channel_prefix: &inner.channel_prefix(&keys.lock),
                    call,
                };
                scripts
                    .acquire(&mut conn, &keys, &acquire, wait_replicas)
                    .await
            }
            Some(counted) => {
                // A counted lock's keys only share its slot with the
                // mutex's key, which routes the command.
                let keys = counted.keys(&inner.options.prefix, request);
                let mut conn = inner.node.conn_for(&keys.lock);
                let acquire = AcquireCounted {
                    entry,
                    owner,
                    weight: counted.weight(),
                    capacity: counted.capacity(),
                    ttl,
                    entry_lease,
                    wait,
                    channel_prefix: &inner.channel_prefix(&keys.lock),
                };
                scripts
                    .acquire_counted(&mut conn, &keys, &acquire, wait_replicas)
                    .await
            }
        };
        let (answer, confirmed) = answer.map_err(|e| inner.node.err(e))?;
        match answer {
            Acquired::Taken(token) => {
                if let Err(err) = self.check_confirmed(confirmed) {
                    // Not on enough replicas: undo, so that nobody holds a
                    // lock a failover could hand to a second owner. One
                    // call id for every retry of the undo: a retry whose
                    // first run's reply was lost must not drop a second
                    // hold of a reentrant owner.
                    let (store, request, undo) = (self.clone(), request.clone(), nonce());
                    let entry = entry.to_string();
                    let undoing = retry_in_background(move || {
                        let (store, request, undo) = (store.clone(), request.clone(), undo.clone());
                        let entry = entry.clone();
                        async move { store.undo(&request, &entry, token, &undo).await }
                    });
                    return Ok(Attempt::Unconfirmed(err, undoing));
                }
                Ok(Attempt::Taken(token))
            }
            Acquired::HeldNotReentrant => Err(Error::would_deadlock()),
            Acquired::CapacityMismatch(recorded) => Err(Error::config(format!(
                "the semaphore is in use with {recorded} permits, not {}: every user must ask \
                 for the same number",
                Counted::of(request.primitive).map_or(0, |c| c.capacity())
            ))),
            Acquired::EntryReleased => Err(Error::new(
                ErrorKind::Backend,
                "this acquisition's entry was already released",
            )),
            Acquired::Busy(pttl) => Ok(Attempt::Busy(pttl)),
        }
    }

    /// One run of the `lock_all` script over every part: the tokens if all
    /// were free (or taken by an earlier run of `call`), else `None`.
    async fn take_all(&self, requests: &[AcquireRequest], call: &str) -> Result<Option<Vec<u64>>> {
        let inner = &self.inner;
        let first = &requests[0];
        let keys: Vec<Keys> = requests.iter().map(|r| self.keys(&r.name)).collect();
        let mut conn = inner.node.conn_for(&keys[0].lock);
        inner
            .scripts
            .acquire_all(&mut conn, &keys, first.owner.as_str(), first.ttl, call)
            .await
            .map_err(|e| inner.node.err(e))
    }

    /// An attempt that completes even if the caller goes away; a lock it
    /// took for nobody is released at once.
    async fn attempt_detached(
        &self,
        request: &AcquireRequest,
        entry: &str,
        call: &str,
        wait: bool,
    ) -> Result<(Attempt, Instant)> {
        let (store, undo) = (self.clone(), self.clone());
        let (call_request, undo_request) = (request.clone(), request.clone());
        let (entry, call) = (entry.to_string(), call.to_string());
        let undo_entry = entry.clone();
        complete_or_undo(
            async move {
                let started = Instant::now();
                store
                    .attempt(&call_request, &entry, &call, wait)
                    .await
                    .map(|a| (a, started))
            },
            move |abandoned| async move {
                if let Ok((Attempt::Taken(token), _)) = abandoned {
                    let _ = undo.undo(&undo_request, &undo_entry, token, &nonce()).await;
                }
            },
        )
        .await
    }

    /// Gives back a grant nobody will use: the mutex's hold (`call` names
    /// this undo, for its retries), or the semaphore's or read-write lock's
    /// `entry`.
    async fn undo(
        &self,
        request: &AcquireRequest,
        entry: &str,
        token: u64,
        call: &str,
    ) -> Result<()> {
        if Counted::of(request.primitive).is_some() {
            return self.cancel_counted(request, entry).await;
        }
        self.release_token(request, token, call).await.map(drop)
    }

    /// With `?wait_replicas=N`: `Unavailable` unless `WAIT` said N
    /// replicas have the write.
    fn check_confirmed(&self, acknowledged: Option<u32>) -> Result<()> {
        let (Some(wait), Some(acknowledged)) = (self.inner.options.wait_replicas, acknowledged)
        else {
            return Ok(());
        };
        if acknowledged < wait.replicas {
            return Err(Error::unavailable(format!(
                "only {acknowledged} of {} replicas of {} confirmed the write within {:?} \
                 (wait_replicas, wait_timeout)",
                wait.replicas, self.inner.node.address, wait.timeout
            )));
        }
        Ok(())
    }

    /// One run of the batch renewal script over mutex holds (all on one
    /// server): whether each is still held by its owner and token, and
    /// extended. With `wait_replicas`, a shortfall of confirmations fails
    /// the whole batch (retried).
    async fn renew_mutexes(&self, holds: &[(&AcquireRequest, &Grant)]) -> Result<Vec<bool>> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        let locks: Vec<String> = holds.iter().map(|(r, _)| self.keys(&r.name).lock).collect();
        let renewals: Vec<Renewal> = holds
            .iter()
            .zip(&locks)
            .map(|((request, grant), lock)| Renewal {
                lock,
                owner: request.owner.as_str(),
                token: grant.token,
                ttl: request.ttl,
            })
            .collect();
        let mut conn = inner.node.conn_for(&locks[0]);
        let (renewed, confirmed) = inner
            .scripts
            .renew_all(&mut conn, &renewals, inner.options.wait_replicas)
            .await
            .map_err(|e| inner.node.err(e))?;
        self.check_confirmed(confirmed)?;
        Ok(renewed)
    }

    /// One run of the release script; `call` is the same for every retry
    /// of one hold's release.
    async fn release_token(
        &self,
        request: &AcquireRequest,
        token: u64,
        call: &str,
    ) -> Result<Released> {
        let inner = &self.inner;
        let keys = self.keys(&request.name);
        let mut conn = inner.node.conn_for(&keys.lock);
        let owner = request.owner.as_str();
        let channel_prefix = inner.channel_prefix(&keys.lock);
        inner
            .scripts
            .release(&mut conn, &keys, owner, token, &channel_prefix, call)
            .await
            .map_err(|e| inner.node.err(e))
    }
}

/// Delivers a cluster's sharded wake-ups to this client's waiters, and
/// unsubscribes the channels of locks no longer waited on. After a dropped
/// connection every local waiter re-checks at once: redis-rs subscribes
/// again, but a release may have published meanwhile.
async fn listen_shards(store: Weak<Inner>, mut pushes: UnboundedReceiver<PushInfo>) {
    let mut sweep = tokio::time::interval(LINGER / 2);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let Some(push) = push else { return };
                let Some(inner) = store.upgrade() else { return };
                match push.kind {
                    // [channel, message]
                    PushKind::SMessage => {
                        let entry = push.data.into_iter().nth(1).map(redis::from_redis_value::<String>);
                        if let Some(Ok(entry)) = entry {
                            inner.deliver(&entry);
                        }
                    }
                    // The server ended a subscription: its slot moved.
                    PushKind::SUnsubscribe => {
                        let channel = push.data.into_iter().next().map(redis::from_redis_value::<String>);
                        if let (Some(Ok(channel)), WakeChannels::PerLock(shards)) = (channel, &inner.channels) {
                            if shards.dropped(&channel) {
                                inner.recheck_all();
                            }
                        }
                    }
                    PushKind::Disconnection => {
                        tracing::warn!("omnilock redis: a cluster subscription connection dropped; waiters re-check");
                        if let WakeChannels::PerLock(shards) = &inner.channels {
                            shards.dropped_all();
                        }
                        inner.recheck_all();
                    }
                    _ => {}
                }
            }
            // In a task of its own: messages keep flowing while a slow
            // node holds up an unsubscription.
            _ = sweep.tick() => {
                let store = store.clone();
                tokio::spawn(async move {
                    let Some(inner) = store.upgrade() else { return };
                    if let WakeChannels::PerLock(shards) = &inner.channels {
                        shards.sweep().await;
                    }
                });
            }
        }
    }
}

/// Wake-ups are published through the command connection and arrive on the
/// subscription that `client` opened: with the application's own
/// `ConnectionManager` the two must reach the same server, or every waiter
/// would wait for its periodic re-check. The channel is new and random, so
/// exactly one subscriber there means the same server.
async fn check_same_server(node: &Node, channel: &str) -> Result<()> {
    let mut conn = node.conn.clone();
    let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .map_err(|e| node.err(e))?;
    if subscribers != 1 {
        return Err(Error::config(format!(
            "the ConnectionManager does not reach the Redis server that the client reaches \
             ({}): give both for the same server",
            node.address
        )));
    }
    Ok(())
}

/// A fresh call id. A script call may run twice: the cluster connection
/// re-sends a command after a dropped connection, and core retries a
/// release whose reply was lost. One id per acquire (all its attempts) and
/// one per hold's release (all its retries) let the scripts recognise a
/// second run and change nothing (see `scripts.rs`).
/// A mutex's renewal found another holder, or none.
fn lock_gone() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "the lock is no longer held by this owner",
    )
}

fn nonce() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// What a hold's release and renewal name, kept in its grant: the release
/// call id (the mutex), or the entry id (a semaphore permit, a side of a
/// read-write lock).
struct HoldId {
    call: String,
    entry: String,
}

fn granted(token: u64, valid_until: Instant, entry: &str) -> Grant {
    Grant::new(token, valid_until).with_state(HoldId {
        call: nonce(),
        entry: entry.to_string(),
    })
}

impl RedisStore {
    /// Whether the master of `request`'s lock has as many replicas
    /// connected as `wait_replicas` asks (`INFO replication`); true when it
    /// cannot tell, so that the next attempt finds out.
    async fn has_replicas(&self, request: &AcquireRequest) -> bool {
        let Some(wait) = self.inner.options.wait_replicas else {
            return true;
        };
        let keys = self.keys(&request.name);
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let info: redis::RedisResult<String> = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await;
        let Ok(info) = info else { return true };
        info.lines()
            .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
            .and_then(|n| n.parse::<u32>().ok())
            .is_none_or(|connected| connected >= wait.replicas)
    }

    /// In a cluster, marks `place`'s channel for a new subscription.
    fn suspect_channel(&self, place: &Place) {
        if let (WakeChannels::PerLock(shards), Some(channel)) =
            (&self.inner.channels, &place.joined)
        {
            shards.suspect(channel);
        }
    }

    /// In a cluster, makes sure this client is subscribed to the channel in
    /// the lock's slot that `place`'s wake-ups arrive on (a local check
    /// when it is). True when the subscription is new. A failure is left to
    /// the waiter's periodic re-check; its next round tries again.
    async fn listen_for(&self, place: &mut Place) -> bool {
        let WakeChannels::PerLock(shards) = &self.inner.channels else {
            return false;
        };
        let channel = match &place.joined {
            Some(channel) => channel.clone(),
            None => {
                let channel = self.wake_channel(&place.request.name);
                shards.join(&channel);
                place.joined = Some(channel.clone());
                channel
            }
        };
        shards.listen(&channel).await.unwrap_or_else(|err| {
            tracing::debug!(error = %err, "omnilock redis: cannot subscribe to a lock's channel yet");
            false
        })
    }
}

/// A waiter's place in the queue, left (in the background) if the acquire
/// ends without the lock.
struct Place {
    store: RedisStore,
    request: AcquireRequest,
    entry: String,
    granted: bool,
    /// The cluster channel this waiter listens on, if it joined one.
    joined: Option<String>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.store.inner;
        lock_unpoisoned(&inner.waiters).remove(&self.entry);
        if let (Some(channel), WakeChannels::PerLock(shards)) = (&self.joined, &inner.channels) {
            shards.leave(channel);
        }
        if self.granted {
            return;
        }
        // Leave the queue in the background, retried through a short stall
        // of the server (the waiter lease would otherwise hold up the next
        // in line until it runs out).
        let (store, request, entry) =
            (self.store.clone(), self.request.clone(), self.entry.clone());
        retry_in_background(move || {
            let (store, request, entry) = (store.clone(), request.clone(), entry.clone());
            async move {
                if Counted::of(request.primitive).is_some() {
                    return store.cancel_counted(&request, &entry).await;
                }
                let inner = &store.inner;
                let keys = store.keys(&request.name);
                let mut conn = inner.node.conn_for(&keys.lock);
                let channel_prefix = inner.channel_prefix(&keys.lock);
                inner
                    .scripts
                    .cancel(&mut conn, &keys, &entry, &channel_prefix)
                    .await
                    .map_err(|e| inner.node.err(e))
            }
        });
    }
}

#[async_trait]
impl Backend for RedisStore {
    fn kind(&self) -> &'static str {
        self.inner.kind
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: true,
            push_wakeups: true,
            fencing: true,
            cross_process_reentrancy: true,
            lease_renewal: true,
            cross_process: true,
            break_lock: true,
            holder: true,
            election: true,
            // Replication is asynchronous, persistence optional.
            survives_failover: false,
            semaphore: true,
            rw_lock: true,
            // One script over every part's keys: one server or Sentinel's
            // master. A cluster keeps each name in its own slot, and
            // `wait_replicas` confirms one lock per write.
            atomic_lock_all: matches!(self.inner.channels, WakeChannels::PerClient { .. })
                && self.inner.options.wait_replicas.is_none(),
        }
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<Grant>>> {
        if !self.capabilities().atomic_lock_all || requests.is_empty() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "this deployment takes a set part by part",
            ));
        }
        let (store, undo) = (self.clone(), self.clone());
        let (call_requests, undo_requests) = (requests.to_vec(), requests.to_vec());
        let (tokens, started) = complete_or_undo(
            async move {
                let started = Instant::now();
                let tokens = store.take_all(&call_requests, &nonce()).await?;
                Ok((tokens, started))
            },
            // Taken for a caller that has gone: give every part back.
            move |abandoned: Result<(Option<Vec<u64>>, Instant)>| async move {
                if let Ok((Some(tokens), _)) = abandoned {
                    for (request, token) in undo_requests.iter().zip(tokens) {
                        let _ = undo.release_token(request, token, &nonce()).await;
                    }
                }
            },
        )
        .await?;
        Ok(tokens.map(|tokens| {
            requests
                .iter()
                .zip(tokens)
                .map(|(request, token)| granted(token, started + request.ttl, ""))
                .collect()
        }))
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let entry = match Counted::of(request.primitive) {
            None => String::new(),
            Some(_) => self.new_entry(),
        };
        match self
            .attempt_detached(request, &entry, &nonce(), false)
            .await?
        {
            (Attempt::Taken(token), started) => {
                Ok(Some(granted(token, started + request.ttl, &entry)))
            }
            (Attempt::Busy(_), _) => Ok(None),
            (Attempt::Unconfirmed(err, _), _) => Err(err),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let inner = &self.inner;
        let entry = self.new_entry();
        let notify = Arc::new(Notify::new());
        lock_unpoisoned(&inner.waiters).insert(entry.clone(), notify.clone());
        let mut place = Place {
            store: self.clone(),
            request: request.clone(),
            entry: entry.clone(),
            granted: false,
            joined: None,
        };
        let mut call = nonce();
        let recheck = inner.options.waiter_lease / 3;
        let mut backoff = Backoff::new(Duration::from_millis(10), recheck);
        let mut unconfirmed = false;
        let mut by_message = true;
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // After a grant the replicas could not confirm, take no other
            // until the master has the replicas again: each would be
            // granted and undone, waiting `wait_timeout` every time.
            if unconfirmed {
                if !self.has_replicas(request).await {
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                unconfirmed = false;
            }
            let delay = match self.attempt_detached(request, &entry, &call, true).await {
                Ok((Attempt::Taken(token), started)) => {
                    place.granted = true;
                    if !by_message {
                        // Granted on a re-check: the release's message may
                        // have been lost to a subscription that died
                        // silently. Subscribe again on the next wait.
                        self.suspect_channel(&place);
                    }
                    return Ok(granted(token, started + request.ttl, &entry));
                }
                Ok((Attempt::Busy(remaining), _)) => {
                    if self.listen_for(&mut place).await {
                        // Queued before the subscription: a release may
                        // have published to nobody. Look again now.
                        continue;
                    }
                    request.waiting.raise();
                    backoff.reset();
                    // Re-check in case a wake-up is lost, jittered so that
                    // waiters do not poll together; and at the holder's
                    // expiry, if it dies without releasing.
                    let jitter = rand::thread_rng().gen_range(0.8..1.0);
                    let delay = recheck.mul_f64(jitter);
                    remaining.map_or(delay, |r| delay.min(r + Duration::from_millis(1)))
                }
                Ok((Attempt::Unconfirmed(err, undoing), _)) => {
                    tracing::warn!(error = %err, "omnilock redis: grant not confirmed by the replicas; waiting for them");
                    // The next attempt must not find this grant (its call
                    // id would hand it back while the undo frees it): wait
                    // for the undo, and go on under a new call id.
                    if let Some(undoing) = undoing {
                        let _ = undoing.await;
                    }
                    call = nonce();
                    unconfirmed = true;
                    backoff.next_delay()
                }
                Err(err) if err.is_retryable() => backoff.next_delay(),
                Err(err) => return Err(err),
            };
            by_message = tokio::select! {
                _ = &mut woken => true,
                _ = tokio::time::sleep(delay) => false,
            };
        }
    }

    async fn release(&self, request: &AcquireRequest, grant: &Grant) -> Result<()> {
        let id = grant.backend_state::<HoldId>()?;
        let released = match Counted::of(request.primitive) {
            None => {
                let released = self.release_token(request, grant.token, &id.call).await?;
                released != Released::NotOwner
            }
            Some(_) => {
                self.release_counted(request, &id.entry, grant.token)
                    .await?
            }
        };
        if !released {
            return Err(Error::not_owner());
        }
        Ok(())
    }

    async fn renew(&self, request: &AcquireRequest, grant: &Grant) -> Result<Instant> {
        if Counted::of(request.primitive).is_some() {
            let id = grant.backend_state::<HoldId>()?;
            let started = Instant::now();
            if self.renew_counted(request, &id.entry, grant.token).await? {
                return Ok(started + request.ttl);
            }
            return Err(Error::new(
                ErrorKind::LockLost,
                "the permit or read-write lock is no longer held by this owner",
            ));
        }
        let started = Instant::now();
        if self.renew_mutexes(&[(request, grant)]).await? == [true] {
            Ok(started + request.ttl)
        } else {
            Err(lock_gone())
        }
    }

    /// Mutexes share one script run per batch on one server (a cluster's
    /// locks live in different slots: each is renewed on its own there);
    /// semaphore permits and read-write locks are renewed each on its own.
    async fn renew_all(&self, holds: &[(&AcquireRequest, &Grant)]) -> Vec<Result<Instant>> {
        let started = Instant::now();
        let batched = |request: &AcquireRequest| {
            Counted::of(request.primitive).is_none() && !self.inner.node.is_cluster()
        };
        let (mutexes, others): (Vec<usize>, Vec<usize>) =
            (0..holds.len()).partition(|&i| batched(holds[i].0));
        let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
        let each = futures_util::future::join_all(
            others.iter().map(|&i| self.renew(holds[i].0, holds[i].1)),
        );
        let batch: Vec<_> = mutexes.iter().map(|&i| holds[i]).collect();
        let (each, batch) = tokio::join!(each, self.renew_mutexes(&batch));
        for (&i, result) in others.iter().zip(each) {
            results[i] = Some(result);
        }
        match batch {
            Ok(renewed) => {
                for (&i, renewed) in mutexes.iter().zip(renewed) {
                    results[i] = Some(if renewed {
                        Ok(started + holds[i].0.ttl)
                    } else {
                        Err(lock_gone())
                    });
                }
            }
            Err(err) => {
                for &i in &mutexes {
                    results[i] = Some(Err(err.clone()));
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
            })
            .collect()
    }

    async fn holder(&self, name: &LockName) -> Result<Option<omnilock_core::Holder>> {
        let keys = self.keys(name);
        let mut conn = self.inner.node.conn_for(&keys.lock);
        let (owner, token): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(&keys.lock)
            .arg("owner")
            .arg("token")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.inner.node.err(e))?;
        match (owner, token) {
            (Some(owner), Some(token)) => Ok(Some(omnilock_core::Holder {
                owner: omnilock_core::Owner::new(&owner)?,
                token,
            })),
            _ => Ok(None),
        }
    }

    /// Breaks the lock of the holder seen now: a second run of the script
    /// (a re-send) cannot break the next holder's.
    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let Some(holder) = self.holder(name).await? else {
            return Ok(false);
        };
        let inner = &self.inner;
        let keys = self.keys(name);
        let mut conn = inner.node.conn_for(&keys.lock);
        let channel_prefix = inner.channel_prefix(&keys.lock);
        inner
            .scripts
            .break_lock(&mut conn, &keys, &channel_prefix, holder.token)
            .await
            .map_err(|e| inner.node.err(e))
    }
}
