//! Finding locks by `SCAN`: the keys under a name prefix on one server,
//! read back as the locks they belong to. `SCAN` walks the server's whole
//! keyspace in steps (the pattern filters each step, it does not index),
//! so a listing costs time in proportion to every key the server keeps.

use std::collections::BTreeSet;

use omnilock_core::{LockKind, LockName};
use redis::RedisResult;

use crate::conn::Conn;
use crate::scripts::keys::{lock_of_key, scan_pattern};

/// Keys asked for per `SCAN` step.
const STEP: usize = 1000;

/// The locks (name and kind) that have a key on the server `conn` reaches
/// whose name starts with `name_prefix`. A key is no proof of a holder:
/// the caller reads each lock to tell.
pub(crate) async fn locks_under(
    conn: &mut Conn,
    prefix: &str,
    name_prefix: &str,
) -> RedisResult<BTreeSet<(LockName, LockKind)>> {
    let pattern = scan_pattern(prefix, name_prefix);
    let mut found = BTreeSet::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(STEP)
            .query_async(conn)
            .await?;
        found.extend(
            keys.iter()
                .filter_map(|key| lock_of_key(prefix, key))
                .filter(|(name, _)| name.as_str().starts_with(name_prefix)),
        );
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}
