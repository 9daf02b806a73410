//! Records on one master (one server, the cluster's master of the record's
//! slot, or Sentinel's master): one key each, beside the lock of the same
//! name (see `scripts/records.rs`). With `?wait_replicas=N`, a write is
//! confirmed by `WAIT` as a grant is.

use std::time::Duration;

use omnilock_core::{LockName, Record, Result};

use super::RedisStore;
use crate::scripts::keys::record_key;
use crate::scripts::records::{del_record, set_record};

impl RedisStore {
    fn record_key(&self, name: &LockName) -> String {
        record_key(&self.inner.options.prefix, name.as_str())
    }

    /// Writes the record `name` for the server to keep `keep`
    /// ([`omnilock_core::Backend::write_record`]).
    pub(super) async fn set_record(
        &self,
        name: &LockName,
        value: &str,
        keep: Duration,
    ) -> Result<()> {
        let inner = &self.inner;
        let key = self.record_key(name);
        let mut conn = self.write_conn(&key).await;
        let set = set_record(&key, value, keep);
        let Some(wait) = inner.options.wait_replicas else {
            let () = set
                .query_async(&mut conn)
                .await
                .map_err(|e| inner.node.err(e))?;
            return Ok(());
        };
        // `WAIT` counts the writes of its own connection: one pipeline.
        let mut confirm = redis::cmd("WAIT");
        confirm
            .arg(wait.replicas)
            .arg(wait.timeout.as_millis() as u64);
        let mut pipe = redis::pipe();
        pipe.add_command(set).add_command(confirm);
        let ((), acknowledged): ((), i64) = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| inner.node.err(e))?;
        self.check_confirmed(Some(u32::try_from(acknowledged).unwrap_or(0)))
    }

    /// The record `name`, with the time the server keeps it yet
    /// ([`omnilock_core::Backend::read_record`]).
    pub(super) async fn get_record(&self, name: &LockName) -> Result<Option<Record>> {
        let inner = &self.inner;
        let key = self.record_key(name);
        let mut conn = inner.node.conn_for(&key);
        inner
            .scripts
            .read_record(&mut conn, &key)
            .await
            .map_err(|e| inner.node.err(e))
    }

    /// Drops the record `name`; whether there was one
    /// ([`omnilock_core::Backend::delete_record`]).
    pub(super) async fn del_record(&self, name: &LockName) -> Result<bool> {
        let inner = &self.inner;
        let key = self.record_key(name);
        let mut conn = inner.node.conn_for(&key);
        let deleted: u64 = del_record(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| inner.node.err(e))?;
        Ok(deleted > 0)
    }
}
