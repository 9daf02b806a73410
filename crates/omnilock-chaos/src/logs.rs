//! The protected resource as a log in the lock's own store: one list of
//! entries per lock (a Redis list, etcd keys in creation order, ZooKeeper
//! sequential nodes). A client under the lock reads the log's length, works
//! for a random while, then appends `<token> <client> <length read>`:
//! - *guarded*, through the store's own guard (Redis `GuardedWrite`, etcd
//!   `is_owner` in a `Txn`, ZooKeeper `check_owner` in a `multi`), so the
//!   entry goes in only while the lock is held;
//! - *fenced* (Redis only), through `FencedKey`: claimed with the token
//!   before the read, the append refused for a token below the highest;
//! - *unguarded* (the control), a plain append.
//!
//! The store orders the entries, so the harness judges them after the run
//! (`collect`): an entry whose token is below one before it is a stale write
//! accepted; one whose length read is not its place, a lost update.
//! Clients report refusals as they happen.

use std::time::Duration;

use omnilock::etcd::EtcdConfig;
use omnilock::etcd::etcd_client::{
    Certificate, Client as EtcdClient, ConnectOptions, GetOptions, Identity, SortOrder, SortTarget,
    TlsOptions, Txn, TxnOp,
};
use omnilock::raw::StoreUrl;
use omnilock::redis::redis;
use omnilock::redis::{FencedKey, GuardedWrite, RedisConfig, RedisStore};
use omnilock::zookeeper::zookeeper_client::{
    Acls, Client as ZkClient, CreateMode, Error as ZkError, MultiWriteError,
};
use omnilock::zookeeper::{OwnerCheck, ZkConfig};
use omnilock::{ErrorKind, LockGuard, Locks};
use rand::Rng;

use crate::history::{Event, Op, Phase, Source, refused_write};

/// How a client appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogWrite {
    /// Through the store's guard of the lock.
    Guarded,
    /// Through a fenced key (Redis).
    Fenced,
    /// A plain append (the control).
    Unguarded,
}

impl LogWrite {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LogWrite::Guarded => "guarded",
            LogWrite::Fenced => "fenced",
            LogWrite::Unguarded => "unguarded",
        }
    }

    /// The inverse of [`name`](Self::name).
    pub fn parse(text: &str) -> Option<LogWrite> {
        [LogWrite::Guarded, LogWrite::Fenced, LogWrite::Unguarded]
            .into_iter()
            .find(|w| w.name() == text)
    }
}

/// The logs of one run, on the store of its URL.
pub enum Logs {
    /// Redis (one server, Sentinel, Cluster): a list per lock, in the lock's
    /// hash slot.
    Redis(RedisStore),
    /// etcd: a key per entry under a prefix per lock.
    Etcd(Box<EtcdClient>),
    /// ZooKeeper: a sequential node per entry under a node per lock.
    Zk(ZkClient),
}

/// One entry as the store ordered it.
struct Entry {
    token: u64,
    client: u32,
    read: u64,
}

impl Entry {
    fn parse(text: &str) -> Option<Entry> {
        let mut words = text.split(' ');
        Some(Entry {
            token: words.next()?.parse().ok()?,
            client: words.next()?.parse().ok()?,
            read: words.next()?.parse().ok()?,
        })
    }
}

fn failed(what: &str) -> impl Fn(String) -> String + '_ {
    move |e| format!("the logs' {what}: {e}")
}

impl Logs {
    /// The logs on the store at `url` (omnilock's own URL, perhaps through a
    /// chaos proxy).
    pub async fn connect(url: &str) -> Result<Logs, String> {
        let parsed = StoreUrl::parse(url).map_err(|e| e.to_string())?;
        let scheme = url.split("://").next().unwrap_or_default();
        match scheme {
            s if s.starts_with("redis") => {
                let config = RedisConfig::from_url(&parsed).map_err(|e| e.to_string())?;
                Ok(Logs::Redis(
                    RedisStore::connect(config)
                        .await
                        .map_err(|e| failed("store")(e.to_string()))?,
                ))
            }
            "etcd" | "etcds" => {
                let config = EtcdConfig::from_url(&parsed).map_err(|e| e.to_string())?;
                Ok(Logs::Etcd(Box::new(etcd_client(&config).await?)))
            }
            "zk" | "zks" | "zookeeper" => {
                let config = ZkConfig::from_url(&parsed).map_err(|e| e.to_string())?;
                Ok(Logs::Zk(zk_client(&config, Duration::from_secs(10)).await?))
            }
            _ => Err(
                "the log modes need etcd, ZooKeeper or Redis (one server, Sentinel, Cluster)"
                    .into(),
            ),
        }
    }

    /// The locks a client takes: on Redis, on the logs' own store (its
    /// guarded writes run on the lock's store connection).
    pub fn locks(&self) -> Option<Locks> {
        match self {
            Logs::Redis(store) => Some(Locks::new(store.clone())),
            _ => None,
        }
    }

    /// Readies the logs of `locks` locks for run `run`.
    pub async fn prepare(&self, run: &str, locks: u32) -> Result<(), String> {
        let Logs::Zk(client) = self else {
            return Ok(()); // keys named after the run need no parent
        };
        let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let root = zk_root(run);
        for path in std::iter::once(root.clone())
            .chain((0..locks).map(|lock| format!("{root}/chaos-{lock}")))
        {
            match client.create(&path, b"", &mode).await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(failed("parent")(e.to_string())),
            }
        }
        Ok(())
    }

    /// One round under `guard`: read the log's length, work up to `work`,
    /// append. Returns the events to report.
    pub async fn append(
        &self,
        run: &str,
        client: u32,
        guard: &LockGuard,
        how: LogWrite,
        work: Duration,
    ) -> Vec<Event> {
        let lock = guard.name().as_str().to_string();
        let token = guard.token();
        let event = |source, op, phase| Event::now(source, op, phase).client(client).lock(&lock);
        let mut events = vec![event(Source::Client, Op::Write, Phase::Invoke).token(token)];
        let outcome = async {
            if how == LogWrite::Fenced
                && let Logs::Redis(store) = self
            {
                // Claim before reading: a predecessor that wakes up after
                // this read cannot append any more.
                let key = FencedKey::new(redis_key(run, guard)?).map_err(|e| e.to_string())?;
                match key.claim(&mut store.connection(), token).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::StaleToken => return Ok(false),
                    Err(e) => return Err(e.to_string()),
                }
            }
            let read = self.length(run, guard).await?;
            let pause = rand::thread_rng().gen_range(Duration::ZERO..=work);
            tokio::time::sleep(pause).await;
            self.push(run, guard, how, &format!("{token} {client} {read}"))
                .await
        }
        .await;
        match outcome {
            Ok(true) => events.push(event(Source::Client, Op::Write, Phase::Ok)),
            Ok(false) => events.extend(refused_write(
                client,
                &lock,
                token,
                "refused: the lock is no longer held",
            )),
            Err(e) => events.push(event(Source::Client, Op::Write, Phase::Fail).detail(e)),
        }
        events
    }

    /// Judges every entry of the log of `guard`'s lock, in the store's
    /// order: one served write each.
    pub async fn collect(&self, run: &str, guard: &LockGuard) -> Result<Vec<Event>, String> {
        let entries = self.entries(run, guard).await?;
        let lock = guard.name().as_str();
        let mut highest = 0;
        let mut events = Vec::with_capacity(entries.len());
        for (place, text) in entries.iter().enumerate() {
            let entry = Entry::parse(text).ok_or_else(|| format!("a log entry {text:?}"))?;
            let mut serve = Event::now(Source::Register, Op::Serve, Phase::Ok)
                .client(entry.client)
                .lock(lock)
                .token(entry.token)
                .detail("write");
            serve.stale = entry.token < highest;
            serve.lost_update = entry.read != place as u64;
            serve.value = Some(place as i64 + 1);
            highest = highest.max(entry.token);
            events.push(serve);
        }
        Ok(events)
    }

    async fn length(&self, run: &str, guard: &LockGuard) -> Result<u64, String> {
        match self {
            Logs::Redis(store) => redis::cmd("LLEN")
                .arg(redis_key(run, guard)?)
                .query_async(&mut store.connection())
                .await
                .map_err(|e| e.to_string()),
            Logs::Etcd(client) => client
                .kv_client()
                .get(
                    etcd_prefix(run, guard),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
                .map(|got| got.count() as u64)
                .map_err(|e| e.to_string()),
            // A ZooKeeper server answers reads from its own copy, which may
            // lag the leader: without `sync` a holder can miss the entry its
            // predecessor appended just before releasing.
            Logs::Zk(client) => {
                let parent = zk_parent(run, guard);
                client.sync(&parent).await.map_err(|e| e.to_string())?;
                client
                    .check_stat(&parent)
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|stat| stat.num_children as u64)
                    .ok_or_else(|| "the log's node is gone".to_string())
            }
        }
    }

    /// Appends `entry`: `Ok(false)` when the guard or fence refused it.
    async fn push(
        &self,
        run: &str,
        guard: &LockGuard,
        how: LogWrite,
        entry: &str,
    ) -> Result<bool, String> {
        let refused = |e: omnilock::Error| match e.kind() {
            ErrorKind::LockLost | ErrorKind::StaleToken => Ok(false),
            _ => Err(e.to_string()),
        };
        match (self, how) {
            (Logs::Redis(_), LogWrite::Guarded) => {
                let write = GuardedWrite::new(guard).map_err(|e| e.to_string())?;
                let key = write.key(&log_suffix(run));
                write
                    .rpush(key, entry)
                    .commit()
                    .await
                    .map(|()| true)
                    .or_else(refused)
            }
            (Logs::Redis(store), LogWrite::Fenced) => {
                let key = FencedKey::new(redis_key(run, guard)?).map_err(|e| e.to_string())?;
                key.rpush(&mut store.connection(), guard.token(), entry)
                    .await
                    .map(|()| true)
                    .or_else(refused)
            }
            (Logs::Redis(store), LogWrite::Unguarded) => redis::cmd("RPUSH")
                .arg(redis_key(run, guard)?)
                .arg(entry)
                .query_async::<i64>(&mut store.connection())
                .await
                .map(|_| true)
                .map_err(|e| e.to_string()),
            (Logs::Etcd(client), how) => {
                let key = format!("{}{:020}", etcd_prefix(run, guard), rand::random::<u64>());
                let put = TxnOp::put(key, entry, None);
                let txn = match how {
                    LogWrite::Guarded => Txn::new()
                        .when([omnilock::etcd::is_owner(guard).map_err(|e| e.to_string())?])
                        .and_then([put]),
                    _ => Txn::new().and_then([put]),
                };
                client
                    .kv_client()
                    .txn(txn)
                    .await
                    .map(|answer| answer.succeeded())
                    .map_err(|e| e.to_string())
            }
            (Logs::Zk(client), how) => {
                let mut writer = client.new_multi_writer();
                if how == LogWrite::Guarded {
                    OwnerCheck::new(guard)
                        .and_then(|check| check.add_to(&mut writer))
                        .map_err(|e| e.to_string())?;
                }
                let mode = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
                writer
                    .add_create(
                        &format!("{}/e-", zk_parent(run, guard)),
                        entry.as_bytes(),
                        &mode,
                    )
                    .map_err(|e| e.to_string())?;
                match writer.commit().await {
                    Ok(_) => Ok(true),
                    Err(MultiWriteError::OperationFailed {
                        index: 0,
                        source: ZkError::NoNode | ZkError::BadVersion,
                    }) if how == LogWrite::Guarded => Ok(false),
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }

    /// The entries of the log of `guard`'s lock, in the store's order.
    async fn entries(&self, run: &str, guard: &LockGuard) -> Result<Vec<String>, String> {
        match self {
            Logs::Redis(store) => redis::cmd("LRANGE")
                .arg(redis_key(run, guard)?)
                .arg(0)
                .arg(-1)
                .query_async(&mut store.connection())
                .await
                .map_err(|e| e.to_string()),
            Logs::Etcd(client) => {
                let options = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend);
                let got = client
                    .kv_client()
                    .get(etcd_prefix(run, guard), Some(options))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(got
                    .kvs()
                    .iter()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                    .collect())
            }
            Logs::Zk(client) => {
                let parent = zk_parent(run, guard);
                let mut children = client
                    .list_children(&parent)
                    .await
                    .map_err(|e| e.to_string())?;
                children.sort();
                let mut entries = Vec::with_capacity(children.len());
                for child in children {
                    let (data, _) = client
                        .get_data(&format!("{parent}/{child}"))
                        .await
                        .map_err(|e| e.to_string())?;
                    entries.push(String::from_utf8_lossy(&data).into_owned());
                }
                Ok(entries)
            }
        }
    }
}

fn log_suffix(run: &str) -> String {
    format!("chaos-log-{run}")
}

/// The Redis list of a lock: in its hash slot, so that a guarded write on a
/// cluster may append to it.
fn redis_key(run: &str, guard: &LockGuard) -> Result<String, String> {
    GuardedWrite::new(guard)
        .map(|write| write.key(&log_suffix(run)))
        .map_err(|e| e.to_string())
}

/// Under the test user's `omnilock/` grant.
fn etcd_prefix(run: &str, guard: &LockGuard) -> String {
    format!("omnilock/chaos-log-{run}/{}/", guard.name().as_str())
}

fn zk_root(run: &str) -> String {
    format!("/omnilock-chaos-log-{run}")
}

fn zk_parent(run: &str, guard: &LockGuard) -> String {
    format!("{}/{}", zk_root(run), guard.name().as_str())
}

/// An application's own etcd client with the URL's endpoints, credentials
/// and TLS.
pub(crate) async fn etcd_client(config: &EtcdConfig) -> Result<EtcdClient, String> {
    let mut options = ConnectOptions::new().with_timeout(Duration::from_secs(5));
    if let (Some(user), Some(password)) = (&config.username, &config.password) {
        options = options.with_user(user.clone(), password.expose());
    }
    if config.tls.enabled {
        let pem = config.tls.read().map_err(|e| e.to_string())?;
        let mut tls = TlsOptions::new();
        if let Some(ca) = pem.ca {
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = pem.identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        options = options.with_tls(tls);
    }
    EtcdClient::connect(&config.endpoints, Some(options))
        .await
        .map_err(|e| failed("etcd client")(e.to_string()))
}

/// An application's own ZooKeeper client with the URL's hosts, digest and
/// TLS, asking for a session of `session`.
pub(crate) async fn zk_client(config: &ZkConfig, session: Duration) -> Result<ZkClient, String> {
    let connector = ZkClient::connector().with_session_timeout(session);
    let connector = match &config.digest {
        Some((user, pw)) => {
            connector.with_auth("digest", format!("{user}:{}", pw.expose()).as_bytes())
        }
        None => connector,
    };
    let connected = match config.client_tls().map_err(|e| e.to_string())? {
        Some(tls) => connector.with_tls(tls).secure_connect(&config.hosts).await,
        None => connector.connect(&config.hosts).await,
    };
    connected.map_err(|e| failed("ZooKeeper client")(e.to_string()))
}
