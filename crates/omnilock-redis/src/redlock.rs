//! Redlock over N independent Redis nodes: a lock is held when a majority
//! granted it in parallel within its validity time.
//!
//! Waiters stand in one line on every node, ordered by a ticket that is the
//! same on all of them (see `LINE_COMMON` in `scripts.rs`), so the votes of
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
    async_trait, complete_or_undo, lock_unpoisoned, AcquireRequest, Backend, Backoff, Capabilities,
    Error, ErrorKind, Grant, LockName, Result,
};
use rand::Rng;
use tokio::sync::Notify;

use crate::builder::RedlockBuilder;
use crate::config::{check_redlock_nodes, RedisConfig, RedisOptions};
use crate::node::Node;
use crate::scripts::keys::{Keys, LineKeys};
use crate::scripts::mutex::Renewal;
use crate::scripts::redlock::{LineAcquire, LineAcquired, LineReleased};
use crate::scripts::Scripts;
use crate::wake::{self, WakeTarget};

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

/// A grant's state: its tokens, how long it stands, and what its release
/// attempts have done so far.
struct Hold {
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
                let address = crate::node::address_of(&client);
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

    /// One parallel round on every node, for a waiter with `turn` (none
    /// for a try-acquire), and the undo of its partial grant if it left
    /// one: the waiter's next round must wait for it, or it would find its
    /// own grant there (`WouldDeadlock` for a lock that is not reentrant).
    ///
    /// A `fast` round takes a free lock with `SET NX PX` on each node, as
    /// rslock does, and no script: a newcomer's first try. It cannot queue,
    /// re-enter or report the holder's lease; when it finds the lock taken,
    /// the caller goes on with script rounds.
    async fn round(&self, request: &AcquireRequest, turn: Option<Turn<'_>>, fast: bool) -> Round {
        let mut undoing = None;
        let outcome = self.round_votes(request, turn, fast, &mut undoing).await;
        (outcome, undoing)
    }

    /// One node's answer to a round: `SET NX PX` (and what holds the lock
    /// if that refused) on the fast path, the acquire script otherwise.
    async fn node_reply(
        &self,
        node: &Node,
        keys: &LineKeys,
        request: &AcquireRequest,
        turn: (&str, &str),
        token: u64,
        fast: bool,
    ) -> Result<Reply> {
        let inner = &self.inner;
        let mut conn = node.conn.clone();
        let timeout = inner.options.response_timeout;
        let ttl = request.ttl.as_millis() as u64;
        let call = async {
            let (entry, ticket) = turn;
            if fast {
                let value = format!("h {token} 1 {}", request.owner.as_str());
                let mut set = redis::cmd("SET");
                set.arg(&keys.lock).arg(&value).arg("NX").arg("PX").arg(ttl);
                let set: Option<String> = set.query_async(&mut conn).await?;
                if set.is_some() {
                    return Ok(Reply::Granted(token));
                }
                // A waiting acquire goes on with the script when the lock is
                // taken, whoever holds it. A try-acquire stops there unless
                // this owner is the holder (re-entry), which a GET tells:
                // sent only now, so that a free lock costs each node one
                // command, and a taken one a second round trip there.
                if !entry.is_empty() {
                    return Ok(Reply::Taken { own: false });
                }
                let now: Option<String> = redis::cmd("GET")
                    .arg(&keys.lock)
                    .query_async(&mut conn)
                    .await?;
                return Ok(Reply::Taken {
                    own: now.as_deref().and_then(held_by) == Some(request.owner.as_str()),
                });
            }
            let acquire = LineAcquire {
                owner: request.owner.as_str(),
                ttl: request.ttl,
                reentrant: request.reentrant,
                entry,
                ticket,
                place_lease: inner.options.waiter_lease,
                token,
            };
            let answer = inner
                .scripts
                .redlock_acquire(&mut conn, keys, &acquire)
                .await?;
            Ok(match answer {
                LineAcquired::Granted(token) => Reply::Granted(token),
                LineAcquired::Reentered(token) => Reply::Reentered(token),
                LineAcquired::HeldNotReentrant => Reply::Deadlock,
                LineAcquired::Busy { pttl, clock } => Reply::Busy { pttl, clock },
                LineAcquired::Other => Reply::Taken { own: false },
            })
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result.map_err(|e: redis::RedisError| node.err(e)),
            Err(_) => Err(Error::unavailable(format!(
                "Redis at {} did not answer within {timeout:?}",
                node.address
            ))),
        }
    }

    async fn round_votes(
        &self,
        request: &AcquireRequest,
        turn: Option<Turn<'_>>,
        fast: bool,
        undoing: &mut Option<tokio::task::JoinHandle<()>>,
    ) -> Result<Outcome> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, &request.name);
        let entry = turn.map_or("", |t| t.entry);
        let ticket = turn
            .and_then(|t| t.ticket)
            .map_or(String::new(), |t| t.to_string());
        // One token for the whole round: every node's fresh grant is known
        // before it answers.
        let token = fresh_token();
        let started = Instant::now();
        let mut calls: FuturesUnordered<_> = inner
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let reply = self.node_reply(node, &keys, request, (entry, &ticket), token, fast);
                async move { (i, reply.await) }
            })
            .collect();
        let mut results: Vec<Option<Result<Reply>>> = inner.nodes.iter().map(|_| None).collect();
        let (mut fresh, mut reentered) = (0, false);
        while let Some((i, result)) = calls.next().await {
            fresh += usize::from(matches!(result, Ok(Reply::Granted(_))));
            reentered |= matches!(result, Ok(Reply::Reentered(_)));
            results[i] = Some(result);
            // A round that has its majority of fresh grants goes on at
            // once: the nodes still to answer join the hold with the
            // round's token (the request is on their connection, and the
            // release or renewal that follows it there settles them
            // whatever they did with it). Waiting for the slowest of N is
            // what a round costs otherwise. Not with a re-entry: a node
            // not waited for may re-enter too, with its own older token.
            if !reentered && fresh >= self.quorum() {
                break;
            }
        }
        drop(calls);
        let elapsed = started.elapsed();
        let mut votes = vec![Vote::Refused; inner.nodes.len()];
        let (mut granted, mut deadlock, mut own, mut failures) = (0, false, false, Vec::new());
        let (mut clocks, mut remaining) = (Vec::new(), Vec::new());
        let mut reentered_token = None;
        for (i, result) in results.into_iter().enumerate() {
            let Some(result) = result else {
                votes[i] = Vote::Pending(token);
                continue;
            };
            match result {
                Ok(reply) => match reply {
                    Reply::Granted(token) => {
                        votes[i] = Vote::Granted(token);
                        granted += 1;
                    }
                    Reply::Reentered(held) => {
                        votes[i] = Vote::Granted(held);
                        granted += 1;
                        reentered_token = reentered_token.max(Some(held));
                    }
                    Reply::Deadlock => deadlock = true,
                    Reply::Busy { pttl, clock } => {
                        clocks.push(clock);
                        if pttl > 0 {
                            remaining.push(Duration::from_millis(pttl as u64));
                        }
                    }
                    Reply::Taken { own: mine } => own |= mine,
                },
                Err(e) if e.kind() == ErrorKind::InvalidConfig => return Err(e),
                Err(e) => {
                    votes[i] = Vote::Unknown;
                    failures.push(e.message().to_string());
                }
            }
        }
        let tokens: NodeTokens = votes
            .iter()
            .map(|v| match v {
                Vote::Granted(token) | Vote::Pending(token) => Some(*token),
                _ => None,
            })
            .collect();
        let validity = request
            .ttl
            .checked_sub(elapsed + Self::drift(request.ttl))
            .unwrap_or_default();
        if granted >= self.quorum() && !validity.is_zero() {
            // A node that did not answer may still grant (a paused node
            // runs the queued acquire when it resumes). Nobody would
            // release or renew that grant, and it would block the lock
            // there for a TTL: release it by owner, on the same connection,
            // so it runs right after.
            if !failures.is_empty() {
                let late: Vec<Option<String>> = votes
                    .iter()
                    .map(|v| matches!(v, Vote::Unknown).then(String::new))
                    .collect();
                let (store, late_request) = (self.clone(), request.clone());
                tokio::spawn(async move {
                    store.release_on(&late_request, &late, None).await;
                });
            }
            return Ok(Outcome::Held {
                token: reentered_token.unwrap_or(token),
                valid_until: started + request.ttl - Self::drift(request.ttl),
                answered: votes
                    .iter()
                    .map(|v| matches!(v, Vote::Granted(_)))
                    .collect(),
                tokens,
            });
        }
        // Not held: undo the partial grant everywhere at once, including on
        // nodes that did not answer in time (their grant may still come),
        // and keep this waiter's turn where the grant took it out of the
        // line. In the background: a stalled node must not hold up the
        // caller, and each undo follows its grant on that node's connection
        // anyway.
        if granted > 0 || !failures.is_empty() {
            let requeue = turn.and_then(|t| Some((t.entry.to_string(), t.ticket?)));
            let (store, undo_request) = (self.clone(), request.clone());
            *undoing = Some(tokio::spawn(async move {
                store
                    .undo_votes(&undo_request, &votes, requeue.as_ref())
                    .await
            }));
        }
        if deadlock {
            return Err(Error::would_deadlock());
        }
        let answered = inner.nodes.len() - failures.len();
        if answered < self.quorum() {
            return Err(Error::unavailable(format!(
                "only {answered} of {} Redlock nodes answered: {}",
                inner.node_count,
                failures.join("; ")
            )));
        }
        Ok(Outcome::Busy {
            clocks,
            remaining: median(remaining),
            own,
        })
    }

    async fn round_detached(
        &self,
        request: &AcquireRequest,
        turn: Option<Turn<'_>>,
        fast: bool,
    ) -> Round {
        let (store, undo) = (self.clone(), self.clone());
        let (call_request, undo_request) = (request.clone(), request.clone());
        let turn = turn.map(|t| (t.entry.to_string(), t.ticket));
        complete_or_undo(
            async move {
                let turn = turn.as_ref().map(|(entry, ticket)| Turn {
                    entry,
                    ticket: *ticket,
                });
                store.round(&call_request, turn, fast).await
            },
            move |abandoned: Round| async move {
                if let (Ok(Outcome::Held { tokens, .. }), _) = abandoned {
                    undo.release_tokens(&undo_request, &tokens, None).await;
                }
            },
        )
        .await
    }

    /// Undoes a failed round: granted nodes by token, silent nodes by owner
    /// (the release follows the late acquire on the same connection), and
    /// puts the waiter back in line where a grant took it out.
    async fn undo_votes(
        &self,
        request: &AcquireRequest,
        votes: &[Vote],
        requeue: Option<&(String, u64)>,
    ) {
        let tokens: Vec<Option<String>> = votes
            .iter()
            .map(|v| match v {
                Vote::Granted(token) | Vote::Pending(token) => Some(token.to_string()),
                Vote::Unknown => Some(String::new()),
                Vote::Refused => None,
            })
            .collect();
        self.release_on(request, &tokens, requeue).await;
    }

    /// Releases on every node that granted, answering once `enough` nodes
    /// released (None: once every node answered).
    async fn release_tokens(
        &self,
        request: &AcquireRequest,
        tokens: &NodeTokens,
        enough: Option<usize>,
    ) -> Vec<Option<NodeAnswer>> {
        let tokens: Vec<Option<String>> = tokens.iter().map(|t| t.map(|t| t.to_string())).collect();
        self.release_on_until(request, &tokens, None, enough).await
    }

    /// Runs the release script on each node with `Some(token)` ('' = any);
    /// per node, its answer (None: not sent there).
    async fn release_on(
        &self,
        request: &AcquireRequest,
        tokens: &[Option<String>],
        requeue: Option<&(String, u64)>,
    ) -> Vec<Option<NodeAnswer>> {
        self.release_on_until(request, tokens, requeue, None).await
    }

    /// [`Self::release_on`], answering once `enough` nodes released: the
    /// others have their release sent, and it runs there (a node not
    /// waited for answers `NoAnswer`).
    async fn release_on_until(
        &self,
        request: &AcquireRequest,
        tokens: &[Option<String>],
        requeue: Option<&(String, u64)>,
        enough: Option<usize>,
    ) -> Vec<Option<NodeAnswer>> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, &request.name);
        let (entry, ticket) = requeue.map_or((String::new(), String::new()), |(entry, ticket)| {
            (entry.clone(), ticket.to_string())
        });
        let calls = inner.nodes.iter().zip(tokens).map(|(node, token)| {
            let mut conn = node.conn.clone();
            let (keys, entry, ticket) = (&keys, &entry, &ticket);
            let timeout = inner.options.response_timeout;
            async move {
                let token = token.as_deref()?;
                let release = inner.scripts.redlock_release(
                    &mut conn,
                    keys,
                    request.owner.as_str(),
                    token,
                    &inner.channel_prefix,
                    (entry, ticket),
                );
                // Once sent, the release runs on the node even if we stop
                // waiting for its reply (not if this process exits first:
                // Redis drops a closed connection's unread commands; the
                // TTL then frees the lock).
                Some(match tokio::time::timeout(timeout, release).await {
                    Ok(Ok(LineReleased::Absent)) => NodeAnswer::Absent,
                    Ok(Ok(LineReleased::NotOwner)) => NodeAnswer::NotOwner,
                    Ok(Ok(LineReleased::Released)) => NodeAnswer::Released,
                    _ => NodeAnswer::NoAnswer,
                })
            }
        });
        let mut calls: FuturesUnordered<_> = calls
            .enumerate()
            .map(|(i, call)| async move { (i, call.await) })
            .collect();
        let mut answers: Vec<Option<NodeAnswer>> = tokens
            .iter()
            .map(|token| token.as_ref().map(|_| NodeAnswer::NoAnswer))
            .collect();
        let mut released = 0;
        while let Some((i, answer)) = calls.next().await {
            released += usize::from(matches!(answer, Some(NodeAnswer::Released)));
            answers[i] = answer;
            if enough.is_some_and(|enough| released >= enough) {
                break;
            }
        }
        answers
    }

    /// Takes `entry` out of the line on the nodes `on` selects, waking the
    /// next waiter where the lock is free. One try each: a place left
    /// behind runs out with its lease.
    async fn leave_line(&self, name: &LockName, entry: &str, on: impl Fn(usize) -> bool) {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, name);
        let calls = inner
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| on(*i))
            .map(|(_, node)| {
                let mut conn = node.conn.clone();
                let keys = &keys;
                let timeout = inner.options.response_timeout;
                async move {
                    let cancel =
                        inner
                            .scripts
                            .redlock_cancel(&mut conn, keys, entry, &inner.channel_prefix);
                    let _ = tokio::time::timeout(timeout, cancel).await;
                }
            });
        join_all(calls).await;
    }

    /// Waits for this waiter's turn: until a majority of nodes has woken it
    /// (or some have, and the rest do not follow within
    /// [`MAJORITY_GRACE`]), or `delay` has passed.
    async fn wait_turn(&self, waiter: &Waiter, delay: Duration) {
        let deadline = tokio::time::Instant::now() + delay;
        let mut first_woken: Option<tokio::time::Instant> = None;
        loop {
            let woken = waiter.notify.notified();
            let by = waiter.woken_by.load(Ordering::Relaxed);
            if by.count_ones() as usize >= self.quorum() {
                return;
            }
            let until = match (by, first_woken) {
                (0, _) => deadline,
                (_, Some(first)) => deadline.min(first + MAJORITY_GRACE),
                (_, None) => {
                    let first = *first_woken.insert(tokio::time::Instant::now());
                    deadline.min(first + MAJORITY_GRACE)
                }
            };
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }

    /// `token` is not a fencing token (capabilities say so): it names the
    /// hold in logs, and re-entries of one hold share it.
    fn grant(token: u64, tokens: NodeTokens, valid_until: Instant) -> Grant {
        let nodes = tokens.len();
        Grant::new(token, valid_until).with_state(Hold {
            tokens,
            valid_until: Mutex::new(valid_until),
            released: Mutex::new(vec![NodeRelease::NotSent; nodes]),
        })
    }
}

/// A round's grant id, the same on every node: unique in this process,
/// and a time in µs (the larger of this process's clock and one more than
/// the last id drawn), so that logs can tell grants apart.
fn fresh_token() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let previous = LAST
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(0);
    now.max(previous + 1)
}

/// The owner of a lock key's value, if the key is held (`h <token> <holds>
/// <owner>`; see `LINE_COMMON` in `scripts.rs`).
fn held_by(value: &str) -> Option<&str> {
    let mut parts = value.splitn(4, ' ');
    (parts.next() == Some("h")).then_some(())?;
    parts.nth(2)
}

/// The median of `values` (the upper one of an even count), if any.
fn median<T: Ord + Copy>(mut values: Vec<T>) -> Option<T> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// A waiter's place in the line of every node, left (in the background)
/// when the acquire ends: everywhere if it ends without the lock, on the
/// nodes that did not grant it if it won.
struct Place {
    store: RedlockStore,
    name: LockName,
    entry: String,
    /// Whether it ever queued (had a ticket): a try-acquire never does.
    queued: bool,
    /// Per node, whether it answered with a grant (once the acquire won).
    granted_on: Option<Vec<bool>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        lock_unpoisoned(&self.store.inner.waiters).remove(&self.entry);
        if !self.queued {
            return;
        }
        let granted_on = self.granted_on.take();
        if granted_on
            .as_ref()
            .is_some_and(|answered| answered.iter().all(|granted| *granted))
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, name, entry) = (self.store.clone(), self.name.clone(), self.entry.clone());
        runtime.spawn(async move {
            let left_on = |i: usize| {
                granted_on
                    .as_ref()
                    .is_none_or(|answered| !answered.get(i).copied().unwrap_or(false))
            };
            store.leave_line(&name, &entry, left_on).await;
        });
    }
}

#[async_trait]
impl Backend for RedlockStore {
    fn kind(&self) -> &'static str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // First come, first served by ticket: the nodes' median clock
            // when the waiter first found the lock busy.
            fair: true,
            push_wakeups: true,
            fencing: false,
            cross_process_reentrancy: true,
            lease_renewal: true,
            cross_process: true,
            break_lock: true,
            holder: false,
            election: false,
            // A node restarted without persistence can hand a majority
            // to a second client (docs/backends/redis.md#redlock).
            survives_failover: false,
            semaphore: false,
            rw_lock: false,
            atomic_lock_all: false,
        }
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        let (mut outcome, undo) = self.round_detached(request, None, true).await;
        if let Ok(Outcome::Busy { own: true, .. }) = outcome {
            // This owner holds it somewhere: the script decides between
            // re-entry and deadlock, after the fast round's undo.
            if let Some(undo) = undo {
                let _ = undo.await;
            }
            outcome = self.round_detached(request, None, false).await.0;
        }
        match outcome? {
            Outcome::Held {
                tokens,
                token,
                valid_until,
                ..
            } => Ok(Some(Self::grant(token, tokens, valid_until))),
            Outcome::Busy { .. } => Ok(None),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let inner = &self.inner;
        let entry = self.new_entry();
        let waiter = Arc::new(Waiter::default());
        lock_unpoisoned(&inner.waiters).insert(entry.clone(), waiter.clone());
        let mut place = Place {
            store: self.clone(),
            name: request.name.clone(),
            entry: entry.clone(),
            queued: false,
            granted_on: None,
        };
        let mut ticket = None;
        let mut tried_fast = false;
        let mut undoing: Option<tokio::task::JoinHandle<()>> = None;
        let recheck = inner.options.waiter_lease / 3;
        let mut backoff = Backoff::new(Duration::from_millis(10), recheck);
        loop {
            if let Some(undo) = undoing.take() {
                let _ = undo.await;
            }
            waiter.woken_by.store(0, Ordering::Relaxed);
            let turn = Turn {
                entry: &entry,
                ticket,
            };
            // A newcomer's first round is the fast one; once the lock was
            // found taken, rounds run the script, which queues.
            let fast = ticket.is_none() && !tried_fast;
            tried_fast = true;
            let (outcome, undo) = self.round_detached(request, Some(turn), fast).await;
            undoing = undo;
            let delay = match outcome {
                Ok(Outcome::Held {
                    tokens,
                    answered,
                    token,
                    valid_until,
                }) => {
                    // The nodes not waited for leave the line too: one that
                    // found the lock busy queued this waiter there.
                    place.granted_on = Some(answered);
                    return Ok(Self::grant(token, tokens, valid_until));
                }
                Ok(Outcome::Busy { clocks, .. }) if fast && clocks.is_empty() => continue,
                Ok(Outcome::Busy {
                    clocks, remaining, ..
                }) => {
                    if ticket.is_none() {
                        // The first busy round: take a ticket and queue at
                        // once with it.
                        ticket = median(clocks);
                        place.queued = ticket.is_some();
                        if place.queued {
                            continue;
                        }
                    }
                    request.waiting.raise();
                    backoff.reset();
                    // Look again in case wake-ups are lost (which also keeps
                    // this waiter's place), jittered so that waiters do not
                    // poll together; and at the holder's expiry, if it dies
                    // without releasing.
                    let delay = recheck.mul_f64(rand::thread_rng().gen_range(0.8..1.0));
                    remaining.map_or(delay, |r| delay.min(r + Duration::from_millis(1)))
                }
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "omnilock redlock round failed; retrying");
                    backoff.next_delay()
                }
                Err(e) => return Err(e),
            };
            self.wait_turn(&waiter, delay).await;
        }
    }

    /// Held until now only if a majority still had this owner's key: a
    /// release that found it on fewer nodes is a loss the holder must hear
    /// of (another client may have held the lock meanwhile), even though it
    /// cleaned up what was left.
    ///
    /// A retry (core retries an `Unavailable` release) sends only to the
    /// nodes not settled yet, and counts the earlier confirmations. A node
    /// whose earlier release went unanswered and which now has no key at
    /// all counts as released while the hold is still valid: the key cannot
    /// have expired yet, so that earlier release ran (a paused node runs
    /// its queued commands when it resumes). Found by pausing 3 of 5 nodes
    /// during a release: every retry was refused and a lock nobody else
    /// could have taken was reported lost.
    async fn release(&self, request: &AcquireRequest, grant: &Grant) -> Result<()> {
        let hold = grant.backend_state::<Hold>()?;
        let before = lock_unpoisoned(&hold.released).clone();
        let send: NodeTokens = hold
            .tokens
            .iter()
            .zip(&before)
            .map(|(token, done)| match done {
                NodeRelease::NotSent | NodeRelease::Unanswered => *token,
                NodeRelease::Done | NodeRelease::Lost => None,
            })
            .collect();
        // Answered once a majority confirmed: the slower nodes have their
        // release sent and run it (see `release_on_until`).
        let done = before.iter().filter(|s| **s == NodeRelease::Done).count();
        let enough = self.quorum().saturating_sub(done).max(1);
        let answers = self.release_tokens(request, &send, Some(enough)).await;
        let still_valid = Instant::now() < *lock_unpoisoned(&hold.valid_until);
        let after: Vec<NodeRelease> = before
            .iter()
            .zip(answers)
            .map(|(was, answer)| match (answer, was) {
                (None, was) => *was,
                (Some(NodeAnswer::Released), _) => NodeRelease::Done,
                (Some(NodeAnswer::Absent), NodeRelease::Unanswered) if still_valid => {
                    NodeRelease::Done
                }
                (Some(NodeAnswer::Absent | NodeAnswer::NotOwner), _) => NodeRelease::Lost,
                (Some(NodeAnswer::NoAnswer), _) => NodeRelease::Unanswered,
            })
            .collect();
        let count = |state: NodeRelease| after.iter().filter(|s| **s == state).count();
        let (released, unanswered) = (count(NodeRelease::Done), count(NodeRelease::Unanswered));
        *lock_unpoisoned(&hold.released) = after;
        let (quorum, nodes) = (self.quorum(), self.inner.node_count);
        if released >= quorum {
            return Ok(());
        }
        if released + unanswered < quorum {
            return Err(Error::new(
                ErrorKind::NotOwner,
                format!(
                    "the lock was lost: this owner still held it on {released} of {nodes} \
                     nodes, and a majority is {quorum} (expired or taken over)"
                ),
            ));
        }
        Err(Error::unavailable(format!(
            "release confirmed on {released} of {nodes} nodes and {unanswered} did not \
             answer: whether the lock was still held is unknown"
        )))
    }

    async fn renew(&self, request: &AcquireRequest, grant: &Grant) -> Result<Instant> {
        self.renew_all(&[(request, grant)])
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Backend, "internal: not renewed")))
    }

    /// One script run per node extends every hold of the batch that node
    /// granted; a hold is renewed when a majority extended it within its
    /// validity, as for one lock.
    async fn renew_all(&self, holds: &[(&AcquireRequest, &Grant)]) -> Vec<Result<Instant>> {
        let inner = &self.inner;
        let started = Instant::now();
        let calls = inner.nodes.iter().enumerate().map(|(n, node)| {
            // The holds this node granted, with its token for each.
            let granted: Vec<(usize, u64)> = holds
                .iter()
                .enumerate()
                .filter_map(|(i, (_, grant))| {
                    let token = grant.state::<Hold>()?.tokens.get(n).copied().flatten()?;
                    Some((i, token))
                })
                .collect();
            let mut conn = node.conn.clone();
            let timeout = inner.options.response_timeout;
            async move {
                if granted.is_empty() {
                    return (granted, None);
                }
                let locks: Vec<String> = granted
                    .iter()
                    .map(|&(i, _)| Keys::new(&inner.options.prefix, holds[i].0.name.as_str()).lock)
                    .collect();
                let renewals: Vec<Renewal> = granted
                    .iter()
                    .zip(&locks)
                    .map(|(&(i, token), lock)| Renewal {
                        lock,
                        owner: holds[i].0.owner.as_str(),
                        token,
                        ttl: holds[i].0.ttl,
                    })
                    .collect();
                let renew = inner.scripts.redlock_renew_all(&mut conn, &renewals);
                let renewed = tokio::time::timeout(timeout, renew)
                    .await
                    .ok()
                    .and_then(|a| a.ok());
                (granted, renewed)
            }
        });
        let (mut extended, mut refused) = (vec![0; holds.len()], vec![0; holds.len()]);
        for (granted, answer) in join_all(calls).await {
            let Some(answer) = answer.filter(|a| a.len() == granted.len()) else {
                continue;
            };
            for (&(i, _), renewed) in granted.iter().zip(answer) {
                if renewed {
                    extended[i] += 1;
                } else {
                    refused[i] += 1;
                }
            }
        }
        let elapsed = started.elapsed();
        holds
            .iter()
            .enumerate()
            .map(|(i, (request, grant))| {
                if extended[i] >= self.quorum() && elapsed + Self::drift(request.ttl) < request.ttl
                {
                    let valid_until = started + request.ttl - Self::drift(request.ttl);
                    if let Some(hold) = grant.state::<Hold>() {
                        *lock_unpoisoned(&hold.valid_until) = valid_until;
                    }
                    return Ok(valid_until);
                }
                if refused[i] > inner.node_count - self.quorum() {
                    return Err(Error::new(
                        ErrorKind::LockLost,
                        "a majority of nodes no longer holds the lock for this owner",
                    ));
                }
                Err(Error::unavailable(format!(
                    "only {} Redlock nodes extended the lease",
                    extended[i]
                )))
            })
            .collect()
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, name);
        let calls = inner.nodes.iter().map(|node| {
            let mut conn = node.conn.clone();
            let keys = &keys;
            async move {
                inner
                    .scripts
                    .redlock_break(&mut conn, keys, &inner.channel_prefix)
                    .await
            }
        });
        let results = join_all(calls).await;
        Ok(results.iter().any(|r| matches!(r, Ok(true))))
    }
}
