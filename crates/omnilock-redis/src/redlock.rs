//! Redlock over N independent Redis nodes: a lock is held when a majority
//! granted it in parallel within its validity time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use omnilock_core::{
    async_trait, complete_or_undo, AcquireRequest, Backend, Capabilities, Error, ErrorKind, Grant,
    LocalWaiters, LockName, Result,
};
use rand::Rng;
use tokio::sync::Notify;

use crate::builder::RedlockBuilder;
use crate::config::{check_redlock_nodes, RedisConfig, RedisOptions};
use crate::node::{Keys, Node};
use crate::scripts::Scripts;

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
    /// In-process waiters per lock: a release here wakes one at once.
    local_waiters: LocalWaiters,
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

/// What one node said in a round.
#[derive(Clone, Copy)]
enum Vote {
    Granted(u64),
    Refused,
    /// No reply in time: the script may still run on that node later.
    Unknown,
}

enum Outcome {
    Held {
        tokens: NodeTokens,
        valid_until: Instant,
    },
    Busy,
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
        let attempts = join_all(
            clients
                .into_iter()
                .map(|client| Node::open(client, None, &options)),
        )
        .await;
        let mut nodes = Vec::new();
        let mut failures = Vec::new();
        for attempt in attempts {
            match attempt {
                Ok(node) => nodes.push(node),
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
        Ok(RedlockStore {
            inner: Arc::new(Inner {
                options,
                shown,
                node_count,
                nodes,
                scripts: Scripts::new(),
                local_waiters: LocalWaiters::default(),
            }),
        })
    }

    fn quorum(&self) -> usize {
        self.inner.node_count / 2 + 1
    }

    fn drift(ttl: Duration) -> Duration {
        ttl.mul_f64(DRIFT_FACTOR) + Duration::from_millis(2)
    }

    /// One parallel round on every node.
    async fn round(&self, request: &AcquireRequest) -> Result<Outcome> {
        let inner = &self.inner;
        let keys = Keys::new(&inner.options.prefix, request.name.as_str());
        let started = Instant::now();
        let calls = inner.nodes.iter().map(|node| {
            let mut conn = node.conn.clone();
            let keys = &keys;
            let timeout = inner.options.response_timeout;
            async move {
                let mut script = inner.scripts.acquire.key(&keys.lock);
                script
                    .key(&keys.fence)
                    .key(&keys.queue)
                    .key(&keys.timeouts)
                    .arg(request.owner.as_str())
                    .arg(request.ttl.as_millis() as u64)
                    .arg(if request.reentrant { 1 } else { 0 })
                    .arg("")
                    .arg(inner.options.waiter_lease.as_millis() as u64)
                    .arg("");
                let call = script.invoke_async::<(i64, i64)>(&mut conn);
                match tokio::time::timeout(timeout, call).await {
                    Ok(result) => result.map_err(|e| node.err(e)),
                    Err(_) => Err(Error::unavailable(format!(
                        "Redis at {} did not answer within {timeout:?}",
                        node.address
                    ))),
                }
            }
        });
        let results = join_all(calls).await;
        let elapsed = started.elapsed();
        let mut votes = vec![Vote::Refused; inner.nodes.len()];
        let (mut granted, mut deadlock, mut failures) = (0, false, Vec::new());
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok((1, token)) => {
                    votes[i] = Vote::Granted(token as u64);
                    granted += 1;
                }
                Ok((-1, _)) => deadlock = true,
                Ok(_) => {}
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
                Vote::Granted(token) => Some(*token),
                _ => None,
            })
            .collect();
        let validity = request
            .ttl
            .checked_sub(elapsed + Self::drift(request.ttl))
            .unwrap_or_default();
        if granted >= self.quorum() && !validity.is_zero() {
            return Ok(Outcome::Held {
                valid_until: started + request.ttl - Self::drift(request.ttl),
                tokens,
            });
        }
        // Not held: undo the partial grant everywhere at once, including on
        // nodes that did not answer in time (their grant may still come). In
        // the background: a stalled node must not hold up the caller, and
        // each undo follows its grant on that node's connection anyway.
        let (store, undo_request) = (self.clone(), request.clone());
        tokio::spawn(async move { store.undo_votes(&undo_request, &votes).await });
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
        Ok(Outcome::Busy)
    }

    async fn round_detached(&self, request: &AcquireRequest) -> Result<Outcome> {
        let (store, undo) = (self.clone(), self.clone());
        let (call_request, undo_request) = (request.clone(), request.clone());
        complete_or_undo(
            async move { store.round(&call_request).await },
            move |abandoned| async move {
                if let Ok(Outcome::Held { tokens, .. }) = abandoned {
                    undo.release_tokens(&undo_request, &tokens).await;
                }
            },
        )
        .await
    }

    /// Undoes a failed round: granted nodes by token, silent nodes by owner
    /// (the release follows the late acquire on the same connection).
    async fn undo_votes(&self, request: &AcquireRequest, votes: &[Vote]) {
        let tokens: Vec<Option<String>> = votes
            .iter()
            .map(|v| match v {
                Vote::Granted(token) => Some(token.to_string()),
                Vote::Unknown => Some(String::new()),
                Vote::Refused => None,
            })
            .collect();
        self.release_on(request, &tokens).await;
    }

    /// Releases on every node that granted; returns how many nodes released.
    async fn release_tokens(&self, request: &AcquireRequest, tokens: &NodeTokens) -> Released {
        let tokens: Vec<Option<String>> = tokens.iter().map(|t| t.map(|t| t.to_string())).collect();
        self.release_on(request, &tokens).await
    }

    /// Runs the release script on each node with `Some(token)` ('' = any).
    async fn release_on(&self, request: &AcquireRequest, tokens: &[Option<String>]) -> Released {
        let inner = &self.inner;
        let keys = Keys::new(&inner.options.prefix, request.name.as_str());
        let calls = inner.nodes.iter().zip(tokens).filter_map(|(node, token)| {
            let token = token.as_deref()?;
            let mut conn = node.conn.clone();
            let keys = &keys;
            let timeout = inner.options.response_timeout;
            Some(async move {
                let mut script = inner.scripts.release.key(&keys.lock);
                script
                    .key(&keys.queue)
                    .key(&keys.timeouts)
                    .arg(request.owner.as_str())
                    .arg(token)
                    .arg("");
                // Once sent, the release runs on the node even if we stop
                // waiting for its reply.
                tokio::time::timeout(timeout, script.invoke_async::<i64>(&mut conn)).await
            })
        });
        let results = join_all(calls).await;
        let released = Released {
            released: results
                .iter()
                .filter(|r| matches!(r, Ok(Ok(n)) if *n >= 0))
                .count(),
            unanswered: results.iter().filter(|r| !matches!(r, Ok(Ok(_)))).count(),
        };
        if released.released > 0 {
            self.wake_local(&request.name);
        }
        released
    }

    fn local_notify(&self, name: &LockName) -> Arc<Notify> {
        self.inner.local_waiters.register(name)
    }

    fn wake_local(&self, name: &LockName) {
        self.inner.local_waiters.wake_one(name);
    }

    fn grant(tokens: NodeTokens, valid_until: Instant) -> Grant {
        // Not a fencing token (capabilities say so): the largest of the
        // per-node counters, for logs only.
        let token = tokens.iter().flatten().copied().max().unwrap_or(0);
        Grant::new(token, valid_until).with_state(tokens)
    }
}

/// What the nodes answered to a release: owner releases, and calls with no
/// answer (timed out or failed), as opposed to "not the owner".
struct Released {
    released: usize,
    unanswered: usize,
}

#[async_trait]
impl Backend for RedlockStore {
    fn kind(&self) -> &'static str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: false,
            push_wakeups: false,
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
        match self.round_detached(request).await? {
            Outcome::Held {
                tokens,
                valid_until,
            } => Ok(Some(Self::grant(tokens, valid_until))),
            Outcome::Busy => Ok(None),
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let notify = self.local_notify(&request.name);
        loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.round_detached(request).await {
                Ok(Outcome::Held {
                    tokens,
                    valid_until,
                }) => return Ok(Self::grant(tokens, valid_until)),
                Ok(Outcome::Busy) => request.waiting.raise(),
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "omnilock redlock round failed; retrying")
                }
                Err(e) => return Err(e),
            }
            // A random delay, so that contenders do not split the votes again.
            let delay = Duration::from_millis(rand::thread_rng().gen_range(5..50));
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Held until now only if a majority still had this owner's key: a
    /// release that found it on fewer nodes is a loss the holder must hear
    /// of (another client may have held the lock meanwhile), even though it
    /// cleaned up what was left.
    async fn release(&self, request: &AcquireRequest, grant: &Grant) -> Result<()> {
        let tokens = grant.state::<NodeTokens>().cloned().unwrap_or_default();
        let Released {
            released,
            unanswered,
        } = self.release_tokens(request, &tokens).await;
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
                    let token = grant.state::<NodeTokens>()?.get(n).copied().flatten()?;
                    Some((i, token))
                })
                .collect();
            let mut conn = node.conn.clone();
            let timeout = inner.options.response_timeout;
            async move {
                if granted.is_empty() {
                    return (granted, None);
                }
                let mut script = inner.scripts.renew_all.prepare_invoke();
                for &(i, _) in &granted {
                    script.key(Keys::new(&inner.options.prefix, holds[i].0.name.as_str()).lock);
                }
                for &(i, token) in &granted {
                    let request = holds[i].0;
                    script
                        .arg(request.owner.as_str())
                        .arg(token)
                        .arg(request.ttl.as_millis() as u64);
                }
                let answer =
                    tokio::time::timeout(timeout, script.invoke_async::<Vec<i64>>(&mut conn)).await;
                (granted, answer.ok().and_then(|a| a.ok()))
            }
        });
        let (mut extended, mut refused) = (vec![0; holds.len()], vec![0; holds.len()]);
        for (granted, answer) in join_all(calls).await {
            let Some(answer) = answer.filter(|a| a.len() == granted.len()) else {
                continue;
            };
            for (&(i, _), renewed) in granted.iter().zip(answer) {
                if renewed == 1 {
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
            .map(|(i, (request, _))| {
                if extended[i] >= self.quorum() && elapsed + Self::drift(request.ttl) < request.ttl
                {
                    return Ok(started + request.ttl - Self::drift(request.ttl));
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
        let keys = Keys::new(&inner.options.prefix, name.as_str());
        let calls = inner.nodes.iter().map(|node| {
            let mut conn = node.conn.clone();
            let keys = &keys;
            async move {
                let mut script = inner.scripts.break_lock.key(&keys.lock);
                script.key(&keys.queue).key(&keys.timeouts).arg("");
                script.invoke_async::<i64>(&mut conn).await
            }
        });
        let results = join_all(calls).await;
        self.wake_local(name);
        Ok(results.iter().any(|r| matches!(r, Ok(1))))
    }
}
