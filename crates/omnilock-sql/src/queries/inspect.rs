//! The statements of an operator's reads (see `table/inspect.rs`): a
//! mutex's holder and fair line, a semaphore's or read-write lock's
//! entries, and the held names in a range of names.
//!
//! Each is written once with `?` placeholders; PostgreSQL and SQLite get
//! one number per distinct value (a value used twice binds once), MySQL
//! its positional list.

use super::counted::{clock, counted_names};
use super::{Param, Statement, ident, queue_names};
use crate::config::Dialect;
use Param::*;

/// The kind [`Inspect::held`] reads for a lock row, a mutex (an entry's
/// is its family).
pub(crate) const MUTEX_KIND: &str = "mutex";

/// An operator's reads of one store's tables.
#[derive(Debug, Clone)]
pub(crate) struct Inspect {
    /// `(place, owner, token, lease left in ms)` of the mutex: its live
    /// holder at place 0, then (fair mode) each live ticket of its line,
    /// place and token its id, lease left NULL. Binds name.
    pub mutex: Statement,
    /// `(id, owner, weight, capacity, holding, lease left in ms)` of each
    /// live entry of a semaphore or read-write lock, in id order (the
    /// order of grant). Binds family, name.
    pub entries: Statement,
    /// `(kind, name)` of the locks with a live holder in a range of names:
    /// [`MUTEX_KIND`] for a lock row, else the entries' family. Bounded
    /// (`[start, end)`) and unbounded (`[start, ...)`), by
    /// [`Inspect::range`].
    pub held: [Statement; 2],
    /// The names of the lock rows that record an owner, held or not, in a
    /// range of names: advisory mode's candidates (its holds are the
    /// database's, not the row's). As [`Inspect::held`].
    pub owned: [Statement; 2],
}

impl Inspect {
    pub(crate) fn new(dialect: Dialect, table_name: &str, fair: bool) -> Self {
        let (now, int, _) = clock(dialect);
        let table = ident(dialect, table_name);
        let queue = ident(dialect, &queue_names(table_name).0);
        let entries = ident(dialect, &counted_names(table_name)[0]);
        // MySQL/MariaDB keep names and owners as bytes: read back as text.
        let text = |column: &str| match dialect {
            Dialect::MySql => format!("CAST({column} AS CHAR)"),
            _ => column.to_string(),
        };
        let (owner, name, family) = (text("owner"), text("name"), text("family"));
        let holder = format!(
            "SELECT CAST(0 AS {int}) AS place, {owner}, token, expires_at - {now} FROM {table}
             WHERE name = ? AND owner IS NOT NULL AND expires_at > {now}"
        );
        let mutex = if fair {
            format!(
                "{holder}
                 UNION ALL
                 SELECT id, {owner}, id, NULL FROM {queue}
                 WHERE name = ? AND expires_at > {now}
                 ORDER BY 1"
            )
        } else {
            holder
        };
        let mutex_params: &[Param] = if fair { &[Name, Name] } else { &[Name] };
        let held = |bounded: bool| {
            let range = range(dialect, bounded);
            let sql = format!(
                "SELECT '{MUTEX_KIND}', {name} FROM {table}
                 WHERE owner IS NOT NULL AND expires_at > {now} AND {range}
                 UNION
                 SELECT {family}, {name} FROM {entries}
                 WHERE holding = 1 AND expires_at > {now} AND {range}"
            );
            let params: &[Param] = if bounded {
                &[RangeStart, RangeEnd, RangeStart, RangeEnd]
            } else {
                &[RangeStart, RangeStart]
            };
            numbered(dialect, &sql, params)
        };
        let owned = |bounded: bool| {
            let range = range(dialect, bounded);
            let sql = format!("SELECT {name} FROM {table} WHERE owner IS NOT NULL AND {range}");
            let params: &[Param] = if bounded {
                &[RangeStart, RangeEnd]
            } else {
                &[RangeStart]
            };
            numbered(dialect, &sql, params)
        };
        Inspect {
            mutex: numbered(dialect, &mutex, mutex_params),
            entries: numbered(
                dialect,
                &format!(
                    "SELECT id, {owner}, weight, capacity, holding, expires_at - {now}
                     FROM {entries}
                     WHERE family = ? AND name = ? AND expires_at > {now}
                     ORDER BY id"
                ),
                &[Family, Name],
            ),
            held: [held(true), held(false)],
            owned: [owned(true), owned(false)],
        }
    }

    /// Of a pair of range statements, the one for `range`: bounded when it
    /// has an end.
    pub(crate) fn range<'a>(pair: &'a [Statement; 2], end: Option<&str>) -> &'a Statement {
        if end.is_some() { &pair[0] } else { &pair[1] }
    }

    #[cfg(test)]
    pub(crate) fn statements(&self) -> Vec<&Statement> {
        let mut all = vec![&self.mutex, &self.entries];
        all.extend(self.held.iter().chain(&self.owned));
        all
    }
}

/// `name` from the range's start, and before its end if `bounded`, in
/// the order of the names' code points (bytes of UTF-8). PostgreSQL
/// compares under the `C` collation: the column's own may order names
/// otherwise.
fn range(dialect: Dialect, bounded: bool) -> String {
    let name = match dialect {
        Dialect::Postgres => "name COLLATE \"C\"",
        _ => "name",
    };
    if bounded {
        format!("{name} >= ? AND {name} < ?")
    } else {
        format!("{name} >= ?")
    }
}

/// `sql`'s `?` placeholders bound to `params` in order: MySQL's as they
/// are; PostgreSQL's and SQLite's numbered, one number per distinct value.
fn numbered(dialect: Dialect, sql: &str, params: &[Param]) -> Statement {
    if dialect == Dialect::MySql {
        return Statement::new(sql.to_string(), params);
    }
    let mut distinct: Vec<Param> = Vec::new();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = params.iter();
    for c in sql.chars() {
        if c != '?' {
            out.push(c);
            continue;
        }
        let param = *next.next().expect("a value for every placeholder");
        let at = distinct
            .iter()
            .position(|p| *p == param)
            .unwrap_or_else(|| {
                distinct.push(param);
                distinct.len() - 1
            });
        out.push_str(&format!("${}", at + 1));
    }
    assert!(next.next().is_none(), "a placeholder for every value");
    Statement::new(out, &distinct)
}

/// The first string past every name that starts with `prefix`, in the
/// order of code points: `prefix` with its last character that has a
/// successor replaced by that successor, and what follows it dropped.
/// `None` when every name from `prefix` on starts with it (an empty
/// prefix, or one of nothing but U+10FFFF).
///
/// ```text
/// "jobs/" -> "jobs0", "a\u{10FFFF}" -> "b", "" -> None
/// ```
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(c as u32 + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("jobs/").as_deref(), Some("jobs0"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_end("ü").as_deref(), Some("ý"));
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("\u{10FFFF}"), None);
    }

    /// Every name that starts with the prefix sorts in `[prefix, end)`, by
    /// bytes as the databases compare them.
    #[test]
    fn names_under_a_prefix_sort_before_its_end() {
        for prefix in ["a", "list/", "x\u{10FFFF}", "ü%_*"] {
            let end = prefix_end(prefix).unwrap();
            for tail in ["", "\u{10FFFF}\u{10FFFF}", "zz", "\u{0}"] {
                let name = format!("{prefix}{tail}");
                assert!(name.as_bytes() >= prefix.as_bytes() && name.as_bytes() < end.as_bytes());
            }
        }
    }

    #[test]
    fn repeated_values_bind_once_where_numbered() {
        let s = numbered(
            Dialect::Postgres,
            "a = ? AND b = ? OR a = ?",
            &[Name, Id, Name],
        );
        assert_eq!(s.sql.as_str(), "a = $1 AND b = $2 OR a = $1");
        assert_eq!(s.params, [Name, Id]);
        let s = numbered(
            Dialect::MySql,
            "a = ? AND b = ? OR a = ?",
            &[Name, Id, Name],
        );
        assert_eq!(s.params, [Name, Id, Name]);
    }
}
