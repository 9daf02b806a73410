//! Inspection on Redlock: every node is read (one read-only script each,
//! side by side), and the majority view is reported. The holder is the
//! owner a majority of all the nodes named agree on; its lease left is as
//! long as a majority still has it; the waiters are those in line on a
//! majority, in ticket order (the line keeps entries, not owners). No time
//! of acquisition is kept on the nodes (the grant's id is the acquiring
//! client's clock, not theirs), so `since` is `None`.
//!
//! The answer is never exact: the nodes are independent, read a moment
//! apart, and may disagree (a node restarted empty, a grant that reached
//! only some). Listing scans every node for lock keys and keeps the names
//! a majority holds.

use std::collections::{BTreeSet, HashMap};

use futures_util::stream::{self, StreamExt, TryStreamExt};
use omnilock_core::{Held, Inspection, Listed, LockKind, Owner, Side, Waiting};

use super::round::held_grant;
use super::*;
use crate::scripts::inspect::NodeView;

/// How many locks found by a listing are read at once.
const READS_AT_ONCE: usize = 32;

impl RedlockStore {
    /// The mutex `name` as the majority of the nodes sees it.
    pub(super) async fn inspect_lock(&self, name: &LockName) -> Result<Inspection> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, name);
        let reads = inner.nodes.iter().map(|node| {
            let mut conn = node.conn.clone();
            let keys = &keys;
            async move {
                let read = inner.scripts.redlock_inspect(&mut conn, keys);
                match tokio::time::timeout(inner.options.response_timeout, read).await {
                    Ok(Ok(view)) => Ok(view),
                    Ok(Err(e)) => Err(node.err(e).message().to_string()),
                    Err(_) => Err(format!(
                        "cannot reach Redis at {} (timed out)",
                        node.address
                    )),
                }
            }
        });
        let mut views = Vec::new();
        let mut failures = Vec::new();
        for read in join_all(reads).await {
            match read {
                Ok(view) => views.push(view),
                Err(why) => failures.push(why),
            }
        }
        if views.len() < self.quorum() {
            return Err(Error::unavailable(format!(
                "only {} of {} Redlock nodes answered (a majority of {} is needed to tell \
                 who holds the lock): {}",
                views.len(),
                inner.node_count,
                self.quorum(),
                failures.join("; ")
            )));
        }
        majority_view(name, &views, self.quorum())
    }

    /// The names a majority of the nodes holds, under `prefix`: each node
    /// scanned for lock keys, then each name found read as
    /// [`RedlockStore::inspect_lock`] reads it. Enough nodes must answer the
    /// scan that every majority includes one of them.
    pub(super) async fn list_locks(&self, prefix: &str) -> Result<Vec<Listed>> {
        let inner = &self.inner;
        let scans = inner.nodes.iter().map(|node| {
            let mut conn = node.conn.clone();
            let key_prefix = &inner.options.prefix;
            async move {
                crate::scan::locks_under(&mut conn, key_prefix, prefix)
                    .await
                    .map_err(|e| node.err(e).message().to_string())
            }
        });
        let mut found = BTreeSet::new();
        let (mut scanned, mut failures) = (0, Vec::new());
        for scan in join_all(scans).await {
            match scan {
                Ok(locks) => {
                    scanned += 1;
                    found.extend(
                        locks
                            .into_iter()
                            .filter(|(_, kind)| *kind == LockKind::Mutex)
                            .map(|(name, _)| name),
                    );
                }
                Err(why) => failures.push(why),
            }
        }
        let needed = inner.node_count - self.quorum() + 1;
        if scanned < needed {
            return Err(Error::unavailable(format!(
                "only {scanned} of {} Redlock nodes could be scanned ({needed} are needed to \
                 find every lock a majority holds): {}",
                inner.node_count,
                failures.join("; ")
            )));
        }
        let held: Vec<Option<Listed>> = stream::iter(found)
            .map(|name| async move {
                let seen = self.inspect_lock(&name).await?;
                Ok::<_, Error>(
                    (!seen.is_free()).then(|| Listed::new(name.as_str(), LockKind::Mutex)),
                )
            })
            .buffered(READS_AT_ONCE)
            .try_collect()
            .await?;
        Ok(held.into_iter().flatten().collect())
    }
}

/// What `views` (the nodes that answered) agree on, a majority being
/// `quorum` of all the nodes named.
fn majority_view(name: &LockName, views: &[NodeView], quorum: usize) -> Result<Inspection> {
    let mut seen = Inspection::free(name.as_str(), LockKind::Mutex);
    seen.exact = false;
    // Per owner: each node's token and time left. A re-entered hold may
    // carry different tokens on different nodes: the owner is what they
    // agree on.
    let mut by_owner: HashMap<&str, Vec<(u64, i64)>> = HashMap::new();
    for view in views {
        if let Some((token, owner)) = held_grant(&view.value) {
            by_owner.entry(owner).or_default().push((token, view.pttl));
        }
    }
    if let Some((owner, mut grants)) = by_owner
        .into_iter()
        .find(|(_, grants)| grants.len() >= quorum)
    {
        // The token most of them carry (the lowest of a tie).
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for (token, _) in &grants {
            *counts.entry(*token).or_default() += 1;
        }
        let token = counts
            .into_iter()
            .max_by_key(|(token, count)| (*count, std::cmp::Reverse(*token)))
            .map_or(0, |(token, _)| token);
        // Held while a majority still has it: the quorum-th longest lease.
        grants.sort_by_key(|(_, pttl)| std::cmp::Reverse(*pttl));
        let lease_left = u64::try_from(grants[quorum - 1].1)
            .ok()
            .map(Duration::from_millis);
        seen.holders
            .push(Held::new(Owner::new(owner)?, token, Side::Exclusive).lease_left(lease_left));
    }
    let mut lines: HashMap<&str, (f64, usize)> = HashMap::new();
    for view in views {
        for (entry, ticket) in &view.line {
            lines.entry(entry).or_insert((*ticket, 0)).1 += 1;
        }
    }
    let mut waiting: Vec<(f64, &str)> = lines
        .into_iter()
        .filter(|(_, (_, count))| *count >= quorum)
        .map(|(entry, (ticket, _))| (ticket, entry))
        .collect();
    // The nodes' order: by ticket, equal tickets by entry.
    waiting.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    seen.waiters = Some(
        waiting
            .iter()
            .map(|_| Waiting::new(None, Side::Exclusive))
            .collect(),
    );
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(value: &str, pttl: i64, line: &[(&str, f64)]) -> NodeView {
        NodeView {
            value: value.to_string(),
            pttl,
            line: line.iter().map(|(e, t)| (e.to_string(), *t)).collect(),
        }
    }

    #[test]
    fn the_majority_decides() {
        let name = LockName::new("job").unwrap();
        let line = [("c:1", 5.0), ("c:2", 7.0)];
        let views = [
            view("h 10 1 alice", 9000, &line),
            view("h 10 2 alice", 8000, &line[..1]),
            view("h 12 1 alice", 7000, &[]),
            view("h 20 1 bob", 30000, &line),
            view("", -2, &[]),
        ];
        let seen = majority_view(&name, &views, 3).unwrap();
        assert!(!seen.exact);
        assert_eq!(seen.holders.len(), 1);
        let held = &seen.holders[0];
        assert_eq!((held.owner.as_str(), held.token), ("alice", 10));
        assert_eq!(held.lease_left, Some(Duration::from_millis(7000)));
        assert_eq!(held.since, None);
        // c:1 is in line on three nodes, c:2 on two.
        assert_eq!(seen.waiters.as_ref().map(Vec::len), Some(1));

        let split = [
            view("h 10 1 alice", 9000, &[]),
            view("h 20 1 bob", 9000, &[]),
            view("~ 5 c:1", 9000, &[]),
        ];
        assert!(majority_view(&name, &split, 2).unwrap().is_free());
    }
}
