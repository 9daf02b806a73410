//! [`ZkStore`]: the [`Backend`] over one ZooKeeper ensemble: its sessions,
//! and the lock recipe of [`crate::queue`] run on them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backend, Backoff, Capabilities, Error, ErrorKind, Holder, HolderChange,
    Inspection, Listed, LockKind, LockName, LockSpec, Owner, Primitive, Record, Result,
    SessionsPerTtl, async_trait, complete_or_undo,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use zookeeper_client::{Client, MultiReadResult, SessionState};

use crate::builder::ZkBuilder;
use crate::config::{ZkConfig, ZkOptions};
use crate::conn::{Ctx, GIVEN, call, call_raw, classify, has_identity, mkdir_prefix, no_answer};
use crate::queue::{
    Entry, abandon, contenders, create_node, is_contender, lock_node_base, position,
    refuse_own_holder, rw_node, wait_turn,
};
use crate::session::Session;

/// A grant of this store: its token, and the node its release and renewal
/// name.
pub(crate) type Grant = omnilock_core::Grant<Held>;

/// Everything but letters, digits and `-_.~` is percent-encoded, so a name is
/// always one valid node name (no `/`, no characters ZooKeeper refuses).
const NODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Locks in a ZooKeeper ensemble. See [docs/backends/zookeeper.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/zookeeper.md). Open it
/// from a URL as below, or on the application's own client and session with
/// [`ZkStore::builder`].
///
/// ```no_run
/// # async fn demo() -> omnilock_core::Result<()> {
/// use omnilock_core::{Locks, StoreUrl};
/// use omnilock_zookeeper::{ZkConfig, ZkStore};
/// let url = StoreUrl::parse("zk://127.0.0.1:2181/app")?;
/// let locks = Locks::new(ZkStore::connect(ZkConfig::from_url(&url)?).await?);
/// let guard = locks.acquire("reports/nightly").await?;
/// println!("fencing token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct ZkStore {
    ctx: Ctx,
    sessions: Sessions,
}

/// Where sessions come from: the session timeout is the lease of every node
/// a session creates.
enum Sessions {
    /// From a URL: one session per TTL asked for, opened on demand.
    PerTtl {
        config: Box<ZkConfig>,
        open: SessionsPerTtl<Session>,
    },
    /// The application's own session (a client it gave): every lock lives on
    /// it, so a lease is that session's timeout; when it ends, no other can
    /// be opened.
    Given(Arc<Session>),
}

/// What a ZooKeeper grant carries to release and renew it: its node, which
/// [`crate::check_owner`] checks.
pub struct Held {
    path: String,
    czxid: i64,
    session: Arc<Session>,
    ticket: u64,
}

impl Held {
    /// The hold's lock node (a name no other acquisition has).
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl std::fmt::Debug for ZkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkStore")
            .field("ensemble", &self.ctx.shown)
            .finish_non_exhaustive()
    }
}

impl ZkStore {
    /// Connects (one session, for the default TTL, is opened to prove the
    /// ensemble answers and accepts the credentials).
    pub async fn connect(config: ZkConfig) -> Result<Self> {
        let ttl = config.session_timeout.unwrap_or(omnilock_core::DEFAULT_TTL);
        let store = ZkStore {
            ctx: Ctx {
                options: config.options.clone(),
                shown: config.shown.clone(),
                creator_only: config.digest.is_some(),
            },
            sessions: Sessions::PerTtl {
                config: Box::new(config),
                open: SessionsPerTtl::new(|session| session.death().is_none()),
            },
        };
        let session = store.session(ttl).await?;
        // Credentials are checked on first use: create the prefix now.
        call(&store.ctx, mkdir_prefix(&store.ctx, &session)).await?;
        Ok(store)
    }

    /// Starts building a store on the application's own `client` and its
    /// session. See [`ZkBuilder`].
    pub fn builder(client: Client) -> ZkBuilder {
        ZkBuilder::new(client)
    }

    /// A store on the application's session: learns whether the session
    /// has credentials (ACLs then as with `zk://user:pw@`) and creates the
    /// prefix, which proves the ensemble answers and accepts them, within
    /// the connect timeout.
    pub(crate) async fn adopt(client: Client, options: ZkOptions) -> Result<Self> {
        if let state @ (SessionState::Expired | SessionState::Closed | SessionState::AuthFailed) =
            client.state()
        {
            return Err(Error::config(format!(
                "the application's ZooKeeper session is over ({state})"
            )));
        }
        let deadline = options.connect_timeout;
        let creator_only = has_identity(&client, &options).await?;
        let store = ZkStore {
            ctx: Ctx {
                options,
                shown: GIVEN.to_string(),
                creator_only,
            },
            sessions: Sessions::Given(Session::adopt(client)),
        };
        let session = store.any_session().await?;
        let made = tokio::time::timeout(deadline, mkdir_prefix(&store.ctx, &session))
            .await
            .map_err(|_| no_answer(&store.ctx.shown, deadline))?;
        made.map_err(|e| classify(e, &store.ctx.shown))?;
        Ok(store)
    }

    /// The session whose nodes live `ttl`: from a URL, one per TTL; on the
    /// application's session, that one, if its timeout is not longer than
    /// `ttl` (a crashed holder's lock must free within the TTL).
    pub(crate) async fn session(&self, ttl: Duration) -> Result<Arc<Session>> {
        match &self.sessions {
            Sessions::PerTtl { config, open } => open.get(ttl, || Session::open(config, ttl)).await,
            Sessions::Given(session) => {
                given_alive(session)?;
                ttl_fits_session(ttl, session.timeout)?;
                Ok(session.clone())
            }
        }
    }

    /// A session for reads and housekeeping, whatever its timeout.
    pub(crate) async fn any_session(&self) -> Result<Arc<Session>> {
        match &self.sessions {
            Sessions::PerTtl { .. } => self.session(omnilock_core::DEFAULT_TTL).await,
            Sessions::Given(session) => {
                given_alive(session)?;
                Ok(session.clone())
            }
        }
    }

    /// Brings this session's server up to the leader for `path`. Every
    /// read that answers for another client (`break_lock`, `break_holds`,
    /// `inspect`, `list`, `holder`) syncs first: a server may lag the leader, and without it a grant
    /// made through another server just before is missed.
    pub(crate) async fn sync(&self, session: &Session, path: &str) -> Result<()> {
        match call_raw(&self.ctx, session.client.sync(path)).await? {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(e) => Err(classify(e, &self.ctx.shown)),
        }
    }

    /// The container of lock `name`. A name spelt exactly like a contender
    /// node is refused: under a prefix nested inside another lock's
    /// container, its container would pass for a contender of that lock.
    pub(crate) fn lock_path(&self, name: &str) -> Result<String> {
        let encoded = encode_name(name);
        if is_contender(&encoded) || rw_node(&encoded).is_some() {
            return Err(Error::new(
                ErrorKind::InvalidName,
                "on ZooKeeper, a lock name may not look like a lock node \
                 (<32 hex digits>-lock-<10 digits>, _c_<uuid>-lock-<10 digits>, \
                 ...__READ__<10 digits> or ...__WRIT__<10 digits>)",
            ));
        }
        Ok(format!("{}/{encoded}", self.ctx.options.prefix))
    }

    /// The lock name whose container is the child `node` of the prefix
    /// (the inverse of [`ZkStore::lock_path`]); `None` for a node that no
    /// name is encoded as.
    pub(crate) fn lock_name(node: &str) -> Option<String> {
        let name = percent_decode_str(node).decode_utf8().ok()?.into_owned();
        (encode_name(&name) == node).then_some(name)
    }

    async fn take(&self, request: &AcquireRequest, wait: bool) -> Result<Option<Grant>> {
        let session = self.session(request.ttl).await?;
        let lock_path = self.lock_path(request.name.as_str())?;
        let started = Instant::now();
        let (path, czxid) = {
            let ctx = self.ctx.clone();
            let (s, l, o) = (
                session.clone(),
                lock_path.clone(),
                request.owner.as_str().to_string(),
            );
            let client = session.client.clone();
            complete_or_undo(
                async move { create_node(&ctx, &s, &l, &lock_node_base(), o.as_bytes()).await },
                move |created: Result<(String, i64)>| async move {
                    if let Ok((path, _)) = created {
                        abandon(&client, path);
                    }
                },
            )
            .await?
        };
        let mut entry = Entry {
            client: session.client.clone(),
            path: path.clone(),
            armed: true,
        };
        let mut checked = started;
        if let Some(predecessor) = position(&self.ctx, &session, &lock_path, &path).await? {
            if !wait {
                entry.withdraw(&self.ctx).await;
                return Ok(None);
            }
            refuse_own_holder(&self.ctx, &session, &lock_path, &path, request).await?;
            request.waiting.raise();
            wait_turn(&self.ctx, &session, &lock_path, &path, predecessor).await?;
            checked = Instant::now();
        }
        entry.armed = false;
        Ok(Some(self.granted(request, session, path, czxid, checked)))
    }

    pub(crate) fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// The grant of the node at `path`, known to hold when `checked`.
    pub(crate) fn granted(
        &self,
        request: &AcquireRequest,
        session: Arc<Session>,
        path: String,
        czxid: i64,
        checked: Instant,
    ) -> Grant {
        let ticket = session.register(&request.lost);
        let valid_until = checked + request.ttl.min(session.timeout);
        omnilock_core::Grant::new(czxid as u64, valid_until).with_hold(Held {
            path,
            czxid,
            session,
            ticket,
        })
    }
}

/// `name` as one node name: [`NODE`]-encoded, and `.` and `..` (which
/// ZooKeeper refuses as node names) spelt `%2E`.
pub(crate) fn encode_name(name: &str) -> String {
    match name {
        "." => "%2E".to_string(),
        ".." => "%2E%2E".to_string(),
        other => utf8_percent_encode(other, NODE).to_string(),
    }
}

/// On the application's session a lock's node lives as long as the
/// session: a holder that dies keeps the lock for the session timeout. A
/// shorter TTL would be a promise the store cannot keep, so it is refused.
pub(crate) fn ttl_fits_session(ttl: Duration, session_timeout: Duration) -> Result<()> {
    if ttl < session_timeout {
        return Err(Error::config(format!(
            "a TTL of {ttl:?} is shorter than the timeout of the application's ZooKeeper \
             session ({session_timeout:?}), which is the lease of every lock on it: ask for \
             at least {session_timeout:?}, or open the store from a zk:// URL (a session per TTL)"
        )));
    }
    Ok(())
}

/// The application's session, if it has not ended: omnilock cannot open
/// another on a client it was given.
fn given_alive(session: &Session) -> Result<()> {
    match session.death() {
        None => Ok(()),
        Some(cause) => Err(Error::unavailable(format!(
            "the application's ZooKeeper session has ended ({}); omnilock cannot open another \
             on a client it was given: build the store again on a new client",
            cause.message()
        ))
        .with_retryable(false)),
    }
}

#[async_trait]
impl Backend for ZkStore {
    type Hold = Held;

    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_fair(true)
            .with_push_wakeups(true)
            .with_fencing(true)
            .with_cross_process_reentrancy(false)
            .with_lease_renewal(true)
            .with_cross_process(true)
            .with_break_lock(true)
            .with_holder(true)
            .with_check(true)
            .with_guarded_write(true)
            .with_election(true)
            // ZAB: a node is committed on a quorum of the ensemble.
            .with_survives_failover(true)
            .with_semaphore(true)
            .with_rw_lock(true)
            .with_atomic_lock_all(false)
            // Every node names its owner (omnilock's own data).
            .with_inspect(true)
            .with_inspect_waiters(true)
            .with_list(true)
            // Persistent nodes, timed out against the leader's clock.
            .with_records(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        match request.primitive {
            Primitive::Mutex => self.take(request, false).await,
            _ => self.take_counted(request, false).await,
        }
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant> {
        let taken = match request.primitive {
            Primitive::Mutex => self.take(request, true).await,
            _ => self.take_counted(request, true).await,
        };
        taken?.ok_or_else(|| Error::new(ErrorKind::Backend, "a waiting acquire returned nothing"))
    }

    async fn release(&self, _spec: &LockSpec, grant: &Grant) -> Result<()> {
        let held = &grant.hold;
        held.session.unregister(held.ticket);
        let client = &held.session.client;
        let mut uncertain = false;
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        let deadline = Instant::now() + self.ctx.options.request_timeout * 2;
        loop {
            // The node's path is unique to this acquisition (guid + sequence),
            // so deleting it can never touch another owner's hold.
            let deleted = call_raw(&self.ctx, client.delete(&held.path, None)).await;
            let retry = match deleted {
                Ok(Ok(())) => return Ok(()),
                // Expired, broken, or deleted by our own earlier attempt.
                Ok(Err(zookeeper_client::Error::NoNode)) if uncertain => return Ok(()),
                Ok(Err(zookeeper_client::Error::NoNode))
                | Ok(Err(zookeeper_client::Error::SessionExpired))
                | Ok(Err(zookeeper_client::Error::ClientClosed)) => return Err(Error::not_owner()),
                Ok(Err(e)) => classify(e, &self.ctx.shown),
                Err(timeout) => timeout,
            };
            if !retry.is_retryable() || Instant::now() >= deadline {
                return Err(retry);
            }
            uncertain = true;
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    async fn renew(&self, spec: &LockSpec, grant: &Grant) -> Result<Instant> {
        let held = &grant.hold;
        if let Some(cause) = held.session.death() {
            return Err(cause.with_retryable(false));
        }
        let sent = Instant::now();
        let stat = call(&self.ctx, held.session.client.check_stat(&held.path)).await?;
        match stat {
            Some(stat) if stat.czxid == held.czxid => Ok(sent + spec.ttl.min(held.session.timeout)),
            _ => Err(node_gone()),
        }
    }

    /// Holds are checked up to 64 per `multiRead` of their session
    /// (ZooKeeper 3.6+); on an older server, or when the batch fails as a
    /// whole, each is renewed on its own.
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let mut results: Vec<Option<Result<Instant>>> = holds.iter().map(|_| None).collect();
        let mut by_session: Vec<(&Arc<Session>, Vec<(usize, &Held)>)> = Vec::new();
        for (i, (_, grant)) in holds.iter().enumerate() {
            let held = &grant.hold;
            if held.session.death().is_some() {
                continue;
            }
            match by_session
                .iter_mut()
                .find(|(s, _)| Arc::ptr_eq(s, &held.session))
            {
                Some((_, group)) => group.push((i, held)),
                None => by_session.push((&held.session, vec![(i, held)])),
            }
        }
        for (session, group) in &by_session {
            for batch in group.chunks(RENEW_BATCH) {
                let sent = Instant::now();
                let mut reader = session.client.new_multi_reader();
                if batch
                    .iter()
                    .any(|(_, held)| reader.add_get_data(&held.path).is_err())
                {
                    continue;
                }
                let Ok(read) = call(&self.ctx, reader.commit()).await else {
                    continue;
                };
                if read.len() != batch.len() {
                    continue;
                }
                for ((i, held), answer) in batch.iter().zip(read) {
                    results[*i] = Some(match answer {
                        MultiReadResult::Data { stat, .. } if stat.czxid == held.czxid => {
                            Ok(sent + holds[*i].0.ttl.min(held.session.timeout))
                        }
                        _ => Err(node_gone()),
                    });
                }
            }
        }
        for (i, (spec, grant)) in holds.iter().enumerate() {
            if results[i].is_none() {
                results[i] = Some(self.renew(spec, grant).await);
            }
        }
        results.into_iter().flatten().collect()
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let session = self.any_session().await?;
        let lock_path = self.lock_path(name.as_str())?;
        self.sync(&session, &lock_path).await?;
        let mut children =
            match call_raw(&self.ctx, session.client.list_children(&lock_path)).await? {
                Ok(children) => children,
                Err(zookeeper_client::Error::NoNode) => return Ok(false),
                Err(e) => return Err(classify(e, &self.ctx.shown)),
            };
        contenders(&mut children);
        let Some(first) = children.first() else {
            return Ok(false);
        };
        let path = format!("{lock_path}/{first}");
        match call_raw(&self.ctx, session.client.delete(&path, None)).await? {
            Ok(()) => Ok(true),
            Err(zookeeper_client::Error::NoNode) => Ok(false),
            Err(e) => Err(classify(e, &self.ctx.shown)),
        }
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        self.break_counted(name, kind, owner).await
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        self.inspect_lock(name, kind).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        self.list_locks(prefix).await
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        self.put_record(name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        self.get_record(name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        self.drop_record(name).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let session = self.any_session().await?;
        let lock_path = self.lock_path(name.as_str())?;
        // Without it, "no leader" right after a campaign returned.
        self.sync(&session, &lock_path).await?;
        loop {
            let mut children =
                match call_raw(&self.ctx, session.client.list_children(&lock_path)).await? {
                    Ok(children) => children,
                    Err(zookeeper_client::Error::NoNode) => return Ok(None),
                    Err(e) => return Err(classify(e, &self.ctx.shown)),
                };
            contenders(&mut children);
            let Some(first) = children.first() else {
                return Ok(None);
            };
            let path = format!("{lock_path}/{first}");
            match call_raw(&self.ctx, session.client.get_data(&path)).await? {
                Ok((data, stat)) => {
                    let owner = Owner::new(&String::from_utf8_lossy(&data))?;
                    return Ok(Some(Holder::new(owner, stat.czxid as u64)));
                }
                // Released between the two reads: look again.
                Err(zookeeper_client::Error::NoNode) => continue,
                Err(e) => return Err(classify(e, &self.ctx.shown)),
            }
        }
    }

    async fn watch_holder(&self, name: &LockName) -> Result<Option<HolderChange>> {
        let session = self.any_session().await?;
        let lock_path = self.lock_path(name.as_str())?;
        // The holder is the first contender among the lock node's
        // children, so a change of holder is a change of children; a lock
        // node not made yet is watched for its creation.
        let watcher = match call_raw(
            &self.ctx,
            session.client.list_and_watch_children(&lock_path),
        )
        .await?
        {
            Ok((_, watcher)) => watcher,
            Err(zookeeper_client::Error::NoNode) => {
                match call_raw(&self.ctx, session.client.check_and_watch_stat(&lock_path)).await? {
                    Ok((_, watcher)) => watcher,
                    Err(e) => return Err(classify(e, &self.ctx.shown)),
                }
            }
            Err(e) => return Err(classify(e, &self.ctx.shown)),
        };
        // A session that ends fires the watch too (the caller reads again).
        Ok(Some(Box::pin(crate::watch::fired(watcher))))
    }

    /// From a URL, closes omnilock's sessions. On the application's
    /// session, only ends omnilock's use of it: the application's client
    /// stays open, so the nodes of guards still alive go when they are
    /// dropped or when the application's session ends.
    async fn close(&self) {
        match &self.sessions {
            Sessions::PerTtl { open, .. } => {
                for session in open.take_all() {
                    Session::end(session).await;
                }
            }
            Sessions::Given(session) => session.close(),
        }
    }
}

/// Holds checked by one renewal `multiRead` at most.
const RENEW_BATCH: usize = 64;

/// A renewal found the hold's node gone, or another in its place.
fn node_gone() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "the lock node is gone from ZooKeeper (session expired or lock broken)",
    )
}
