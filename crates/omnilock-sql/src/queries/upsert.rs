//! PostgreSQL and SQLite: both take a lock with one conditional
//! `INSERT ... ON CONFLICT DO UPDATE ... RETURNING`, and both read numbered
//! placeholders `$N` natively, so they share this text; only the clock and
//! `GREATEST` are spelled differently.

use super::{
    Acquire, Counted, InTx, Inspect, Param, Queries, Records, RenewBatch, Statement, Tickets,
    counted, ident, queue_names, records, text_type,
};
use crate::config::Dialect;
use Param::*;

/// PostgreSQL's clock, in milliseconds since the Unix epoch.
pub(super) const POSTGRES_NOW: &str =
    "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

pub(super) fn queries(dialect: Dialect, table_name: &str, notify: bool, fair: bool) -> Queries {
    let now = match dialect {
        Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        _ => POSTGRES_NOW,
    };
    let greatest = match dialect {
        Dialect::Sqlite => "MAX",
        _ => "GREATEST",
    };
    let int = match dialect {
        Dialect::Sqlite => "INTEGER",
        _ => "BIGINT",
    };
    let serial = match dialect {
        Dialect::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        _ => "BIGSERIAL PRIMARY KEY",
    };
    let text = text_type(dialect);
    let table = ident(dialect, table_name);
    let (queue, index) = queue_names(table_name);
    let (queue, index) = (ident(dialect, &queue), ident(dialect, &index));

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
    create.extend(counted::create(dialect, table_name));
    create.push(records::create(dialect, table_name));
    if fair {
        create.push(format!(
            "CREATE TABLE IF NOT EXISTS {queue} (
                id {serial},
                name {text} NOT NULL, owner {text} NOT NULL, expires_at {int} NOT NULL)"
        ));
        create.push(format!(
            "CREATE INDEX IF NOT EXISTS {index} ON {queue} (name, id)"
        ));
    }

    // "Live and mine": the row's owner is the caller and its lease runs.
    let mine = format!("{table}.owner = excluded.owner AND {table}.expires_at > {now}");
    // Fair mode: a free lock goes only to the caller whose ticket is the
    // oldest live one (try-acquire passes the largest id, so any live
    // ticket stops it).
    let (ahead, acquire_params): (String, &[Param]) = if fair {
        (
            format!(
                " AND NOT EXISTS (SELECT 1 FROM {queue} WHERE {queue}.name = $1
                    AND {queue}.id < $5 AND {queue}.expires_at > {now})"
            ),
            &[Name, Owner, TtlMs, Reentrant, Ticket],
        )
    } else {
        (String::new(), &[Name, Owner, TtlMs, Reentrant])
    };
    let acquire = Statement::new(
        format!(
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
        ),
        acquire_params,
    );
    let release = format!(
        "UPDATE {table} SET
            owner = CASE WHEN holds <= 1 THEN NULL ELSE owner END,
            expires_at = CASE WHEN holds <= 1 THEN NULL ELSE expires_at END,
            updated_at = {now},
            holds = holds - 1
         WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > {now}"
    );
    let notifies = dialect == Dialect::Postgres && notify;
    let release = if notifies {
        // Fair mode names the head of the line after the lock's name (a
        // unit separator between, which no lock name holds), so that only
        // that waiter wakes, not every process's first waiter.
        let payload = if fair {
            format!(
                "$1 || chr(31) || COALESCE((SELECT MIN({queue}.id) FROM {queue}
                    WHERE {queue}.name = $1 AND {queue}.expires_at > {now})::text, '')"
            )
        } else {
            "$1".to_string()
        };
        // The channel is the table's name: a checked plain identifier. The
        // NOTIFY rides in the RETURNING list (the statement's row count is
        // what the caller reads): a CTE counting the rows cost a sixth more
        // server time per uncontended acquire + release (pgbench).
        format!(
            "{release}
             RETURNING CASE WHEN owner IS NULL AND waiting_until > {now}
                 THEN pg_notify('{table_name}', {payload}) END"
        )
    } else {
        release
    };
    Queries {
        begin: counted::begin(dialect),
        renew_batch: RenewBatch::new(dialect, table_name),
        counted: Counted::new(dialect, table_name, notify),
        inspect: Inspect::new(dialect, table_name, fair),
        records: Records::new(dialect, table_name),
        create: create
            .into_iter()
            .map(|s| Statement::new(s, &[]).sql)
            .collect(),
        acquire: Acquire::Upsert(acquire),
        probe: Statement::new(
            format!(
                "SELECT CASE WHEN expires_at > {now} THEN owner END,
                        CASE WHEN expires_at > {now} THEN expires_at - {now} END,
                        CASE WHEN waiting_until > {now} THEN waiting_until - {now} END
                 FROM {table} WHERE name = $1"
            ),
            &[Name],
        ),
        mark_waiting: Statement::new(
            format!("UPDATE {table} SET waiting_until = {now} + $1 WHERE name = $2"),
            &[LeaseMs, Name],
        ),
        tickets: fair.then(|| Tickets {
            enqueue: Statement::new(
                format!(
                    "INSERT INTO {queue} (name, owner, expires_at) VALUES ($1, $2, {now} + $3)
                     RETURNING id"
                ),
                &[Name, Owner, LeaseMs],
            ),
            heartbeat: Statement::new(
                format!("UPDATE {queue} SET expires_at = {now} + $1 WHERE id = $2"),
                &[LeaseMs, Id],
            ),
            dequeue: Statement::new(format!("DELETE FROM {queue} WHERE id = $1"), &[Id]),
            sweep: Statement::new(
                format!("DELETE FROM {queue} WHERE name = $1 AND expires_at < {now} - 60000"),
                &[Name],
            ),
            ahead: Statement::new(
                format!(
                    "SELECT COUNT(*), MAX(id) FROM {queue} WHERE name = $1 AND id < $2 AND expires_at > {now}"
                ),
                &[Name, Id],
            ),
        }),
        release: Statement::new(release, &[Name, Owner, Token]),
        renew: Statement::new(
            format!(
                "UPDATE {table} SET
                    expires_at = {greatest}(expires_at, {now} + $1),
                    updated_at = {now}
                 WHERE name = $2 AND owner = $3 AND token = $4 AND expires_at > {now}"
            ),
            &[TtlMs, Name, Owner, Token],
        ),
        break_lock: Statement::new(
            format!(
                "UPDATE {table} SET owner = NULL, holds = 0, expires_at = NULL, updated_at = {now}
                 WHERE name = $1 AND owner IS NOT NULL AND expires_at > {now}"
            ),
            &[Name],
        ),
        holder: Statement::new(
            format!(
                "SELECT owner, token FROM {table}
                 WHERE name = $1 AND owner IS NOT NULL AND expires_at > {now}"
            ),
            &[Name],
        ),
        // SQLite has no row locks: a write that changes nothing takes the
        // database's write lock, which other writers wait for.
        keep: Statement::new(
            match dialect {
                Dialect::Sqlite => format!(
                    "UPDATE {table} SET token = token
                     WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > {now}
                     RETURNING token"
                ),
                _ => format!(
                    "SELECT token FROM {table}
                     WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > {now}
                     FOR SHARE"
                ),
            },
            &[Name, Owner, Token],
        ),
        token_of: Statement::new(format!("SELECT token FROM {table} WHERE name = $1"), &[Name]),
        in_tx: InTx {
            take: Statement::new(
                format!(
                    "UPDATE {table} SET token = token + 1, owner = NULL, holds = 0,
                        expires_at = NULL, updated_at = {now}
                     WHERE name = $1 AND (owner IS NULL OR expires_at <= {now})
                     RETURNING token"
                ),
                &[Name],
            ),
            create: Statement::new(
                format!(
                    "INSERT INTO {table} (name, owner, holds, token, expires_at, updated_at)
                     VALUES ($1, NULL, 0, 1, NULL, {now})
                     ON CONFLICT (name) DO NOTHING
                     RETURNING token"
                ),
                &[Name],
            ),
        },
    }
}
