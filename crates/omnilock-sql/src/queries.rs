//! The SQL, per dialect. Every statement binds its values as parameters; the
//! only text spliced in is the table name, checked to be a plain identifier
//! and quoted (so reserved words such as `select` work as table names).
//!
//! One row per lock name, kept after release so that the fencing token (a
//! per-name counter) survives release and takeover:
//! `owner` is NULL when the lock is free; `expires_at` and `updated_at` are
//! milliseconds since the Unix epoch **by the database's clock**, never the
//! client's.

use crate::config::Dialect;

/// Fair mode: a waiter takes a ticket (an auto-increment id) and the lock
/// goes to the oldest live ticket. Tickets carry a lease that the waiter
/// refreshes as it polls, so a crashed waiter's ticket stops counting.
#[derive(Debug, Clone)]
pub(crate) struct Tickets {
    /// Binds: name, owner, lease_ms. Returns the id (MySQL: last insert id).
    pub enqueue: String,
    /// Binds: lease_ms, id.
    pub heartbeat: String,
    /// Binds: id.
    pub dequeue: String,
    /// Removes tickets of this lock long expired. Binds: name.
    pub sweep: String,
}

/// How a dialect takes a lock atomically.
#[derive(Debug, Clone)]
pub(crate) enum Acquire {
    /// SQLite and PostgreSQL: one `INSERT ... ON CONFLICT DO UPDATE ... WHERE
    /// ... RETURNING token`. Binds: name, owner, ttl_ms, reentrant (0/1),
    /// and in fair mode the caller's ticket.
    /// One row on success, none when busy.
    Upsert(String),
    /// MySQL/MariaDB (no conditional upsert, no RETURNING): a single-row
    /// `UPDATE` that takes an existing row if free, expired or re-entered,
    /// reporting the token through `LAST_INSERT_ID(expr)`; when no row
    /// matched, `INSERT IGNORE` creates the row for a name never used.
    UpdateThenInsert {
        /// Binds: owner, owner, owner, ttl_ms, ttl_ms, owner, name, [fair:
        /// name, ticket,] owner, reentrant.
        update: String,
        /// Binds: name, owner, ttl_ms. One row inserted = taken with token 1.
        insert: String,
    },
}

/// The statements one store uses.
#[derive(Debug, Clone)]
pub(crate) struct Queries {
    /// Creates the table if missing.
    pub create: Vec<String>,
    /// Takes the lock if free, expired, or held by the same owner and
    /// reentrant.
    pub acquire: Acquire,
    /// Reads who holds a lock. Binds: name. Returns `(owner, remaining_ms,
    /// waiting_mark_ms)`, each NULL when not live.
    pub probe: String,
    /// Marks a lock as waited for (PostgreSQL with NOTIFY: releases notify
    /// only while the mark is fresh). Binds: mark_ms, name.
    pub mark_waiting: String,
    /// Fair mode's waiting line, when `?fair=true`.
    pub tickets: Option<Tickets>,
    /// Drops one hold, owner- and token-checked. Binds: name, owner, token.
    /// One row affected on success (or, when `release_selects_count`, one
    /// row whose first column is that count).
    pub release: String,
    /// PostgreSQL's release is a `SELECT` over the `UPDATE` that also sends
    /// `NOTIFY` when the lock became free, in the same round trip.
    pub release_selects_count: bool,
    /// Extends a live lease, owner- and token-checked. Binds: ttl_ms, name,
    /// owner, token. One row affected on success; never revives a lock.
    pub renew: String,
    /// Frees a lock whatever its owner. Binds: name.
    pub break_lock: String,
    /// The live holder's owner and token. Binds: name.
    pub holder: String,
}

/// `name` as a quoted identifier. PostgreSQL folds unquoted identifiers to
/// lower case, so the quoted form is lowered too: `table=MyLocks` names the
/// same table `mylocks` as before identifiers were quoted. MySQL and SQLite
/// keep the case as given (their matching rules do not change with quotes).
pub(crate) fn ident(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::MySql => format!("`{name}`"),
        Dialect::Postgres => format!("\"{}\"", name.to_ascii_lowercase()),
        Dialect::Sqlite => format!("\"{name}\""),
    }
}

/// The names of the table, fair mode's waiting line and its index, as given
/// (unquoted).
pub(crate) fn queue_names(table: &str) -> (String, String) {
    (format!("{table}_queue"), format!("{table}_queue_name"))
}

/// The SQL type of the `name` and `owner` columns. MySQL/MariaDB: binary, so
/// that names compare byte for byte (every `utf8mb4` collation, `_bin`
/// included, ignores trailing spaces, so `"backup "` was the lock `"backup"`).
pub(crate) fn text_type(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "TEXT",
        Dialect::Postgres => "VARCHAR(256)",
        Dialect::MySql => "VARBINARY(256)",
    }
}

impl Queries {
    pub(crate) fn new(dialect: Dialect, table_name: &str, notify: bool, fair: bool) -> Self {
        let now = match dialect {
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            Dialect::MySql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
        };
        let greatest = match dialect {
            Dialect::Sqlite => "MAX",
            _ => "GREATEST",
        };
        let text = text_type(dialect);
        let int = match dialect {
            Dialect::Sqlite => "INTEGER",
            _ => "BIGINT",
        };
        let table = ident(dialect, table_name);
        let (queue, index) = queue_names(table_name);
        let (queue, index) = (ident(dialect, &queue), ident(dialect, &index));
        // Fair mode: a free lock goes only to the caller whose ticket is the
        // oldest live one (no live ticket ahead of `$5`; try-acquire passes
        // the largest id, so any live ticket stops it).
        let queue_clause = |name: &str, ticket: &str| {
            if fair {
                format!(
                    " AND NOT EXISTS (SELECT 1 FROM {queue} WHERE {queue}.name = {name}
                        AND {queue}.id < {ticket} AND {queue}.expires_at > {now})"
                )
            } else {
                String::new()
            }
        };
        let mut create = vec![format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                name {text} NOT NULL PRIMARY KEY,
                owner {text} NULL,
                holds {int} NOT NULL DEFAULT 0,
                token {int} NOT NULL DEFAULT 0,
                expires_at {int} NULL,
                updated_at {int} NOT NULL,
                waiting_until {int} NULL
            )"
        )];
        if fair {
            create.push(match dialect {
                Dialect::Sqlite => format!(
                    "CREATE TABLE IF NOT EXISTS {queue} (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        name {text} NOT NULL, owner {text} NOT NULL, expires_at {int} NOT NULL)"
                ),
                Dialect::Postgres => format!(
                    "CREATE TABLE IF NOT EXISTS {queue} (
                        id BIGSERIAL PRIMARY KEY,
                        name {text} NOT NULL, owner {text} NOT NULL, expires_at {int} NOT NULL)"
                ),
                Dialect::MySql => format!(
                    "CREATE TABLE IF NOT EXISTS {queue} (
                        id BIGINT AUTO_INCREMENT PRIMARY KEY,
                        name {text} NOT NULL, owner {text} NOT NULL, expires_at {int} NOT NULL,
                        KEY {index} (name, id))"
                ),
            });
            if dialect != Dialect::MySql {
                create.push(format!(
                    "CREATE INDEX IF NOT EXISTS {index} ON {queue} (name, id)"
                ));
            }
        }
        // "Live and mine": the row's owner is the caller and its lease runs.
        let mine = format!("{table}.owner = excluded.owner AND {table}.expires_at > {now}");
        let ahead = queue_clause("$1", "$5");
        let acquire = format!(
            "INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at)
             VALUES ($1, $2, 1, 1, {now} + $3, {now})
             ON CONFLICT (name) DO UPDATE SET
                holds = CASE WHEN {mine} THEN {table}.holds + 1 ELSE 1 END,
                token = CASE WHEN {mine} THEN {table}.token ELSE {table}.token + 1 END,
                expires_at = CASE WHEN {mine}
                    THEN {greatest}({table}.expires_at, excluded.expires_at)
                    ELSE excluded.expires_at END,
                owner = excluded.owner,
                updated_at = {now}
             WHERE (({table}.owner IS NULL OR {table}.expires_at <= {now}){ahead})
                OR ({table}.owner = excluded.owner AND $4 = 1)
             RETURNING token, holds"
        );
        let acquire = match dialect {
            Dialect::MySql => Acquire::UpdateThenInsert {
                // MySQL evaluates SET assignments left to right, each seeing
                // the ones before: every condition reads `owner` and
                // `expires_at`, so they are assigned last, in that order.
                update: format!(
                    "UPDATE {table} SET
                        holds = IF(owner = ? AND expires_at > {now}, holds + 1, 1),
                        token = LAST_INSERT_ID(IF(owner = ? AND expires_at > {now}, token, token + 1)),
                        expires_at = IF(owner = ? AND expires_at > {now},
                            GREATEST(expires_at, {now} + ?), {now} + ?),
                        owner = ?,
                        updated_at = {now}
                     WHERE name = ?
                       AND (((owner IS NULL OR expires_at <= {now}){mysql_ahead})
                            OR (owner = ? AND ? = 1))",
                    mysql_ahead = queue_clause("?", "?"),
                ),
                insert: format!(
                    "INSERT IGNORE INTO {table} (name, owner, holds, token, expires_at, updated_at)
                     VALUES (?, ?, 1, 1, {now} + ?, {now})"
                ),
            },
            _ => Acquire::Upsert(acquire),
        };
        let probe = format!(
            "SELECT CASE WHEN expires_at > {now} THEN owner END,
                    CASE WHEN expires_at > {now} THEN expires_at - {now} END,
                    CASE WHEN waiting_until > {now} THEN waiting_until - {now} END
             FROM {table} WHERE name = $1"
        );
        let mark_waiting = format!("UPDATE {table} SET waiting_until = {now} + $1 WHERE name = $2");
        // `holds` is assigned last: MySQL evaluates SET assignments left to
        // right, each seeing the ones before, so decrementing it first made
        // the CASEs see the new count and free a lock still held twice
        // (found by `reentrancy_across_clients`).
        let release = format!(
            "UPDATE {table} SET
                owner = CASE WHEN holds <= 1 THEN NULL ELSE owner END,
                expires_at = CASE WHEN holds <= 1 THEN NULL ELSE expires_at END,
                updated_at = {now},
                holds = holds - 1
             WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > {now}"
        );
        let release = match dialect {
            Dialect::Postgres if notify => format!(
                "WITH released AS ({release} RETURNING owner, waiting_until)
                 SELECT COUNT(*),
                        COUNT(pg_notify('{table_name}', $1))
                            FILTER (WHERE owner IS NULL AND waiting_until > {now})
                 FROM released"
            ),
            _ => release,
        };
        let renew = format!(
            "UPDATE {table} SET
                expires_at = {greatest}(expires_at, {now} + $1),
                updated_at = {now}
             WHERE name = $2 AND owner = $3 AND token = $4 AND expires_at > {now}"
        );
        let break_lock = format!(
            "UPDATE {table} SET owner = NULL, holds = 0, expires_at = NULL, updated_at = {now}
             WHERE name = $1 AND owner IS NOT NULL AND expires_at > {now}"
        );
        let holder = format!(
            "SELECT owner, token FROM {table}
             WHERE name = $1 AND owner IS NOT NULL AND expires_at > {now}"
        );
        let tickets = fair.then(|| Tickets {
            enqueue: match dialect {
                Dialect::MySql => format!(
                    "INSERT INTO {queue} (name, owner, expires_at) VALUES (?, ?, {now} + ?)"
                ),
                _ => format!(
                    "INSERT INTO {queue} (name, owner, expires_at) VALUES ($1, $2, {now} + $3)
                     RETURNING id"
                ),
            },
            heartbeat: format!("UPDATE {queue} SET expires_at = {now} + $1 WHERE id = $2"),
            dequeue: format!("DELETE FROM {queue} WHERE id = $1"),
            sweep: format!("DELETE FROM {queue} WHERE name = $1 AND expires_at < {now} - 60000"),
        });
        let queries = Queries {
            create,
            acquire,
            probe,
            mark_waiting,
            tickets,
            release,
            release_selects_count: dialect == Dialect::Postgres && notify,
            renew,
            break_lock,
            holder,
        };
        match dialect {
            // SQLite's numbered parameters are ?N.
            Dialect::Sqlite => queries.map(|sql| sql.replace('$', "?")),
            // MySQL's parameters are positional `?`; each statement binds
            // its values in order of appearance.
            Dialect::MySql => queries.map(|sql| {
                let mut out = sql;
                for n in 1..=4 {
                    out = out.replace(&format!("${n}"), "?");
                }
                out
            }),
            Dialect::Postgres => queries,
        }
    }

    fn map(self, f: impl Fn(String) -> String) -> Self {
        Queries {
            create: self.create.into_iter().map(&f).collect(),
            acquire: match self.acquire {
                Acquire::Upsert(sql) => Acquire::Upsert(f(sql)),
                other => other,
            },
            probe: f(self.probe),
            mark_waiting: f(self.mark_waiting),
            tickets: self.tickets.map(|t| Tickets {
                enqueue: f(t.enqueue),
                heartbeat: f(t.heartbeat),
                dequeue: f(t.dequeue),
                sweep: f(t.sweep),
            }),
            release: f(self.release),
            release_selects_count: self.release_selects_count,
            renew: f(self.renew),
            break_lock: f(self.break_lock),
            holder: f(self.holder),
        }
    }
}
