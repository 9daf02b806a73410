//! Shared sessions: each holds any number of this store's locks, runs one
//! statement at a time, and keeps them all with one lease. A try takes its
//! lock on one of them; a wait gets a session of its own, which joins them
//! once granted.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock_core::{Error, ErrorKind, LostNotifier, Result};

use super::AdvisoryStore;
use super::session::{Session, SessionConn, bounded, gone, idle_timeout};
use crate::key::Key;
use crate::queries::advisory::Advisory as Sql;

/// A session that holds any number of this store's locks, used one
/// statement at a time. Its lease covers them all: one statement every
/// TTL/3 keeps every one held, and if it dies they are all lost together
/// (as with an etcd lease or a ZooKeeper session).
pub(super) struct Shared {
    /// `None` once the session died or was killed: its locks are lost.
    pub(super) slot: tokio::sync::Mutex<Option<Holding>>,
    pub(super) idle_timeout: Duration,
    /// Locks held, mirrored outside the slot for picking a session.
    pub(super) held: std::sync::atomic::AtomicUsize,
    /// When it last ran a statement (for dropping idle ones).
    pub(super) used: Mutex<Instant>,
    /// The session's ID and start, as the server lists it (`watch.rs`).
    identity: (i64, i64),
    /// The lost signals of the locks it holds, fired if the session is
    /// found gone (`watch.rs`); `None` once it was.
    lost: Mutex<Option<HashMap<Key, LostNotifier>>>,
}

/// A session and the keys of the locks it holds. Never takes a key it
/// holds: the database would count that as re-entering (GET_LOCK and
/// pg_advisory_lock nest per session), while to this store it is another
/// owner asking.
pub(super) struct Holding {
    pub(super) session: Session,
    pub(super) keys: HashSet<Key>,
}

impl Shared {
    pub(super) fn new(session: Session, keys: HashSet<Key>) -> Arc<Self> {
        Arc::new(Shared {
            identity: (session.id, session.started_us),
            lost: Mutex::new(Some(HashMap::new())),
            idle_timeout: session.idle_timeout,
            held: std::sync::atomic::AtomicUsize::new(keys.len()),
            slot: tokio::sync::Mutex::new(Some(Holding { session, keys })),
            used: Mutex::new(Instant::now()),
        })
    }

    /// Known to have died or been killed (a failed statement found out).
    /// A session busy with a statement right now counts as alive.
    pub(super) fn is_dead(&self) -> bool {
        self.slot.try_lock().is_ok_and(|slot| slot.is_none())
    }

    /// The session's ID and start, as the server lists it.
    pub(super) fn identity(&self) -> (i64, i64) {
        self.identity
    }

    /// Fires `lost` if this session is found gone while it holds `key`;
    /// at once if it was found gone already.
    pub(super) fn watch(&self, key: Key, lost: &LostNotifier) {
        match omnilock_core::lock_unpoisoned(&self.lost).as_mut() {
            Some(watched) => {
                watched.insert(key, lost.clone());
            }
            None => lost.fire(ended()),
        }
    }

    /// `key` is no longer held here.
    pub(super) fn unwatch(&self, key: &Key) {
        if let Some(watched) = omnilock_core::lock_unpoisoned(&self.lost).as_mut() {
            watched.remove(key);
        }
    }

    /// Whether it holds locks someone should hear of losing.
    pub(super) fn is_watched(&self) -> bool {
        omnilock_core::lock_unpoisoned(&self.lost)
            .as_ref()
            .is_some_and(|watched| !watched.is_empty())
    }

    /// The server no longer lists this session, and its own statement
    /// failed (which also let go of it): its locks are gone, and the
    /// database may have handed them on already. Each holder hears it now.
    pub(super) fn ended_outside(&self) {
        let lost = omnilock_core::lock_unpoisoned(&self.lost).take();
        for notifier in lost.into_iter().flat_map(HashMap::into_values) {
            notifier.fire(ended());
        }
        tracing::warn!(
            session = self.identity.0,
            "omnilock advisory: a session holding locks was ended from outside; its holders are told"
        );
    }

    pub(super) fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn touch(&self, holding: &Holding) {
        self.held
            .store(holding.keys.len(), std::sync::atomic::Ordering::Relaxed);
        *omnilock_core::lock_unpoisoned(&self.used) = Instant::now();
    }
}

/// Why a holder whose session was ended from outside lost its lock.
fn ended() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "the lock's database session was ended from outside (pg_terminate_backend, KILL, \
         break_lock or a server restart)",
    )
}

/// What a take statement found.
#[derive(Debug, Clone, Copy)]
pub(super) enum Took {
    Taken(u64),
    Busy,
}

impl AdvisoryStore {
    /// The session a try runs on: an empty one (so that each lock has a
    /// session of its own, and `break_lock`, which ends the holder's
    /// session, takes no other lock with it) while the store has fewer than
    /// `sessions`; past that, the least busy one of this TTL, which then
    /// holds several.
    pub(super) async fn shared_for(&self, ttl: Duration) -> Result<Arc<Shared>> {
        let wanted = idle_timeout(self.table.config().dialect, ttl);
        {
            let mut list = omnilock_core::lock_unpoisoned(&self.shared);
            // The server ends a session idle for its timeout: let go of
            // empty ones well before that, and of dead ones at once.
            list.retain(|s| {
                !s.is_dead()
                    && (s.held() > 0
                        || omnilock_core::lock_unpoisoned(&s.used).elapsed() < s.idle_timeout / 2)
            });
            let same: Vec<&Arc<Shared>> =
                list.iter().filter(|s| s.idle_timeout == wanted).collect();
            let free = |s: &&&Arc<Shared>| s.slot.try_lock().is_ok();
            if let Some(empty) = same.iter().filter(free).find(|s| s.held() == 0) {
                return Ok(Arc::clone(empty));
            }
            if list.len() >= self.table.config().advisory_sessions as usize && !same.is_empty() {
                let least = same
                    .iter()
                    .min_by_key(|s| (s.slot.try_lock().is_err(), s.held()))
                    .expect("not empty");
                return Ok(Arc::clone(least));
            }
        }
        let session = self.open(ttl).await?;
        let shared = Shared::new(session, HashSet::new());
        omnilock_core::lock_unpoisoned(&self.shared).push(Arc::clone(&shared));
        Ok(shared)
    }

    /// A session of its own for a wait: an empty shared one nobody else
    /// uses, or a new connection.
    pub(super) async fn session_for_wait(&self, ttl: Duration) -> Result<Session> {
        let wanted = idle_timeout(self.table.config().dialect, ttl);
        let claimed = {
            let mut list = omnilock_core::lock_unpoisoned(&self.shared);
            // Only the list refers to it (clones are made under this lock),
            // so nobody can start a statement on it.
            let spare = list.iter().position(|s| {
                s.idle_timeout == wanted
                    && s.held() == 0
                    && Arc::strong_count(s) == 1
                    && omnilock_core::lock_unpoisoned(&s.used).elapsed() < s.idle_timeout / 2
            });
            spare
                .map(|i| list.swap_remove(i))
                .and_then(|s| Arc::try_unwrap(s).ok())
                .and_then(|s| s.slot.into_inner())
                .filter(|h| h.keys.is_empty())
                .map(|h| h.session)
        };
        match claimed {
            Some(session) => Ok(session),
            None => self.open(ttl).await,
        }
    }
}

/// The one-statement take on a shared session. A failed statement leaves
/// the session in an unknown state: it is killed, and its other locks are
/// lost with it.
pub(super) async fn take_on(
    shared: &Shared,
    sql: &Sql,
    key: Key,
    name: &str,
    owner: &str,
) -> sqlx::Result<Took> {
    let mut slot = shared.slot.lock().await;
    let Some(holding) = slot.as_mut() else {
        return Err(gone());
    };
    if holding.keys.contains(&key) {
        return Ok(Took::Busy);
    }
    let session = &mut holding.session;
    let was_clean = session.clean;
    session.clean = false;
    let limit = session.idle_timeout;
    let took = bounded(limit, async {
        match &mut session.conn {
            #[cfg(not(any(feature = "mysql", feature = "postgres")))]
            _ => unreachable!("advisory mode is refused without mysql or postgres"),
            #[cfg(feature = "mysql")]
            SessionConn::MySql(c) => sqlx::query(sql.take_now.clone())
                .bind(name)
                .bind(owner)
                .bind(key.mysql())
                .execute(c)
                .await
                .map(|done| match done.rows_affected() {
                    0 => Took::Busy,
                    _ => Took::Taken(done.last_insert_id().max(1)),
                }),
            #[cfg(feature = "postgres")]
            SessionConn::Postgres(c) => sqlx::query_scalar::<_, i64>(sql.take_now.clone())
                .bind(name)
                .bind(owner)
                .bind(key.postgres())
                .fetch_optional(c)
                .await
                .map(|token| token.map_or(Took::Busy, |t| Took::Taken(t as u64))),
        }
    })
    .await;
    match took {
        Ok(Took::Taken(token)) => {
            holding.keys.insert(key);
            shared.touch(holding);
            Ok(Took::Taken(token))
        }
        Ok(Took::Busy) => {
            holding.session.clean = was_clean;
            shared.touch(holding);
            Ok(Took::Busy)
        }
        Err(e) => {
            // Dropped unclean: killed.
            slot.take();
            shared.held.store(0, std::sync::atomic::Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Releases `key` on its session: whether the session held it.
pub(super) async fn release_on(shared: &Shared, sql: &Sql, key: Key) -> sqlx::Result<bool> {
    let mut slot = shared.slot.lock().await;
    let Some(holding) = slot.as_mut() else {
        // Killed (broken, or by break_lock): nothing is held any more.
        return Ok(false);
    };
    if !holding.keys.contains(&key) {
        return Ok(false);
    }
    let limit = holding.session.idle_timeout;
    let released: sqlx::Result<bool> = bounded(limit, async {
        match &mut holding.session.conn {
            #[cfg(not(any(feature = "mysql", feature = "postgres")))]
            _ => unreachable!("advisory mode is refused without mysql or postgres"),
            #[cfg(feature = "mysql")]
            SessionConn::MySql(c) => sqlx::query_scalar::<_, Option<i64>>(sql.release.clone())
                .bind(key.mysql())
                .fetch_one(c)
                .await
                .map(|got| got == Some(1)),
            #[cfg(feature = "postgres")]
            SessionConn::Postgres(c) => {
                sqlx::query_scalar(sql.release.clone())
                    .bind(key.postgres())
                    .fetch_one(c)
                    .await
            }
        }
    })
    .await;
    match released {
        Ok(released) => {
            shared.unwatch(&key);
            holding.keys.remove(&key);
            holding.session.clean = holding.keys.is_empty();
            shared.touch(holding);
            Ok(released)
        }
        Err(e) => {
            slot.take();
            shared.held.store(0, std::sync::atomic::Ordering::Relaxed);
            Err(e)
        }
    }
}

/// One statement on a shared session: the keys it still holds.
pub(super) async fn ping(shared: &Shared, sql: &Sql) -> Result<HashSet<Key>> {
    let mut slot = shared.slot.lock().await;
    let Some(holding) = slot.as_mut() else {
        return Err(Error::unavailable("the session was killed or broke"));
    };
    // Only this session could release its locks: alive means held.
    let limit = holding.session.idle_timeout;
    let alive: sqlx::Result<()> = bounded(limit, async {
        match &mut holding.session.conn {
            #[cfg(not(any(feature = "mysql", feature = "postgres")))]
            _ => unreachable!("advisory mode is refused without mysql or postgres"),
            #[cfg(feature = "mysql")]
            SessionConn::MySql(c) => sqlx::query(sql.renew.clone()).execute(c).await.map(|_| ()),
            #[cfg(feature = "postgres")]
            SessionConn::Postgres(c) => sqlx::query(sql.renew.clone()).execute(c).await.map(|_| ()),
        }
    })
    .await;
    match alive {
        Ok(_) => {
            shared.touch(holding);
            Ok(holding.keys.clone())
        }
        Err(e) => {
            slot.take();
            shared.held.store(0, std::sync::atomic::Ordering::Relaxed);
            Err(Error::unavailable(e.to_string()))
        }
    }
}
