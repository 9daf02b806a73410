//! The database's name for a lock's own database lock: advisory mode's
//! lock, and table mode's wake-up lock on MySQL/MariaDB (`table/bells.rs`).

/// The database's name for one lock: derived from the table and the lock
/// name, so that two tables' locks of one name stay apart. FNV-1a, 64 bits,
/// over `table`, a zero byte and `name`: stable across versions and easy to
/// compute in any language (for an operator looking at `pg_locks` or
/// `performance_schema.metadata_locks`). Two names with one key would only
/// exclude each other, never share a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key(u64);

impl Key {
    pub(crate) fn new(table: &str, name: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in table.bytes().chain([0]).chain(name.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        Key(hash)
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    /// MySQL/MariaDB's lock name (at most 64 characters; hex, so that its
    /// case-insensitive comparison changes nothing).
    pub(crate) fn mysql(self) -> String {
        format!("omnilock:{:016x}", self.0)
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    /// MySQL/MariaDB's name for table mode's wake-up lock ("bell") of the
    /// lock: apart from advisory mode's name, which a table-mode holder
    /// must never take.
    pub(crate) fn mysql_bell(self) -> String {
        format!("omnilock-bell:{:016x}", self.0)
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    /// MySQL/MariaDB's name for the wake-up lock of fair mode's ticket
    /// `id` in the table whose key (with an empty name) this is.
    pub(crate) fn mysql_ticket_bell(self, id: i64) -> String {
        format!("omnilock-line:{:016x}:{id}", self.0)
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    /// PostgreSQL's `bigint` key.
    pub(crate) fn postgres(self) -> i64 {
        self.0 as i64
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    /// PostgreSQL shows a `bigint` key in `pg_locks` as `classid` (high 32
    /// bits) and `objid` (low 32 bits).
    pub(crate) fn postgres_halves(self) -> (i64, i64) {
        ((self.0 >> 32) as i64, (self.0 & 0xffff_ffff) as i64)
    }
}
