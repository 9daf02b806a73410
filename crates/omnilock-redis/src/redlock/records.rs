//! Records on Redlock: one key on every node (see `scripts/records.rs`),
//! each node timing its copy out by itself.
//!
//! A record is a "do not run again yet" note, so the nodes are read for
//! safety the other way round from locks: a record is present when any
//! node that answered keeps it, and it is kept as long as the longest time
//! left among them. A write stands when a majority took it; one that
//! reached only a minority fails (`Unavailable`) but may still be seen, and
//! a node that missed a delete may still show the record until its time
//! runs out. Reads and deletes need a majority of the nodes to answer.

use omnilock_core::Record;

use super::*;
use crate::conn::Conn;
use crate::scripts::keys::record_key;
use crate::scripts::records::{del_record, set_record};

impl RedlockStore {
    /// Runs `call` on every node side by side, each within the response
    /// timeout: per node that answered, its answer; `Unavailable` when
    /// fewer than a majority of the nodes named answered, saying `what`
    /// could not be done.
    async fn on_every_node<T, F>(&self, what: &str, call: impl Fn(Conn) -> F) -> Result<Vec<T>>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let inner = &self.inner;
        let timeout = inner.options.response_timeout;
        let calls = inner.nodes.iter().map(|node| {
            let call = call(node.conn.clone());
            async move {
                match tokio::time::timeout(timeout, call).await {
                    Ok(Ok(answer)) => Ok(answer),
                    Ok(Err(e)) => Err(node.err(e).message().to_string()),
                    Err(_) => Err(format!(
                        "Redis at {} did not answer within {timeout:?}",
                        node.address
                    )),
                }
            }
        });
        let (mut answers, mut failures) = (Vec::new(), Vec::new());
        for answer in join_all(calls).await {
            match answer {
                Ok(answer) => answers.push(answer),
                Err(why) => failures.push(why),
            }
        }
        if answers.len() < self.quorum() {
            return Err(Error::unavailable(format!(
                "only {} of {} Redlock nodes answered (a majority of {} is needed to {what}): {}",
                answers.len(),
                inner.node_count,
                self.quorum(),
                failures.join("; ")
            )));
        }
        Ok(answers)
    }

    fn record_key(&self, name: &LockName) -> String {
        record_key(&self.inner.options.prefix, name.as_str())
    }

    /// Writes the record `name` on every node for each to keep `keep`;
    /// done when a majority took it
    /// ([`omnilock_core::Backend::write_record`]).
    pub(super) async fn set_record(
        &self,
        name: &LockName,
        value: &str,
        keep: Duration,
    ) -> Result<()> {
        let key = self.record_key(name);
        let set = &set_record(&key, value, keep);
        self.on_every_node("write a record", |mut conn| async move {
            set.query_async::<()>(&mut conn).await
        })
        .await
        .map(drop)
    }

    /// The record `name` if any node that answered keeps it, with the
    /// longest time left among them (and that node's value)
    /// ([`omnilock_core::Backend::read_record`]).
    pub(super) async fn get_record(&self, name: &LockName) -> Result<Option<Record>> {
        let key = &self.record_key(name);
        let scripts = &self.inner.scripts;
        let found = self
            .on_every_node("read a record", |mut conn| async move {
                scripts.read_record(&mut conn, key).await
            })
            .await?;
        Ok(found.into_iter().flatten().max_by_key(|record| {
            // A copy without a time left (not written by omnilock) counts
            // as the longest.
            record.left.unwrap_or(Duration::MAX)
        }))
    }

    /// Drops the record `name` on every node; whether any had it
    /// ([`omnilock_core::Backend::delete_record`]).
    pub(super) async fn del_record(&self, name: &LockName) -> Result<bool> {
        let key = self.record_key(name);
        let del = &del_record(&key);
        let deleted = self
            .on_every_node("delete a record", |mut conn| async move {
                del.query_async::<u64>(&mut conn).await
            })
            .await?;
        Ok(deleted.into_iter().any(|n| n > 0))
    }
}
