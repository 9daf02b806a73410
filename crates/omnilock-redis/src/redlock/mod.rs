//! Redlock over N independent Redis nodes: a lock is held when a majority
//! granted it in parallel within its validity time.
//!
//! Waiters stand in one line on every node, ordered by a ticket that is the
//! same on all of them (see `scripts/redlock.rs`), so the votes of
//! a free lock go to one waiter instead of splitting; a release wakes the
//! first in line on each node, and the waiter runs its next round once a
//! majority of nodes has woken it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use omnilock_core::{
    AcquireRequest, Backend, Backoff, Capabilities, Error, ErrorKind, LockName, LockSpec, Result,
    async_trait, complete_or_undo, lock_unpoisoned,
};
use rand::Rng;
use tokio::sync::Notify;

use crate::builder::RedlockBuilder;
use crate::config::{RedisConfig, RedisOptions, check_redlock_nodes};
use crate::conn::Node;
use crate::scripts::Scripts;
use crate::scripts::keys::{Keys, LineKeys};
use crate::scripts::mutex::Renewal;
use crate::scripts::redlock::{LineAcquire, LineAcquired, LineReleased};
use crate::wake::{self, WakeTarget};

mod backend;
mod inspect;
mod line;
mod records;
mod release;
mod round;

/// A grant of this store: its tokens on the nodes, and its state.
type Grant = omnilock_core::Grant<Hold>;

use line::Place;
use round::median;

/// The clock drift factor of the Redlock algorithm.
const DRIFT_FACTOR: f64 = 0.01;

/// A Redlock store. Create it with
/// `omnilock::connect("redlock://h1:p1,h2:p2,h3:p3/")`,
/// [`RedlockStore::connect`], or on the application's own node clients with
/// [`RedlockStore::builder`].
#[derive(Clone)]
pub struct RedlockStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: RedisOptions,
    /// Where the store is, for `Debug` (no credentials).
    shown: String,
    /// How many nodes were named: the majority counts them all, including
    /// those that did not answer when the store was opened.
    node_count: usize,
    nodes: Vec<Node>,
    scripts: Scripts,
    /// This client's id: waiter entries are `<client id>:<waiter id>`, and
    /// every node publishes their wake-ups on `<prefix>:wake:<client id>`.
    client_id: String,
    channel_prefix: String,
    next_waiter: AtomicU64,
    waiters: Mutex<HashMap<String, Arc<Waiter>>>,
    /// Wake-up messages received, from all nodes.
    wakeups: AtomicU64,
    /// One wake-up subscription per node.
    listeners: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// How long a waiter woken by some nodes waits for the rest of a majority
/// before it tries anyway: one release reaches every node at about the
/// same time, so their messages arrive together unless a node is slow or
/// never had this waiter in its line.
const MAJORITY_GRACE: Duration = Duration::from_millis(3);

/// A waiting acquire.
#[derive(Default)]
struct Waiter {
    notify: Notify,
    /// The nodes (bit = index) that woke it since its last round.
    woken_by: AtomicU64,
}

impl WakeTarget for Inner {
    fn deliver(&self, from: usize, entry: &str) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        if let Some(waiter) = lock_unpoisoned(&self.waiters).get(entry) {
            waiter.woken_by.fetch_or(1 << from, Ordering::Relaxed);
            waiter.notify.notify_one();
        }
    }

    /// A node's subscription dropped: its wake-ups may be lost, so every
    /// waiter tries again at once.
    fn recheck_all(&self, _from: usize) {
        for waiter in lock_unpoisoned(&self.waiters).values() {
            waiter.woken_by.store(u64::MAX, Ordering::Relaxed);
            waiter.notify.notify_one();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(listeners) = self.listeners.get_mut() {
            for task in listeners.drain(..) {
                task.abort();
            }
        }
    }
}

/// What a round came to, and the undo it left running, if any.
type Round = (Result<Outcome>, Option<tokio::task::JoinHandle<()>>);

/// A waiter's entry and its ticket (none before the lock was first busy).
#[derive(Clone, Copy)]
struct Turn<'a> {
    entry: &'a str,
    ticket: Option<u64>,
}

impl std::fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockStore")
            .field("store", &self.inner.shown)
            .finish()
    }
}

/// Per node, the token that node issued (None: not granted there).
type NodeTokens = Vec<Option<u64>>;

/// A Redlock grant's state: its tokens, how long it stands, and what its
/// release attempts have done so far. Opaque outside the crate.
pub struct Hold {
    tokens: NodeTokens,
    /// Until when the hold stands on its nodes by this process's clock: the
    /// grant's validity, then each renewal's.
    valid_until: Mutex<Instant>,
    /// Per node, what earlier release attempts got there.
    released: Mutex<Vec<NodeRelease>>,
}

/// What the release attempts of one hold got on one node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeRelease {
    NotSent,
    /// Sent, no answer in time: it may still run there (a paused node runs
    /// it when it resumes), so a later attempt may find the key gone by
    /// this very release.
    Unanswered,
    Done,
    Lost,
}

/// What one node answered to a release.
#[derive(Clone, Copy)]
enum NodeAnswer {
    /// This owner's hold, released (or one of its reentrant holds).
    Released,
    /// Another owner's lock, or another grant of this owner.
    NotOwner,
    /// No lock there.
    Absent,
    NoAnswer,
}

/// What one node said in a round.
#[derive(Clone, Copy)]
enum Vote {
    Granted(u64),
    Refused,
    /// No reply in time: the script may still run on that node later.
    Unknown,
    /// A node not waited for (the round had its majority of fresh
    /// grants): it may grant with the round's token.
    Pending(u64),
}

enum Outcome {
    Held {
        /// Per node, the grant's token, including the nodes not waited
        /// for (which may grant with it).
        tokens: NodeTokens,
        /// Per node, whether it answered with a grant.
        answered: Vec<bool>,
        /// The hold's id for logs and `token()`: the re-entered hold's
        /// where the round re-entered one (a node it found free took the
        /// round's own), the round's otherwise.
        token: u64,
        valid_until: Instant,
    },
    Busy {
        /// The clocks (µs) of the nodes that found the lock busy (none on
        /// the fast path).
        clocks: Vec<u64>,
        /// The median time left on the holder's lease among them.
        remaining: Option<Duration>,
        /// On the fast path: some node holds the lock for this very owner,
        /// which only the script can tell apart (re-entry or deadlock).
        own: bool,
    },
}

/// What one node answered in a round.
enum Reply {
    Granted(u64),
    /// This owner's earlier grant there, held once more (its own token).
    Reentered(u64),
    /// Busy, with the holder's time left and the node's clock (µs).
    Busy {
        pttl: i64,
        clock: u64,
    },
    /// Held by this owner, and the request is not reentrant.
    Deadlock,
    /// Fast path: not free; `own` if this owner holds it.
    Taken {
        own: bool,
    },
}

impl RedlockStore {
    /// Connects to every node. Nodes that cannot be reached are tolerated as
    /// long as a majority answers; wrong credentials anywhere are an error.
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        let clients = config
            .nodes
            .iter()
            .map(|node| Node::client(&config, node))
            .collect::<Result<Vec<_>>>()?;
        Self::open(config.options, clients, config.shown).await
    }

    /// Starts building a store on the application's own clients, one per
    /// independent node. See [`RedlockBuilder`].
    pub fn builder(clients: impl IntoIterator<Item = redis::Client>) -> RedlockBuilder {
        RedlockBuilder::new(clients)
    }

    /// The one way a store is made, from a URL or from a builder.
    pub(crate) async fn open(
        options: RedisOptions,
        clients: Vec<redis::Client>,
        shown: String,
    ) -> Result<Self> {
        options.check(true)?;
        check_redlock_nodes(true, clients.len())?;
        let node_count = clients.len();
        let client_id = format!("{:016x}", rand::random::<u64>());
        let channel_prefix = format!("{}:wake:", options.prefix);
        let channel = format!("{channel_prefix}{client_id}");
        // Each node connects and subscribes to this client's wake-ups on its
        // own, all at once, each step within `connect_timeout` (the
        // connection manager would otherwise try twice): a node that hangs
        // costs the caller one `connect_timeout`, not one per step and try.
        // A node that connects but cannot subscribe yet is subscribed by
        // its listener as soon as it can be.
        let attempts = join_all(clients.into_iter().map(|client| {
            let (options, channel) = (&options, &channel);
            async move {
                let address = crate::conn::address_of(&client);
                let node = tokio::time::timeout(
                    options.connect_timeout,
                    Node::open(client, None, options),
                )
                .await
                .map_err(|_| {
                    Error::unavailable(format!(
                        "cannot reach Redis at {address} (timed out connecting)"
                    ))
                })??;
                let subscribed = tokio::time::timeout(
                    options.connect_timeout,
                    node.subscriber.subscribe(channel),
                )
                .await
                .ok()
                .and_then(|s| s.ok());
                Ok::<_, Error>((node, subscribed))
            }
        }))
        .await;
        let mut nodes = Vec::new();
        let mut subscriptions = Vec::new();
        let mut failures = Vec::new();
        for attempt in attempts {
            match attempt {
                Ok((node, subscribed)) => {
                    nodes.push(node);
                    subscriptions.push(subscribed);
                }
                Err(e) if e.kind() == ErrorKind::InvalidConfig => return Err(e),
                Err(e) => failures.push(e.message().to_string()),
            }
        }
        let quorum = node_count / 2 + 1;
        if nodes.len() < quorum {
            return Err(Error::unavailable(format!(
                "only {} of {} Redlock nodes answered (a majority of {quorum} is needed): {}",
                nodes.len(),
                node_count,
                failures.join("; ")
            )));
        }
        if nodes.len() < node_count {
            // The others may come back; ConnectionManager cannot be created
            // for a node that never answered, so those stay out until the
            // client reconnects. Documented in docs/backends/redis.md.
            tracing::warn!(missing = %failures.join("; "), "omnilock redlock: some nodes are down");
        }
        let store = RedlockStore {
            inner: Arc::new(Inner {
                options,
                shown,
                node_count,
                nodes,
                scripts: Scripts::new(),
                client_id,
                channel_prefix,
                next_waiter: AtomicU64::new(0),
                waiters: Mutex::new(HashMap::new()),
                wakeups: AtomicU64::new(0),
                listeners: Mutex::new(Vec::new()),
            }),
        };
        let weak = Arc::downgrade(&store.inner);
        let listeners = subscriptions
            .into_iter()
            .enumerate()
            .map(|(i, subscribed)| {
                let node = &store.inner.nodes[i];
                tokio::spawn(wake::listen(
                    weak.clone(),
                    i,
                    subscribed,
                    node.subscriber.clone(),
                    channel.clone(),
                    store.inner.options.connect_timeout,
                    store.inner.options.response_timeout,
                ))
            })
            .collect();
        *lock_unpoisoned(&store.inner.listeners) = listeners;
        Ok(store)
    }

    /// Wake-up messages this client has received from all nodes (a
    /// release wakes the first waiter in line on each node).
    pub fn wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// A fresh waiter entry id, `<client id>:<n>`.
    fn new_entry(&self) -> String {
        let waiter = self.inner.next_waiter.fetch_add(1, Ordering::Relaxed);
        format!("{}:{waiter}", self.inner.client_id)
    }

    fn quorum(&self) -> usize {
        self.inner.node_count / 2 + 1
    }

    fn drift(ttl: Duration) -> Duration {
        ttl.mul_f64(DRIFT_FACTOR) + Duration::from_millis(2)
    }
}
