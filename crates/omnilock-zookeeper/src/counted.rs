//! Semaphores and read-write locks, in Apache Curator's layout, so that a
//! Java program using Curator and a program using omnilock share them (the
//! lock `N` is the path `<prefix>/<encoded N>`, what Curator is given):
//!
//! - **Read-write lock** (Curator's `InterProcessReadWriteLock`): each
//!   contender creates `_c_<uuid>-__READ__<seq>` or `_c_<uuid>-__WRIT__<seq>`
//!   under the path. A writer holds when its node is first; a reader when
//!   no writer's node comes before its own. A writer watches its
//!   predecessor, a reader the first writer ahead of it: one node each.
//! - **Semaphore** (Curator's `InterProcessSemaphoreV2`): a contender takes
//!   the mutex `<path>/locks`, creates `<path>/leases/_c_<uuid>-lease-<seq>`,
//!   and waits (watching the children of `leases`) until there are at most
//!   `permits` leases; then it lets the mutex go. The lease node is the
//!   permit. The mutex makes the order FIFO.
//!
//! Fencing tokens are the czxid of the node that holds (rising across the
//! whole ensemble). Curator records no permits count; omnilock writes it
//! into the data of its own lease nodes and, holding the `locks` mutex,
//! refuses a different one (a Curator client's count cannot be checked).

use std::sync::Arc;
use std::time::{Duration, Instant};

use omnilock_core::{
    AcquireRequest, Backoff, Error, ErrorKind, Primitive, Result, complete_or_undo,
};

use crate::conn::{call, call_raw, classify};
use crate::queue::{
    Entry, abandon, create_node, lock_node_base, position, protected_node_base, rw_node, sequence,
    wait_turn,
};
use crate::session::Session;
use crate::store::Grant;
use crate::store::ZkStore;

/// What omnilock writes into its lease nodes, before the count.
const PERMITS_RECORD: &str = "omnilock semaphore permits=";

impl ZkStore {
    /// A semaphore permit or a side of a read-write lock: `None` from a
    /// try-acquire that would wait.
    pub(crate) async fn take_counted(
        &self,
        request: &AcquireRequest,
        wait: bool,
    ) -> Result<Option<Grant>> {
        let session = self.session(request.ttl).await?;
        let path = self.lock_path(request.name.as_str())?;
        let started = Instant::now();
        let taken = match request.primitive {
            Primitive::Semaphore { permits } => {
                self.take_permit(&session, request, &path, permits, wait)
                    .await?
            }
            Primitive::Read => {
                self.take_side(&session, request, &path, false, wait)
                    .await?
            }
            Primitive::Write => self.take_side(&session, request, &path, true, wait).await?,
            Primitive::Mutex => unreachable!("the mutex is not counted"),
            other => {
                return Err(omnilock_core::Error::new(
                    omnilock_core::ErrorKind::Unsupported,
                    format!("ZooKeeper has no {}", other.describe()),
                ));
            }
        };
        Ok(taken.map(|(node, czxid, waited)| {
            let checked = if waited { Instant::now() } else { started };
            self.granted(request, session, node, czxid, checked)
        }))
    }

    /// Creates our node `<parent>/<base><seq>`; deleted if the caller goes
    /// away first.
    async fn create_entry(
        &self,
        session: &Arc<Session>,
        parent: &str,
        base: String,
        data: Vec<u8>,
    ) -> Result<(Entry, i64)> {
        let ctx = self.ctx().clone();
        let (s, parent) = (session.clone(), parent.to_string());
        let client = session.client.clone();
        let (node, czxid) = complete_or_undo(
            async move { create_node(&ctx, &s, &parent, &base, &data).await },
            move |created: Result<(String, i64)>| async move {
                if let Ok((node, _)) = created {
                    abandon(&client, node);
                }
            },
        )
        .await?;
        let entry = Entry {
            client: session.client.clone(),
            path: node,
            armed: true,
        };
        Ok((entry, czxid))
    }

    /// A read-write lock's reader (`writer` false) or writer. Returns the
    /// node, its czxid and whether it waited.
    async fn take_side(
        &self,
        session: &Arc<Session>,
        request: &AcquireRequest,
        path: &str,
        writer: bool,
        wait: bool,
    ) -> Result<Option<(String, i64, bool)>> {
        let side = if writer { "__WRIT__" } else { "__READ__" };
        let data = request.owner.as_str().as_bytes().to_vec();
        let (mut entry, czxid) = self
            .create_entry(session, path, protected_node_base(side), data)
            .await?;
        let mut waited = false;
        while let Some(blocker) = self
            .patiently(session, || {
                self.rw_blocker(session, path, &entry.path, writer)
            })
            .await?
        {
            if !wait {
                entry.withdraw(self.ctx()).await;
                return Ok(None);
            }
            if !waited {
                request.waiting.raise();
                waited = true;
            }
            self.wait_for_change(session, &blocker).await?;
        }
        entry.armed = false;
        Ok(Some((std::mem::take(&mut entry.path), czxid, waited)))
    }

    /// What a read-write node waits for: `None` when it holds.
    async fn rw_blocker(
        &self,
        session: &Session,
        path: &str,
        mine: &str,
        writer: bool,
    ) -> Result<Option<String>> {
        let mut children = call(self.ctx(), session.client.list_children(path)).await?;
        children.retain(|c| rw_node(c).is_some());
        children.sort_by_key(|c| sequence(c));
        let name = mine.rsplit('/').next().unwrap_or_default();
        let Some(at) = children.iter().position(|c| c == name) else {
            return Err(lost());
        };
        let blocker = if writer {
            at.checked_sub(1).map(|before| &children[before])
        } else {
            children[..at].iter().find(|c| rw_node(c) == Some(true))
        };
        Ok(blocker.map(|c| format!("{path}/{c}")))
    }

    /// A semaphore permit. Returns the lease node, its czxid and whether it
    /// waited.
    async fn take_permit(
        &self,
        session: &Arc<Session>,
        request: &AcquireRequest,
        path: &str,
        permits: u32,
        wait: bool,
    ) -> Result<Option<(String, i64, bool)>> {
        let (locks, leases) = semaphore_paths(path);
        let owner = request.owner.as_str().as_bytes().to_vec();
        let (mut lock, _) = self
            .create_entry(session, &locks, lock_node_base(), owner)
            .await?;
        let mut waited = false;
        if let Some(predecessor) = position(self.ctx(), session, &locks, &lock.path).await? {
            if !wait {
                lock.withdraw(self.ctx()).await;
                return Ok(None);
            }
            request.waiting.raise();
            waited = true;
            wait_turn(self.ctx(), session, &locks, &lock.path, predecessor).await?;
        }
        // Holding `locks`: nobody else adds a lease meanwhile. A refused
        // count gives up its place in line before the error returns: the
        // caller may close and exit at once, before a deletion left to the
        // background has run, and its node would then stand first in line
        // until its session expires, stalling everyone behind it.
        if let Err(err) = self.check_permits(session, &leases, permits).await {
            lock.withdraw(self.ctx()).await;
            return Err(err);
        }
        let record = format!("{PERMITS_RECORD}{permits} owner={}", request.owner);
        let (mut lease, czxid) = self
            .create_entry(
                session,
                &leases,
                protected_node_base("lease-"),
                record.into_bytes(),
            )
            .await?;
        let name = lease
            .path
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        loop {
            let (children, watcher) = self
                .patiently(session, || {
                    call(self.ctx(), session.client.list_and_watch_children(&leases))
                })
                .await?;
            if !children.contains(&name) {
                return Err(lost());
            }
            if children.len() <= permits as usize {
                break;
            }
            if !wait {
                lease.withdraw(self.ctx()).await;
                lock.withdraw(self.ctx()).await;
                return Ok(None);
            }
            if !waited {
                request.waiting.raise();
                waited = true;
            }
            tokio::select! {
                _ = crate::watch::fired(watcher) => {}
                cause = session.died() => return Err(cause),
            }
        }
        // Let the next contender in now rather than in the background; a
        // caller going away meanwhile gives the lease back too.
        if let Ok(Ok(())) = call_raw(self.ctx(), session.client.delete(&lock.path, None)).await {
            lock.armed = false;
        }
        lease.armed = false;
        Ok(Some((std::mem::take(&mut lease.path), czxid, waited)))
    }

    /// Refuses a permits count other than the one an omnilock lease node
    /// under `leases` records.
    async fn check_permits(&self, session: &Session, leases: &str, permits: u32) -> Result<()> {
        let children = match call_raw(self.ctx(), session.client.list_children(leases)).await? {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => return Ok(()),
            Err(e) => return Err(classify(e, &self.ctx().shown)),
        };
        for child in children {
            let node = format!("{leases}/{child}");
            let Ok(Ok((data, _))) = call_raw(self.ctx(), session.client.get_data(&node)).await
            else {
                continue;
            };
            match lease_record(&data).map(|(recorded, _)| recorded) {
                Some(recorded) if recorded != permits => {
                    return Err(Error::permits_conflict(
                        u64::from(recorded),
                        u64::from(permits),
                    ));
                }
                Some(_) => return Ok(()),
                None => continue,
            }
        }
        Ok(())
    }

    /// Runs `op` until it succeeds, retrying connection trouble (a leader
    /// election, a reconnect) with backoff while the session lives, as the
    /// mutex's waits do.
    async fn patiently<T, F, Fut>(&self, session: &Session, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match op().await {
                Ok(value) => return Ok(value),
                Err(err) if err.kind() == ErrorKind::Unavailable => {
                    if let Some(cause) = session.death() {
                        return Err(cause);
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(err) => return Err(session.death().unwrap_or(err)),
            }
        }
    }

    /// Waits until `node` changes or is gone (returns at once if it is
    /// already gone), or the session dies.
    async fn wait_for_change(&self, session: &Session, node: &str) -> Result<()> {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match session.client.check_and_watch_stat(node).await {
                Ok((Some(_), watcher)) => {
                    return tokio::select! {
                        _ = crate::watch::fired(watcher) => Ok(()),
                        cause = session.died() => Err(cause),
                    };
                }
                Ok((None, _)) => return Ok(()),
                Err(e) => {
                    let err = classify(e, &self.ctx().shown);
                    if !err.is_retryable() {
                        return Err(session.death().unwrap_or(err));
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        cause = session.died() => return Err(cause),
                    }
                }
            }
        }
    }
}

/// The semaphore at `path`'s two containers, Curator's layout: the mutex
/// `<path>/locks` that orders its contenders, and `<path>/leases`, whose
/// nodes are the permits.
pub(crate) fn semaphore_paths(path: &str) -> (String, String) {
    (format!("{path}/locks"), format!("{path}/leases"))
}

/// Whether `child` of `leases` is a lease node: `_c_<uuid>-lease-<10
/// digits>`, as omnilock and Curator name them.
pub(crate) fn is_lease(child: &str) -> bool {
    child.starts_with("_c_")
        && child
            .len()
            .checked_sub(10)
            .and_then(|at| child.split_at_checked(at))
            .is_some_and(|(head, digits)| {
                head.ends_with("-lease-") && digits.bytes().all(|b| b.is_ascii_digit())
            })
}

/// The permits count and owner an omnilock lease node records (`None` for
/// a node of Curator's, which records neither).
pub(crate) fn lease_record(data: &[u8]) -> Option<(u32, &str)> {
    let record = std::str::from_utf8(data)
        .ok()?
        .strip_prefix(PERMITS_RECORD)?;
    let permits = record.split(' ').next()?.parse().ok()?;
    let owner = record.split_once(" owner=").map_or("", |(_, owner)| owner);
    Some((permits, owner))
}

fn lost() -> Error {
    Error::new(
        ErrorKind::LockLost,
        "this client's node is gone (session expired or lock broken)",
    )
    .with_retryable(true)
}
