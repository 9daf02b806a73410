//! Batched renewal of mutexes: one `UPDATE` extends the leases of many of
//! one client's locks, each row matched by name, owner and token. The
//! statement text depends on the batch size, so a few fixed sizes are
//! prepared and a smaller batch is padded by repeating its last lock
//! (a row matched twice is updated once).

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
    statements: Vec<(usize, SqlStr)>,
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
                let sql = format!(
                    "UPDATE {table} SET
                        expires_at = {greatest}(expires_at, {now} + ?),
                        updated_at = {now}
                     WHERE name IN ({names}) AND expires_at > {now}
                       AND (name, owner, token) IN ({rows})"
                );
                let sql = AssertSqlSafe(std::sync::Arc::<str>::from(number(dialect, &sql)));
                (size, sql.into_sql_str())
            })
            .collect();
        RenewBatch { statements }
    }

    /// The most locks one statement renews.
    pub(crate) fn largest() -> usize {
        SIZES[SIZES.len() - 1]
    }

    /// The statement for `len` locks and the size it binds, or `None` when
    /// `len` is larger than the largest size.
    pub(crate) fn for_len(&self, len: usize) -> Option<(usize, SqlStr)> {
        self.statements
            .iter()
            .find(|(size, _)| *size >= len)
            .map(|(size, sql)| (*size, sql.clone()))
    }
}
