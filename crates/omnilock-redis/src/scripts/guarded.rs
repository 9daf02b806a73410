//! A guarded write (`guarded_write.lua`): an application's writes, applied
//! only while a mutex's hold is the one given.

use super::{Scripts, answer, evalsha};

/// One write of a guarded write, on the key at `key` (an index into the
/// keys written).
#[derive(Clone)]
pub(crate) enum Write {
    Set {
        key: usize,
        value: Vec<u8>,
    },
    HSet {
        key: usize,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    RPush {
        key: usize,
        value: Vec<u8>,
    },
    Del {
        key: usize,
    },
}

/// The answer of a guarded write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Guarded {
    /// Written.
    Written,
    /// Nobody holds the lock: nothing written.
    Free,
    /// Another hold has the lock, with this token: nothing written.
    HeldBy(u64),
    /// A write meets a key of another type (why): nothing written.
    WrongType(String),
}

impl Scripts {
    /// `guarded_write.lua`. KEYS: the lock, then `keys`. ARGV: owner,
    /// token, then each write as the script reads it.
    pub(crate) async fn guarded_write<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
        lock: &str,
        keys: &[String],
        owner: &str,
        token: u64,
        writes: &[Write],
    ) -> redis::RedisResult<Guarded> {
        let mut all = Vec::with_capacity(keys.len() + 1);
        all.push(lock);
        all.extend(keys.iter().map(String::as_str));
        let mut eval = evalsha(&self.guarded_write, &all);
        eval.arg(owner).arg(token);
        for write in writes {
            // The script's key indices count the lock as key 1.
            match write {
                Write::Set { key, value } => eval.arg("set").arg(key + 2).arg(value),
                Write::HSet { key, field, value } => {
                    eval.arg("hset").arg(key + 2).arg(field).arg(value)
                }
                Write::RPush { key, value } => eval.arg("rpush").arg(key + 2).arg(value),
                Write::Del { key } => eval.arg("del").arg(key + 2),
            };
        }
        let (status, token): (i64, String) = answer(conn, &self.guarded_write, eval).await?;
        Ok(match status {
            1 => Guarded::Written,
            0 => Guarded::Free,
            -2 => Guarded::WrongType(token),
            _ => Guarded::HeldBy(token.parse().unwrap_or(0)),
        })
    }
}
