//! One Redis master: a fair, herd-free, reentrant lock with fencing, on one
//! server, a cluster (the master of the lock's slot) or the master the
//! sentinels name.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backend, Backoff, Capabilities, Error, ErrorKind, LockName, LockSpec, Result,
    async_trait, complete_or_undo, lock_unpoisoned, retry_in_background,
};
use rand::Rng;
use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::builder::RedisBuilder;
use crate::config::{Deployment, RedisConfig, RedisOptions};
use crate::conn::{Node, Subscriber};
use crate::scripts::Scripts;
use crate::scripts::counted::AcquireCounted;
use crate::scripts::keys::Keys;
use crate::scripts::mutex::{Acquire, Acquired, Released, Renewal};
use crate::wake::shards::{LINGER, ShardWakeups};
use crate::wake::{self, WakeTarget};

mod backend;
mod blocking;
mod confirmed;
mod counted;
mod guarded;
mod inspect;
mod records;
mod rounds;
mod wakeups;

/// A grant of this store: its token, and the ids its release and renewal
/// name.
type Grant = omnilock_core::Grant<HoldId>;

use counted::Counted;
pub use guarded::GuardedWrite;
pub use rounds::HoldId;
use rounds::{Attempt, lock_gone, nonce};
use wakeups::{Incoming, Place, WakeChannels, check_same_server, listen_shards};

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
    /// Idle connections for waiters that block in the server
    /// (`blocking.rs`).
    blockers: Mutex<Vec<redis::aio::MultiplexedConnection>>,
    /// Waiters blocked in the server now (`blocking.rs`).
    blocked: AtomicUsize,
    /// Idle connections for writes confirmed with `WAIT`, by master
    /// address (`confirmed.rs`).
    confirmers: Mutex<Vec<(String, redis::aio::MultiplexedConnection)>>,
    /// Confirmed writes on connections of their own now (`confirmed.rs`).
    confirming: AtomicUsize,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("store", &self.inner.shown)
            .finish()
    }
}

impl RedisStore {
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
            Deployment::Cluster => crate::conn::cluster::open(&config).await?,
            Deployment::Sentinel { .. } => crate::conn::sentinel::open(&config).await?,
            Deployment::Redlock => {
                return Err(Error::config(
                    "a redlock:// store is a RedlockStore, not a RedisStore",
                ));
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
                blockers: Mutex::new(Vec::new()),
                blocked: AtomicUsize::new(0),
                confirmers: Mutex::new(Vec::new()),
                confirming: AtomicUsize::new(0),
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
                store.inner.options.response_timeout,
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

    /// The store's own connection, for the application's commands on the
    /// keys it keeps beside its locks: reading what a
    /// [`GuardedWrite`] wrote, writing a [`FencedKey`](crate::FencedKey).
    ///
    /// ```no_run
    /// # async fn demo(store: omnilock_redis::RedisStore) -> redis::RedisResult<()> {
    /// let mut conn = store.connection();
    /// let current: Option<String> = redis::cmd("GET").arg("config:current").query_async(&mut conn).await?;
    /// # Ok(()) }
    /// ```
    pub fn connection(&self) -> crate::RedisConnection {
        crate::RedisConnection(self.inner.node.conn.clone())
    }

    fn keys(&self, name: &LockName) -> Keys {
        Keys::new(&self.inner.options.prefix, name.as_str())
    }
}
