//! Records ([`Backend::write_record`](omnilock_core::Backend::write_record)):
//! the persistent node `<prefix>/%records/<encoded name>`, whose data is
//! the keep in milliseconds, a newline, and the value. No lock's node is
//! ever `%records` (an encoded name has every `%` followed by two
//! hexadecimal digits), so neither [`ZkStore::list_locks`] nor a lock's
//! container takes it for a lock.
//!
//! A persistent node outlives its writer's session, and ZooKeeper does not
//! time it out: the node's mtime (the leader's clock when the record was
//! written) plus its keep is compared with the leader's clock now, read as
//! the mtime that a write of the (empty) `%records` node itself gets. The
//! clients' clocks play no part. An expired record is no record; a read
//! that finds one deletes it.

use std::time::Duration;

use omnilock_core::{Error, ErrorKind, LockName, Record, Result};
use zookeeper_client::{CreateMode, Stat};

use crate::conn::{acls, call, call_raw, classify};
use crate::session::Session;
use crate::store::{ZkStore, encode_name};

/// The node under the store's prefix that holds the records.
const RECORDS: &str = "%records";

/// Tries of a write or delete whose record another client changed at the
/// same time, before giving up.
const ATTEMPTS: usize = 5;

/// A record's node, read.
struct Stored {
    value: String,
    keep: Duration,
    stat: Stat,
}

impl Stored {
    /// How long the record is kept yet when the leader's clock reads
    /// `now` (milliseconds since the epoch); `None` once its time is up.
    /// Never more than its keep, even if it was rewritten after `now`.
    fn left(&self, now: i64) -> Option<Duration> {
        let keep = i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX);
        let left = self.stat.mtime.saturating_add(keep).saturating_sub(now);
        u64::try_from(left)
            .ok()
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(ms).min(self.keep))
    }
}

impl ZkStore {
    /// `<prefix>/%records`.
    fn records_root(&self) -> String {
        format!("{}/{RECORDS}", self.ctx().options.prefix)
    }

    /// The node of the record `name`.
    fn record_path(&self, name: &LockName) -> String {
        format!("{}/{}", self.records_root(), encode_name(name.as_str()))
    }

    /// Writes the record `name` ([`omnilock_core::Backend::write_record`]):
    /// sets the node's data, or creates it (and `%records`) if there is
    /// none. Either way its mtime becomes the leader's clock now.
    pub(crate) async fn put_record(
        &self,
        name: &LockName,
        value: &str,
        keep: Duration,
    ) -> Result<()> {
        let session = self.any_session().await?;
        let client = &session.client;
        let path = self.record_path(name);
        let data = format!("{}\n{value}", keep.as_millis());
        let persistent = CreateMode::Persistent.with_acls(acls(self.ctx()));
        for _ in 0..ATTEMPTS {
            match call_raw(self.ctx(), client.set_data(&path, data.as_bytes(), None)).await? {
                Ok(_) => return Ok(()),
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(classify(e, &self.ctx().shown)),
            }
            match call_raw(
                self.ctx(),
                client.create(&path, data.as_bytes(), &persistent),
            )
            .await?
            {
                Ok(_) => return Ok(()),
                // Another writer created it first: set it over.
                Err(zookeeper_client::Error::NodeExists) => {}
                // The first record under this prefix.
                Err(zookeeper_client::Error::NoNode) => {
                    let root = self.records_root();
                    call(self.ctx(), client.mkdir(&root, &persistent)).await?;
                }
                Err(e) => return Err(classify(e, &self.ctx().shown)),
            }
        }
        Err(busy())
    }

    /// The record `name` if its time is not up
    /// ([`omnilock_core::Backend::read_record`]). The clock is read first:
    /// that write brings this session's server up to date, so the read
    /// that follows sees every record written before.
    pub(crate) async fn get_record(&self, name: &LockName) -> Result<Option<Record>> {
        let session = self.any_session().await?;
        let Some(now) = self.leader_now(&session).await? else {
            return Ok(None); // no record was ever written here
        };
        let path = self.record_path(name);
        let Some(stored) = self.stored(&session, &path).await? else {
            return Ok(None);
        };
        match stored.left(now) {
            Some(left) => Ok(Some(Record::new(stored.value, Some(left)))),
            None => {
                // Expired: drop it now, unless it was written again since.
                let version = Some(stored.stat.version);
                let _ = call_raw(self.ctx(), session.client.delete(&path, version)).await;
                Ok(None)
            }
        }
    }

    /// Deletes the record `name`; whether its time was not up
    /// ([`omnilock_core::Backend::delete_record`]).
    pub(crate) async fn drop_record(&self, name: &LockName) -> Result<bool> {
        let session = self.any_session().await?;
        let path = self.record_path(name);
        for _ in 0..ATTEMPTS {
            let Some(now) = self.leader_now(&session).await? else {
                return Ok(false);
            };
            let Some(stored) = self.stored(&session, &path).await? else {
                return Ok(false);
            };
            let version = Some(stored.stat.version);
            match call_raw(self.ctx(), session.client.delete(&path, version)).await? {
                Ok(()) => return Ok(stored.left(now).is_some()),
                Err(zookeeper_client::Error::NoNode) => return Ok(false),
                // Written again in between: judge the new one.
                Err(zookeeper_client::Error::BadVersion) => {}
                Err(e) => return Err(classify(e, &self.ctx().shown)),
            }
        }
        Err(busy())
    }

    /// The leader's clock now, in milliseconds since the epoch: the mtime
    /// of a write of `%records`; `None` if there is no `%records` (nor any
    /// record).
    async fn leader_now(&self, session: &Session) -> Result<Option<i64>> {
        let root = self.records_root();
        match call_raw(self.ctx(), session.client.set_data(&root, &[], None)).await? {
            Ok(stat) => Ok(Some(stat.mtime)),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(e) => Err(classify(e, &self.ctx().shown)),
        }
    }

    /// The record node at `path`, if there is one.
    async fn stored(&self, session: &Session, path: &str) -> Result<Option<Stored>> {
        let (data, stat) = match call_raw(self.ctx(), session.client.get_data(path)).await? {
            Ok(read) => read,
            Err(zookeeper_client::Error::NoNode) => return Ok(None),
            Err(e) => return Err(classify(e, &self.ctx().shown)),
        };
        let text = String::from_utf8_lossy(&data);
        let parsed = text
            .split_once('\n')
            .and_then(|(keep, value)| Some((keep.parse::<u64>().ok()?, value)));
        let Some((keep_ms, value)) = parsed else {
            return Err(Error::new(
                ErrorKind::Backend,
                format!("the ZooKeeper node {path} is not an omnilock record"),
            ));
        };
        Ok(Some(Stored {
            value: value.to_string(),
            keep: Duration::from_millis(keep_ms),
            stat,
        }))
    }
}

/// Other clients kept changing the record under this call.
fn busy() -> Error {
    Error::unavailable("the record kept changing under this call; try again").with_retryable(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(mtime: i64, keep_ms: u64) -> Stored {
        Stored {
            value: "v".to_string(),
            keep: Duration::from_millis(keep_ms),
            stat: Stat {
                czxid: 1,
                mzxid: 1,
                pzxid: 1,
                ctime: mtime,
                mtime,
                version: 0,
                cversion: 0,
                aversion: 0,
                ephemeral_owner: 0,
                data_length: 0,
                num_children: 0,
            },
        }
    }

    #[test]
    fn time_left_is_judged_on_the_leaders_clock() {
        let record = stored(10_000, 1_000);
        assert_eq!(record.left(10_400), Some(Duration::from_millis(600)));
        assert_eq!(record.left(11_000), None, "over at mtime + keep");
        assert_eq!(record.left(20_000), None);
        // Rewritten after the clock was read: never more than its keep.
        assert_eq!(record.left(9_000), Some(Duration::from_millis(1_000)));
    }

    #[test]
    fn no_lock_name_is_the_records_node() {
        assert_eq!(ZkStore::lock_name(RECORDS), None);
        for name in [RECORDS, "%rec", "%", "records"] {
            assert_ne!(encode_name(name), RECORDS);
        }
    }
}
