// A build with SQLite only refuses advisory mode in the URL: what follows
// is then never reached.
#![cfg_attr(
    not(any(feature = "mysql", feature = "postgres")),
    allow(unused_imports, unreachable_code, unused_variables, dead_code)
)]
//! Advisory mode (`?mode=advisory`): a mutex is the database's own session
//! lock, `GET_LOCK` on MySQL/MariaDB and `pg_advisory_lock` on PostgreSQL,
//! held on a connection of its own for as long as the lock is held.
//!
//! - **Why a connection per held lock:** these locks belong to a session and
//!   end with it. That is also the lease: each session is told to end once
//!   idle for the lock's TTL (`wait_timeout`, `idle_session_timeout`), and a
//!   renewal is one statement on it. A holder that crashes frees the lock at
//!   once (its socket closes); one that hangs or is cut off frees it one TTL
//!   after its last statement.
//! - **Push wake-ups:** a waiting acquire blocks inside `GET_LOCK` or
//!   `pg_advisory_lock` on its session, and the database hands it the lock.
//! - **Fencing tokens:** the lock table's row for the name, bumped by the
//!   statement that takes the lock (in the same statement when the lock is
//!   free), which also records the owner for `holder`.
//! - **Sessions in an unknown state are never reused:** a session dropped
//!   mid-statement (a cancelled acquire) or after an error is killed from
//!   the store's pool (`KILL`, `pg_terminate_backend`), which ends its wait
//!   and frees whatever it took. Sessions that end clean wait in a small
//!   idle list for the next lock.

mod inspect;
mod key;
mod session;
mod shared;
mod take;

use std::sync::{Arc, Mutex};

use omnilock_core::{Error, LockName};

use crate::config::SqlConfig;
use crate::conn::errors::map_err;
use crate::conn::{Pool, Target};
use crate::queries::advisory::Advisory as Sql;
pub(crate) use key::Key;
use shared::Shared;

/// Advisory mode's state in a store.
pub(crate) struct Advisory {
    target: Target,
    config: Arc<SqlConfig>,
    sql: Sql,
    /// The store's pool: sessions are killed from it.
    killer: Pool,
    /// Sessions holding this store's locks, or ready to: a lock taken by a
    /// try goes to one of them; a session that waited joins them once
    /// granted.
    shared: Mutex<Vec<Arc<Shared>>>,
}

impl std::fmt::Debug for Advisory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Advisory").finish_non_exhaustive()
    }
}

impl Advisory {
    pub(crate) fn new(config: &SqlConfig, target: Target, killer: Pool) -> Self {
        Advisory {
            target,
            config: Arc::new(config.clone()),
            sql: Sql::new(config.dialect, &config.table),
            killer,
            shared: Mutex::new(Vec::new()),
        }
    }

    fn key(&self, name: &LockName) -> Key {
        Key::new(&self.config.table, name.as_str())
    }

    fn err(&self, e: sqlx::Error) -> Error {
        map_err(e, &self.config)
    }

    /// Lets go of the sessions (held locks end with their guards).
    pub(crate) fn close(&self) {
        omnilock_core::lock_unpoisoned(&self.shared).clear();
    }
}
