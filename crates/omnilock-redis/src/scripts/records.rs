//! Records (`Backend::write_record`): short notes kept apart from the locks,
//! one plain string key each ([`record_key`](super::keys::record_key)),
//! timed out by the server (`PX`), never by the writer's clock. Written
//! with `SET key value PX ms` (replacing any earlier record), dropped with
//! `DEL`, read with `read_record.lua`: the value and the time left in one
//! round trip, from one moment.

use std::time::Duration;

use omnilock_core::Record;
use redis::{Cmd, RedisResult};

use super::{Scripts, answer, evalsha, ms};

/// `SET key value PX keep`: writes the record, replacing any earlier one.
pub(crate) fn set_record(key: &str, value: &str, keep: Duration) -> Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(value).arg("PX").arg(ms(keep).max(1));
    set
}

/// `DEL key`: drops the record; answers how many keys went (0 or 1).
pub(crate) fn del_record(key: &str) -> Cmd {
    let mut del = redis::cmd("DEL");
    del.arg(key);
    del
}

impl Scripts {
    /// `read_record.lua`. KEYS: the record. The record, if the server
    /// still keeps it, with its time left (`None` for a key without one,
    /// never written so by omnilock).
    pub(crate) async fn read_record<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
    ) -> RedisResult<Option<Record>> {
        let eval = evalsha(&self.read_record, &[key]);
        let (value, pttl): (Vec<u8>, i64) = answer(conn, &self.read_record, eval).await?;
        if pttl == -2 {
            return Ok(None);
        }
        let left = u64::try_from(pttl)
            .ok()
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis);
        Ok(Some(Record::new(String::from_utf8_lossy(&value), left)))
    }
}
