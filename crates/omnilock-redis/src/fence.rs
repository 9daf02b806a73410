//! A fenced Redis key: writes that carry a fencing token, refused when a
//! higher token has written the key (`scripts/lua/fenced_write.lua`).

use std::sync::LazyLock;

use omnilock_core::{Error, ErrorKind, Result};
use redis::Script;
use redis::aio::ConnectionLike;

use crate::conn::map_err;

static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/lua/fenced_write.lua")));

/// A Redis key written only with fencing tokens: each write carries the
/// writer's token, and a write with a token below the highest the key has
/// seen is refused ([`ErrorKind::StaleToken`]), the key unchanged. A token
/// equal to the highest is accepted, so one holder may write many times.
///
/// The token can come from any omnilock store (the lock need not be in
/// this Redis). The highest token is kept in a key beside it, in the same
/// hash slot ([`fence_key`](Self::fence_key)), and checked and written with
/// the key in one script (the write first: one that fails, on a key of
/// another type, leaves the fence as it was), so the sink works on one server, through
/// Sentinel and on a cluster. It fences only the writes that go through
/// it: a plain `SET` of the key is not checked.
///
/// ```no_run
/// # async fn demo(mut conn: redis::aio::MultiplexedConnection, guard: omnilock_core::LockGuard)
/// # -> omnilock_core::Result<()> {
/// use omnilock_redis::FencedKey;
///
/// let report = FencedKey::new("reports:nightly")?;
/// // Err(StaleToken), the key unchanged, when a later holder wrote it.
/// report.set(&mut conn, guard.token(), "42 rows").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedKey {
    key: String,
    fence: String,
}

/// What names a fence key, and no key of the application's.
const FENCE: &str = "omnilock-fence";

/// Where a fenced write reached, for error messages.
const WHERE: &str = "the connection given";

impl FencedKey {
    /// The fenced key `key`. Its fence is `{TAG}:omnilock-fence:KEY`, where
    /// `TAG` is the key's hash tag, or the whole key when it has none: in
    /// the key's slot, and the fence of no other key. `InvalidConfig` for
    /// an empty key, a key with a `}` and no hash tag (no fence key can
    /// share its slot), and a key that names a fence itself
    /// (`omnilock-fence`), which would let its writes move another key's
    /// fence.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if key.is_empty() {
            return Err(Error::config("a fenced key needs a name"));
        }
        if key.contains(FENCE) {
            return Err(Error::config(format!(
                "the key {key:?} names a fence ({FENCE}): choose another name"
            )));
        }
        let tag = match hash_tag(&key) {
            Some(tag) => tag,
            None if !key.contains('}') => key.as_str(),
            None => {
                return Err(Error::config(format!(
                    "the key {key:?} has a `}}` but no hash tag: no fence key can be in its \
                     hash slot (give it a hash tag, as in `{{report}}:2026`)"
                )));
            }
        };
        // Injective: the tag holds no `}`, so the braces tell where it ends,
        // and the key follows whole.
        let fence = format!("{{{tag}}}:{FENCE}:{key}");
        Ok(FencedKey { key, fence })
    }

    /// The key written.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key that keeps the highest token written.
    pub fn fence_key(&self) -> &str {
        &self.fence
    }

    /// `SET key value` with `token`: refused when a higher token wrote.
    pub async fn set<C: ConnectionLike>(
        &self,
        conn: &mut C,
        token: u64,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let mut call = FENCED_WRITE.prepare_invoke();
        call.arg(token).arg("set").arg(value.as_ref());
        self.write(conn, token, call).await
    }

    /// `HSET key field value` with `token`: refused when a higher token
    /// wrote.
    pub async fn hset<C: ConnectionLike>(
        &self,
        conn: &mut C,
        token: u64,
        field: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let mut call = FENCED_WRITE.prepare_invoke();
        call.arg(token)
            .arg("hset")
            .arg(field.as_ref())
            .arg(value.as_ref());
        self.write(conn, token, call).await
    }

    /// `RPUSH key value` with `token`: refused when a higher token wrote. A
    /// list of entries so appended is in the order of their tokens.
    pub async fn rpush<C: ConnectionLike>(
        &self,
        conn: &mut C,
        token: u64,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let mut call = FENCED_WRITE.prepare_invoke();
        call.arg(token).arg("rpush").arg(value.as_ref());
        self.write(conn, token, call).await
    }

    /// Raises the key's fence to `token` without writing: from now on a
    /// write with a lower token is refused. A holder that reads the key
    /// and then writes it claims it first, so that a predecessor that lost
    /// the lock but has not written yet cannot write between the read and
    /// the write. [`ErrorKind::StaleToken`] when a higher token has claimed
    /// or written the key.
    pub async fn claim<C: ConnectionLike>(&self, conn: &mut C, token: u64) -> Result<()> {
        let mut call = FENCED_WRITE.prepare_invoke();
        call.arg(token).arg("claim");
        self.write(conn, token, call).await
    }

    /// `DEL key` with `token` (the fence stays): refused when a higher
    /// token wrote.
    pub async fn del<C: ConnectionLike>(&self, conn: &mut C, token: u64) -> Result<()> {
        let mut call = FENCED_WRITE.prepare_invoke();
        call.arg(token).arg("del");
        self.write(conn, token, call).await
    }

    /// The highest token that has written the key, if any.
    pub async fn highest<C: ConnectionLike>(&self, conn: &mut C) -> Result<Option<u64>> {
        let highest: Option<String> = redis::cmd("GET")
            .arg(&self.fence)
            .query_async(conn)
            .await
            .map_err(|e| map_err(e, WHERE))?;
        highest
            .map(|t| {
                t.parse().map_err(|_| {
                    Error::new(
                        ErrorKind::Backend,
                        format!("the fence key {:?} holds {t:?}, not a token", self.fence),
                    )
                })
            })
            .transpose()
    }

    async fn write<C: ConnectionLike>(
        &self,
        conn: &mut C,
        token: u64,
        mut call: redis::ScriptInvocation<'_>,
    ) -> Result<()> {
        call.key(&self.key).key(&self.fence);
        let (written, highest): (i64, String) = call
            .invoke_async(conn)
            .await
            .map_err(|e| map_err(e, WHERE).with_lock(&self.key))?;
        if written == 1 {
            return Ok(());
        }
        let highest = highest.parse().unwrap_or(u64::MAX);
        Err(Error::stale_token(token, highest).with_lock(&self.key))
    }
}

/// The hash tag of `key`, as Redis Cluster reads it: what lies between the
/// first `{` and the first `}` after it, when not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn each_fence_is_in_its_keys_slot() {
        for key in ["report", "a{tag}b", "{x}", "a{b", "{a}{b}", "ünïcode"] {
            let fenced = FencedKey::new(key).unwrap();
            assert_eq!(
                Slot::for_key(fenced.fence_key()),
                Slot::for_key(key),
                "{key:?} → {:?}",
                fenced.fence_key()
            );
        }
    }

    #[test]
    fn no_two_keys_share_a_fence() {
        let fences: std::collections::HashSet<String> = ["x", "{x}", "{x}x", "x{x}", "{x}:fence"]
            .iter()
            .map(|key| FencedKey::new(*key).unwrap().fence_key().to_string())
            .collect();
        assert_eq!(fences.len(), 5, "{fences:?}");
    }

    #[test]
    fn keys_no_fence_can_share_a_slot_with_are_refused() {
        for key in ["", "a}b", "a{}b", "a{}b{c}", "{x}:omnilock-fence:x"] {
            let err = FencedKey::new(key).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{key:?}");
        }
    }
}
