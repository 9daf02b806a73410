//! Taking, releasing and renewing advisory locks: a try is one statement
//! on a shared session; a wait blocks inside the database on a session of
//! its own; a renewal is one statement per session.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use omnilock_core::{AcquireRequest, Backoff, Error, ErrorKind, LockSpec, Result};

use super::AdvisoryStore;
use super::session::{Session, SessionConn};
use super::shared::{Shared, Took, ping, release_on, take_on};
use crate::key::Key;
use crate::queries::advisory::Advisory as Sql;
use crate::store::{Grant, HoldKind, SqlHold};

/// How long a MySQL/MariaDB wait blocks in one `GET_LOCK` before asking
/// again (a cancelled wait is killed, not timed out, so this only bounds a
/// statement's length).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
const MYSQL_WAIT_SECS: i64 = 3600;

/// A held advisory lock: the grant's backend state.
pub(crate) struct Held {
    pub(super) shared: Arc<Shared>,
    pub(super) key: Key,
}

/// Runs `call` to the end even if the caller goes: a statement cut off
/// halfway would leave a shared session in an unknown state.
async fn to_the_end<T: Send + 'static>(
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    omnilock_core::complete_or_undo(call, |_| async {}).await
}

impl AdvisoryStore {
    /// Takes the lock if it is free: one statement on a shared session.
    /// `Ok(None)` when busy.
    ///
    /// A session can die under a try without this store knowing
    /// (`break_lock` from another client kills the holder's session, and
    /// with it every lock on it); the failed statement finds out and kills
    /// it. Then the try runs once more, on another session. That is safe
    /// whatever the failed statement did: an advisory lock belongs to its
    /// session, so one the dead session may have taken is not this
    /// session's to take twice, and frees when that session ends.
    pub(super) async fn try_take(&self, request: &AcquireRequest) -> Result<Option<Grant>> {
        match self.try_take_once(request).await {
            Err((err, Some(shared))) if shared.is_dead() => {
                tracing::debug!(error = %err, "omnilock advisory: a shared session died; trying on another");
                self.try_take_once(request).await.map_err(|(err, _)| err)
            }
            result => result.map_err(|(err, _)| err),
        }
    }

    /// One try on one session; a failure names the session it ran on.
    async fn try_take_once(
        &self,
        request: &AcquireRequest,
    ) -> std::result::Result<Option<Grant>, (Error, Option<Arc<Shared>>)> {
        let shared = self.shared_for(request.ttl).await.map_err(|e| (e, None))?;
        let key = self.key(&request.name);
        let started = Instant::now();
        let (sql, on, undo_sql, undo_on) = (
            self.sql.clone(),
            Arc::clone(&shared),
            self.sql.clone(),
            Arc::clone(&shared),
        );
        let (name, owner) = (request.name.to_string(), request.owner.to_string());
        // A caller that goes while the statement runs: the lock it may have
        // taken is given back on the same session.
        let took = omnilock_core::complete_or_undo(
            async move { take_on(&on, &sql, key, &name, &owner).await },
            move |took| async move {
                if let Ok(Took::Taken(_)) = took {
                    let _ = release_on(&undo_on, &undo_sql, key).await;
                }
            },
        )
        .await
        .map_err(|e| (self.err(e), Some(Arc::clone(&shared))))?;
        Ok(match took {
            Took::Taken(token) => Some(self.held(request, shared, key, token, started)),
            Took::Busy => None,
        })
    }

    /// Waits for the lock, as [`take_once`](Self::take_once), again after a
    /// failure that may pass (a session that could not be opened in time, a
    /// connection dropped), as table mode's waits do: a waiting acquire
    /// ends with its grant, its timeout, or an error that stays.
    pub(super) async fn take(&self, request: &AcquireRequest) -> Result<Grant> {
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            match self.take_once(request).await {
                Err(err) if err.is_retryable() => {
                    tracing::debug!(error = %err, lock = %request.name, "omnilock advisory: a wait failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                result => return result,
            }
        }
    }

    /// One wait: a try, and if busy a wait inside the database on a session
    /// of its own, which then joins the shared ones. Dropped while waiting,
    /// or failing, that session is killed, which ends the wait and frees
    /// the lock if it was granted meanwhile.
    async fn take_once(&self, request: &AcquireRequest) -> Result<Grant> {
        if let Some(grant) = self.try_take(request).await? {
            return Ok(grant);
        }
        request.waiting.raise();
        let mut session = self.session_for_wait(request.ttl).await?;
        session.clean = false;
        let key = self.key(&request.name);
        let err = |e| self.err(e);
        loop {
            let granted = match &mut session.conn {
                #[cfg(not(any(feature = "mysql", feature = "postgres")))]
                _ => unreachable!("advisory mode is refused without mysql or postgres"),
                #[cfg(feature = "mysql")]
                SessionConn::MySql(c) => {
                    let got: Option<i64> = sqlx::query_scalar(self.sql.wait.clone())
                        .bind(key.mysql())
                        .bind(MYSQL_WAIT_SECS)
                        .fetch_one(c)
                        .await
                        .map_err(err)?;
                    got == Some(1)
                }
                #[cfg(feature = "postgres")]
                SessionConn::Postgres(c) => {
                    sqlx::query(self.sql.wait.clone())
                        .bind(key.postgres())
                        .execute(c)
                        .await
                        .map_err(err)?;
                    true
                }
            };
            if granted {
                break;
            }
        }
        // The session's idle clock restarts when this statement arrives,
        // after `started`: the lease runs from there.
        let started = Instant::now();
        let token = fence(
            &mut session,
            &self.sql,
            request.name.as_str(),
            request.owner.as_str(),
        )
        .await
        .map_err(err)?;
        let shared = Shared::new(session, HashSet::from([key]));
        omnilock_core::lock_unpoisoned(&self.shared).push(Arc::clone(&shared));
        Ok(self.held(request, shared, key, token, started))
    }

    /// Releases on the session that holds the lock.
    pub(super) async fn release_held(&self, grant: &Grant) -> Result<()> {
        let held = grant.hold.session()?;
        let (shared, sql, key) = (Arc::clone(&held.shared), self.sql.clone(), held.key);
        match to_the_end(async move { release_on(&shared, &sql, key).await }).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::not_owner()),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Renews holds (as `Backend::renew_all`): one statement per session,
    /// which restarts its idle clock for every lock it holds. A session
    /// that is gone means its locks are (or soon will be) gone.
    pub(super) async fn renew_held(&self, holds: &[(&LockSpec, &Grant)]) -> Vec<Result<Instant>> {
        let mut sessions: Vec<Arc<Shared>> = Vec::new();
        let mut which: Vec<Result<usize>> = Vec::with_capacity(holds.len());
        for (_, grant) in holds {
            which.push(grant.hold.session().map(|held| {
                match sessions.iter().position(|s| Arc::ptr_eq(s, &held.shared)) {
                    Some(i) => i,
                    None => {
                        sessions.push(Arc::clone(&held.shared));
                        sessions.len() - 1
                    }
                }
            }));
        }
        let started = Instant::now();
        let pinged = futures_util::future::join_all(sessions.iter().map(|shared| {
            let (shared, sql) = (Arc::clone(shared), self.sql.clone());
            to_the_end(async move { ping(&shared, &sql).await })
        }))
        .await;
        holds
            .iter()
            .zip(which)
            .map(|((spec, grant), session)| {
                let i = session?;
                let held = grant.hold.session()?;
                match &pinged[i] {
                    Ok(keys) if keys.contains(&held.key) => Ok(started + spec.ttl),
                    Ok(_) => Err(lost("the lock was released")),
                    Err(why) => Err(lost(format!("the lock's database session is gone ({why})"))),
                }
            })
            .collect()
    }
}

/// Bumps the token of a lock the session holds.
async fn fence(session: &mut Session, sql: &Sql, name: &str, owner: &str) -> sqlx::Result<u64> {
    match &mut session.conn {
        #[cfg(not(any(feature = "mysql", feature = "postgres")))]
        _ => unreachable!("advisory mode is refused without mysql or postgres"),
        #[cfg(feature = "mysql")]
        SessionConn::MySql(c) => {
            let done = sqlx::query(sql.fence.clone())
                .bind(name)
                .bind(owner)
                .execute(c)
                .await?;
            Ok(done.last_insert_id().max(1))
        }
        #[cfg(feature = "postgres")]
        SessionConn::Postgres(c) => {
            let token: i64 = sqlx::query_scalar(sql.fence.clone())
                .bind(name)
                .bind(owner)
                .fetch_one(c)
                .await?;
            Ok(token as u64)
        }
    }
}

fn lost(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::LockLost, message)
}

impl AdvisoryStore {
    /// The grant of `key` on `shared`, whose holder hears at once if the
    /// session is ended from outside (`watch.rs`).
    fn held(
        &self,
        request: &AcquireRequest,
        shared: Arc<Shared>,
        key: Key,
        token: u64,
        started: Instant,
    ) -> Grant {
        shared.watch(key, &request.lost);
        self.watch_sessions();
        omnilock_core::Grant::new(token, started + request.ttl)
            .with_hold(SqlHold(HoldKind::Session(Held { shared, key })))
    }
}
