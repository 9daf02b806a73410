//! Batched renewal of mutexes: one `UPDATE` extends the leases of many of
//! one client's locks, each row matched by name, owner and token. The
//! statement text depends on the batch size, so a few fixed sizes are
//! prepared and a smaller batch is padded by repeating its last lock
//! (a row matched twice is updated once). When a batch matches fewer rows
//! than locks (some are gone), a `SELECT` with the same condition names the
//! ones it renewed.

use super::counted::{clock, number};
use super::ident;
use crate::config::Dialect;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

/// The sizes a batch is padded to. 64 locks bind 256 parameters, within
/// every dialect's limit (SQLite's oldest is 999).
pub(crate) const SIZES: [usize; 3] = [4, 16, 64];

/// The renewal statements of one table, one per size in [`SIZES`].
#[derive(Debug, Clone)]
pub(crate) struct RenewBatch {
    statements: Vec<BatchStatements>,
}

/// The statements for one batch size.
#[derive(Debug, Clone)]
pub(crate) struct BatchStatements {
    /// How many locks the statements bind.
    pub(crate) size: usize,
    /// Binds the TTL in milliseconds, the names, then each lock's name,
    /// owner and token.
    pub(crate) renew: SqlStr,
    /// The names of the batch's locks that are held, by the same condition
    /// (binds as `renew`, without the TTL): right after `renew`, the locks
    /// it renewed.
    pub(crate) held: SqlStr,
}

impl RenewBatch {
    pub(crate) fn new(dialect: Dialect, table_name: &str) -> Self {
        let table = ident(dialect, table_name);
        let (now, _, greatest) = clock(dialect);
        let statements = SIZES
            .iter()
            .map(|&size| {
                let names = vec!["?"; size].join(", ");
                let rows = vec!["(?, ?, ?)"; size].join(", ");
                // `name IN (...)` lets every dialect use the primary key;
                // the row list then checks each lock's owner and token.
                let held_by_caller = format!(
                    "name IN ({names}) AND expires_at > {now}
                       AND (name, owner, token) IN ({rows})"
                );
                let renew = format!(
                    "UPDATE {table} SET
                        expires_at = {greatest}(expires_at, {now} + ?),
                        updated_at = {now}
                     WHERE {held_by_caller}"
                );
                // MySQL keeps names as bytes: read back as text.
                let name = match dialect {
                    Dialect::MySql => "CAST(name AS CHAR)",
                    _ => "name",
                };
                let held = format!("SELECT {name} FROM {table} WHERE {held_by_caller}");
                let sql = |text: &str| {
                    AssertSqlSafe(std::sync::Arc::<str>::from(number(dialect, text))).into_sql_str()
                };
                BatchStatements {
                    size,
                    renew: sql(&renew),
                    held: sql(&held),
                }
            })
            .collect();
        RenewBatch { statements }
    }

    /// The most locks one statement renews.
    pub(crate) fn largest() -> usize {
        SIZES[SIZES.len() - 1]
    }

    /// The statements for `len` locks, or `None` when `len` is larger than
    /// the largest size.
    pub(crate) fn for_len(&self, len: usize) -> Option<&BatchStatements> {
        self.statements.iter().find(|sized| sized.size >= len)
    }
}
