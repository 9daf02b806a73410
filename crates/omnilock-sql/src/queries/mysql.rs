//! MySQL/MariaDB: no conditional upsert and no `RETURNING`, so a lock is
//! taken by a single-row `UPDATE` (the token comes back through
//! `LAST_INSERT_ID(expr)`) or, for a name never used, by `INSERT IGNORE`.
//! Placeholders are positional `?`: each statement's list names the value
//! of every `?` in the order they appear.

use super::{
    Acquire, Counted, InTx, Inspect, Param, Queries, Records, RenewBatch, Statement, Tickets,
    counted, ident, queue_names, records, text_type,
};
use crate::config::Dialect;
use Param::*;

/// The database's clock, in milliseconds since the Unix epoch.
pub(super) const NOW: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

pub(super) fn queries(table_name: &str, fair: bool) -> Queries {
    let now = NOW;
    let text = text_type(Dialect::MySql);
    let table = ident(Dialect::MySql, table_name);
    let (queue, index) = queue_names(table_name);
    let (queue, index) = (ident(Dialect::MySql, &queue), ident(Dialect::MySql, &index));

    let mut create = vec![format!(
        "CREATE TABLE IF NOT EXISTS {table} (
            name {text} NOT NULL PRIMARY KEY,
            owner {text} NULL,
            holds BIGINT NOT NULL DEFAULT 0,
            token BIGINT NOT NULL DEFAULT 0,
            expires_at BIGINT NULL,
            updated_at BIGINT NOT NULL,
            waiting_until BIGINT NULL
        )"
    )];
    create.extend(counted::create(Dialect::MySql, table_name));
    create.push(records::create(Dialect::MySql, table_name));
    if fair {
        create.push(format!(
            "CREATE TABLE IF NOT EXISTS {queue} (
                id BIGINT AUTO_INCREMENT PRIMARY KEY,
                name {text} NOT NULL, owner {text} NOT NULL, expires_at BIGINT NOT NULL,
                KEY {index} (name, id))"
        ));
    }

    // Fair mode: a free lock goes only to the caller whose ticket is the
    // oldest live one (try-acquire passes the largest id, so any live
    // ticket stops it).
    let ahead = if fair {
        format!(
            " AND NOT EXISTS (SELECT 1 FROM {queue} WHERE {queue}.name = ?
                AND {queue}.id < ? AND {queue}.expires_at > {now})"
        )
    } else {
        String::new()
    };
    // MySQL evaluates SET assignments left to right, each seeing the ones
    // before: every condition reads `owner` and `expires_at`, so they are
    // assigned last, in that order.
    let update = format!(
        "UPDATE {table} SET
            holds = IF(owner = ? AND expires_at > {now}, holds + 1, 1),
            token = LAST_INSERT_ID(IF(owner = ? AND expires_at > {now}, token, token + 1)),
            expires_at = IF(owner = ? AND expires_at > {now},
                GREATEST(expires_at, {now} + ?), {now} + ?),
            owner = ?,
            updated_at = {now}
         WHERE name = ?
           AND (((owner IS NULL OR expires_at <= {now}){ahead})
                OR (owner = ? AND ? = 1))"
    );
    let mut update_params = vec![Owner, Owner, Owner, TtlMs, TtlMs, Owner, Name];
    if fair {
        update_params.extend([Name, Ticket]);
    }
    update_params.extend([Owner, Reentrant]);

    Queries {
        begin: counted::begin(Dialect::MySql),
        renew_batch: RenewBatch::new(Dialect::MySql, table_name),
        counted: Counted::new(Dialect::MySql, table_name, false),
        inspect: Inspect::new(Dialect::MySql, table_name, fair),
        records: Records::new(Dialect::MySql, table_name),
        create: create
            .into_iter()
            .map(|s| Statement::new(s, &[]).sql)
            .collect(),
        acquire: Acquire::UpdateThenInsert {
            update: Statement::new(update, &update_params),
            insert: Statement::new(
                format!(
                    "INSERT IGNORE INTO {table} (name, owner, holds, token, expires_at, updated_at)
                     VALUES (?, ?, 1, 1, {now} + ?, {now})"
                ),
                &[Name, Owner, TtlMs],
            ),
        },
        probe: Statement::new(
            format!(
                "SELECT CASE WHEN expires_at > {now} THEN CAST(owner AS CHAR) END,
                        CASE WHEN expires_at > {now} THEN expires_at - {now} END,
                        CASE WHEN waiting_until > {now} THEN waiting_until - {now} END
                 FROM {table} WHERE name = ?"
            ),
            &[Name],
        ),
        mark_waiting: Statement::new(
            format!("UPDATE {table} SET waiting_until = {now} + ? WHERE name = ?"),
            &[LeaseMs, Name],
        ),
        tickets: fair.then(|| Tickets {
            enqueue: Statement::new(
                format!("INSERT INTO {queue} (name, owner, expires_at) VALUES (?, ?, {now} + ?)"),
                &[Name, Owner, LeaseMs],
            ),
            heartbeat: Statement::new(
                format!("UPDATE {queue} SET expires_at = {now} + ? WHERE id = ?"),
                &[LeaseMs, Id],
            ),
            dequeue: Statement::new(format!("DELETE FROM {queue} WHERE id = ?"), &[Id]),
            sweep: Statement::new(
                format!("DELETE FROM {queue} WHERE name = ? AND expires_at < {now} - 60000"),
                &[Name],
            ),
            ahead: Statement::new(
                format!(
                    "SELECT COUNT(*), MAX(id) FROM {queue} WHERE name = ? AND id < ? AND expires_at > {now}"
                ),
                &[Name, Id],
            ),
        }),
        // `holds` is assigned last (SET runs left to right): decrementing it
        // first made the CASEs see the new count and free a lock still held
        // twice (found by `reentrancy_across_clients`).
        release: Statement::new(
            format!(
                "UPDATE {table} SET
                    owner = CASE WHEN holds <= 1 THEN NULL ELSE owner END,
                    expires_at = CASE WHEN holds <= 1 THEN NULL ELSE expires_at END,
                    updated_at = {now},
                    holds = holds - 1
                 WHERE name = ? AND owner = ? AND token = ? AND expires_at > {now}"
            ),
            &[Name, Owner, Token],
        ),
        renew: Statement::new(
            format!(
                "UPDATE {table} SET
                    expires_at = GREATEST(expires_at, {now} + ?),
                    updated_at = {now}
                 WHERE name = ? AND owner = ? AND token = ? AND expires_at > {now}"
            ),
            &[TtlMs, Name, Owner, Token],
        ),
        break_lock: Statement::new(
            format!(
                "UPDATE {table} SET owner = NULL, holds = 0, expires_at = NULL, updated_at = {now}
                 WHERE name = ? AND owner IS NOT NULL AND expires_at > {now}"
            ),
            &[Name],
        ),
        holder: Statement::new(
            format!(
                "SELECT CAST(owner AS CHAR), token FROM {table}
                 WHERE name = ? AND owner IS NOT NULL AND expires_at > {now}"
            ),
            &[Name],
        ),
        // `LOCK IN SHARE MODE` rather than `FOR SHARE`: MariaDB and MySQL
        // 5.7 know only the older spelling.
        keep: Statement::new(
            format!(
                "SELECT token FROM {table}
                 WHERE name = ? AND owner = ? AND token = ? AND expires_at > {now}
                 LOCK IN SHARE MODE"
            ),
            &[Name, Owner, Token],
        ),
        token_of: Statement::new(format!("SELECT token FROM {table} WHERE name = ?"), &[Name]),
        in_tx: InTx {
            take: Statement::new(
                format!(
                    "UPDATE {table} SET token = LAST_INSERT_ID(token + 1), owner = NULL,
                        holds = 0, expires_at = NULL, updated_at = {now}
                     WHERE name = ? AND (owner IS NULL OR expires_at <= {now})"
                ),
                &[Name],
            ),
            create: Statement::new(
                format!(
                    "INSERT IGNORE INTO {table} (name, owner, holds, token, expires_at, updated_at)
                     VALUES (?, NULL, 0, 1, NULL, {now})"
                ),
                &[Name],
            ),
        },
    }
}
