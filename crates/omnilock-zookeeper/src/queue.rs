//! The lock recipe: lock N is the container node `<prefix>/<encoded N>`;
//! each contender creates one EPHEMERAL_SEQUENTIAL child `<guid>-lock-<seq>`
//! there. The lowest sequence holds the lock; a waiter watches only the child
//! just below its own and looks again when that one is deleted.
//!
//! Curator's `InterProcessMutex` names its nodes `_c_<uuid>-lock-<seq>` in
//! the same order: both are contenders, so the two exclude each other on
//! one path.

use std::time::{Duration, Instant};

use omnilock_core::{AcquireRequest, Backoff, Error, ErrorKind, Result, retry_in_background};
use zookeeper_client::{Client, CreateMode};

use crate::conn::{Ctx, acls, call, call_raw, classify, connection_trouble, mkdir_prefix};
use crate::session::Session;

/// A lock node that is deleted if the acquire is dropped or fails.
pub(crate) struct Entry {
    pub(crate) client: Client,
    pub(crate) path: String,
    pub(crate) armed: bool,
}

impl Entry {
    /// Deletes the node now, for a try that found the lock busy: a caller
    /// that exits right after (`omnilock run -n`) would otherwise leave it
    /// in line until its session times out, ahead of every later try. The
    /// background delete of `Drop` stays the fallback.
    pub(crate) async fn withdraw(mut self, ctx: &Ctx) {
        let deleted = crate::conn::call_raw(ctx, self.client.delete(&self.path, None)).await;
        if matches!(
            deleted,
            Ok(Ok(())) | Ok(Err(zookeeper_client::Error::NoNode))
        ) {
            self.armed = false;
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if self.armed {
            abandon(&self.client, std::mem::take(&mut self.path));
        }
    }
}

/// The mutex's node name before the sequence: `<guid>-lock-`.
pub(crate) fn lock_node_base() -> String {
    format!("{:032x}-lock-", rand::random::<u128>())
}

/// A node name before the sequence as Curator's protected mode makes it:
/// `_c_<uuid>-<name>`.
pub(crate) fn protected_node_base(name: &str) -> String {
    let id = rand::random::<u128>();
    format!(
        "_c_{:08x}-{:04x}-{:04x}-{:04x}-{:012x}-{name}",
        id >> 96,
        (id >> 80) & 0xffff,
        (id >> 64) & 0xffff,
        (id >> 48) & 0xffff,
        id & 0xffff_ffff_ffff
    )
}

/// Creates our ephemeral-sequential node `<parent>/<base><seq>` holding
/// `data` (and the containers it needs, `parent` and those between it and
/// the prefix), finding it by its unique base if the connection dropped
/// mid-create.
pub(crate) async fn create_node(
    ctx: &Ctx,
    session: &Session,
    parent: &str,
    base: &str,
    data: &[u8],
) -> Result<(String, i64)> {
    let node_prefix = format!("{parent}/{base}");
    let acls = acls(ctx);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    let deadline = Instant::now() + ctx.options.request_timeout * 2;
    loop {
        let options = CreateMode::EphemeralSequential.with_acls(acls);
        let created = session.client.create(&node_prefix, data, &options).await;
        match created {
            Ok((stat, sequence)) => return Ok((format!("{node_prefix}{sequence}"), stat.czxid)),
            Err(zookeeper_client::Error::NoNode) => {
                // A container does not exist (first use, or the server
                // removed it when it was last empty): make them, outermost
                // first.
                let container = CreateMode::Container.with_acls(acls);
                for path in containers(&ctx.options.prefix, parent) {
                    match session.client.create(&path, &[], &container).await {
                        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(zookeeper_client::Error::NoNode) => {
                            call(ctx, mkdir_prefix(ctx, session)).await?;
                            break;
                        }
                        Err(e) if connection_trouble(&e) && Instant::now() < deadline => {
                            tokio::time::sleep(backoff.next_delay()).await;
                            break;
                        }
                        Err(e) => return Err(classify(e, &ctx.shown)),
                    }
                }
            }
            Err(e) if connection_trouble(&e) => {
                // The create may have happened: look for our guid first, on
                // a server brought up to the leader. One that lags would
                // miss it, and the second create would leave the first
                // ahead of us in the line for as long as the session lives.
                if let Ok(Ok(()) | Err(zookeeper_client::Error::NoNode)) =
                    call_raw(ctx, session.client.sync(parent)).await
                    && let Ok(children) = session.client.list_children(parent).await
                    && let Some(child) = children.iter().find(|c| c.starts_with(base))
                {
                    let path = format!("{parent}/{child}");
                    if let Ok(Some(stat)) = session.client.check_stat(&path).await {
                        return Ok((path, stat.czxid));
                    }
                }
                if Instant::now() >= deadline {
                    return Err(classify(e, &ctx.shown));
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => return Err(classify(e, &ctx.shown)),
        }
    }
}

/// Keeps the children of a lock's container that are contenders, in queue
/// order. Anything else there (the container of a lock whose prefix nests
/// inside this one) is not part of this lock.
pub(crate) fn contenders(children: &mut Vec<String>) {
    children.retain(|c| is_contender(c));
    children.sort_by_key(|c| sequence(c));
}

/// The containers from the one below `prefix` down to `parent`, outermost
/// first (`parent` is under `prefix`).
fn containers(prefix: &str, parent: &str) -> Vec<String> {
    let below = parent.strip_prefix(prefix).unwrap_or(parent);
    let mut path = prefix.trim_end_matches('/').to_string();
    below
        .split('/')
        .filter(|part| !part.is_empty())
        .map(|part| {
            path = format!("{path}/{part}");
            path.clone()
        })
        .collect()
}

/// Whether `child` is a mutex node: omnilock's `<32 hex digits>-lock-<10
/// digits>`, or Curator's `_c_<uuid>-lock-<10 digits>`.
pub(crate) fn is_contender(child: &str) -> bool {
    let bytes = child.as_bytes();
    let omnilock = bytes.len() == 48
        && bytes[..32].iter().all(|b| b.is_ascii_hexdigit())
        && &bytes[32..38] == b"-lock-";
    let curator = bytes.len() == 55
        && child.starts_with("_c_")
        && is_uuid(&bytes[3..39])
        && &bytes[39..45] == b"-lock-";
    (omnilock || curator) && bytes[bytes.len() - 10..].iter().all(u8::is_ascii_digit)
}

/// `8-4-4-4-12` hex digits, as Java's `UUID.toString()` writes them.
fn is_uuid(bytes: &[u8]) -> bool {
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// A node of a read-write lock, Curator's layout: `...__READ__<10 digits>`
/// or `...__WRIT__<10 digits>`; `Some(true)` for a writer.
pub(crate) fn rw_node(child: &str) -> Option<bool> {
    let (head, digits) = child.split_at_checked(child.len().checked_sub(10)?)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if head.ends_with("__WRIT__") {
        Some(true)
    } else if head.ends_with("__READ__") {
        Some(false)
    } else {
        None
    }
}

/// The sequence number ZooKeeper put at the end of a child's name (its
/// last 10 characters).
pub(crate) fn sequence(child: &str) -> i64 {
    child
        .len()
        .checked_sub(10)
        .and_then(|at| child.get(at..))
        .and_then(|s| s.parse().ok())
        .unwrap_or(i64::MAX)
}

/// Deletes a node nobody will use, in the background.
pub(crate) fn abandon(client: &Client, path: String) {
    let client = client.clone();
    retry_in_background(move || {
        let (client, path) = (client.clone(), path.clone());
        async move {
            match client.delete(&path, None).await {
                // Only a request that may not have reached the server is
                // worth repeating; any other answer settles it.
                Err(e) if connection_trouble(&e) => {
                    Err(Error::unavailable(format!("deleting {path}: {e}")))
                }
                _ => Ok(()),
            }
        }
    });
}

/// Where our node stands: `Ok(None)` when it is first (the lock is
/// ours), `Ok(Some(predecessor))` otherwise; `LockLost` if it is gone.
pub(crate) async fn position(
    ctx: &Ctx,
    session: &Session,
    lock_path: &str,
    path: &str,
) -> Result<Option<String>> {
    let mut children = call(ctx, session.client.list_children(lock_path)).await?;
    contenders(&mut children);
    let mine = path.rsplit('/').next().unwrap_or_default();
    let Some(at) = children.iter().position(|c| c == mine) else {
        return Err(Error::new(
            ErrorKind::LockLost,
            "this client's lock node is gone (session expired or lock broken)",
        )
        .with_retryable(true));
    };
    Ok(at
        .checked_sub(1)
        .map(|before| format!("{lock_path}/{}", children[before])))
}

/// Waits until our node is first: watch the predecessor only.
pub(crate) async fn wait_turn(
    ctx: &Ctx,
    session: &Session,
    lock_path: &str,
    path: &str,
    mut predecessor: String,
) -> Result<()> {
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        match session.client.check_and_watch_stat(&predecessor).await {
            Ok((Some(_), watcher)) => {
                tokio::select! {
                    _ = crate::watch::fired(watcher) => {}
                    cause = session.died() => return Err(cause),
                }
            }
            Ok((None, _)) => {}
            Err(e) => {
                let err = classify(e, &ctx.shown);
                if !err.is_retryable() {
                    return Err(session.death().unwrap_or(err));
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    cause = session.died() => return Err(cause),
                }
            }
        }
        let next = loop {
            match position(ctx, session, lock_path, path).await {
                Ok(next) => break next,
                Err(err) if err.kind() == ErrorKind::Unavailable => {
                    if let Some(cause) = session.death() {
                        return Err(cause);
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(err) => return Err(session.death().unwrap_or(err)),
            }
        };
        match next {
            None => return Ok(()),
            Some(p) => predecessor = p,
        }
    }
}

/// An owner cannot share a hold across ZooKeeper sessions (nodes are
/// ephemeral per session): if the holder is our own owner elsewhere,
/// waiting would deadlock, so say so.
pub(crate) async fn refuse_own_holder(
    ctx: &Ctx,
    session: &Session,
    lock_path: &str,
    mine: &str,
    request: &AcquireRequest,
) -> Result<()> {
    let mut children = call(ctx, session.client.list_children(lock_path)).await?;
    contenders(&mut children);
    if let Some(first) = children.first() {
        let path = format!("{lock_path}/{first}");
        if path == mine {
            return Ok(()); // the holder left meanwhile: we are first
        }
        if let Ok((data, _)) = session.client.get_data(&path).await
            && data == request.owner.as_str().as_bytes()
        {
            return Err(Error::new(
                ErrorKind::WouldDeadlock,
                "this owner holds the lock through another ZooKeeper session; \
                     holds cannot be shared across sessions",
            ));
        }
    }
    Ok(())
}
