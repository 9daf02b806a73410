//! The lock recipe: lock N is the container node `<prefix>/<encoded N>`;
//! each contender creates one EPHEMERAL_SEQUENTIAL child `<guid>-lock-<seq>`
//! there. The lowest sequence holds the lock; a waiter watches only the child
//! just below its own and looks again when that one is deleted.

use std::time::{Duration, Instant};

use omnilock_core::{retry_in_background, AcquireRequest, Backoff, Error, ErrorKind, Result};
use zookeeper_client::{Client, CreateMode};

use crate::conn::{acls, call, classify, connection_trouble, mkdir_prefix, Ctx};
use crate::session::Session;

/// A lock node that is deleted if the acquire is dropped or fails.
pub(crate) struct Entry {
    pub(crate) client: Client,
    pub(crate) path: String,
    pub(crate) armed: bool,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if self.armed {
            abandon(&self.client, std::mem::take(&mut self.path));
        }
    }
}

/// Creates our ephemeral-sequential node (and the parents it needs),
/// finding it by its guid if the connection dropped mid-create.
pub(crate) async fn create_node(
    ctx: &Ctx,
    session: &Session,
    lock_path: &str,
    owner: &str,
) -> Result<(String, i64)> {
    let guid = format!("{:032x}", rand::random::<u128>());
    let node_prefix = format!("{lock_path}/{guid}-lock-");
    let acls = acls(ctx);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
    let deadline = Instant::now() + ctx.options.request_timeout * 2;
    loop {
        let options = CreateMode::EphemeralSequential.with_acls(acls);
        let created = session
            .client
            .create(&node_prefix, owner.as_bytes(), &options)
            .await;
        match created {
            Ok((stat, sequence)) => return Ok((format!("{node_prefix}{sequence}"), stat.czxid)),
            Err(zookeeper_client::Error::NoNode) => {
                // The lock's container does not exist (first use, or the
                // server removed it when it was last empty): make it.
                let container = CreateMode::Container.with_acls(acls);
                match session.client.create(lock_path, &[], &container).await {
                    Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                    Err(zookeeper_client::Error::NoNode) => {
                        call(ctx, mkdir_prefix(ctx, session)).await?;
                    }
                    Err(e) if connection_trouble(&e) && Instant::now() < deadline => {
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(e) => return Err(classify(e, &ctx.shown)),
                }
            }
            Err(e) if connection_trouble(&e) => {
                // The create may have happened: look for our guid first.
                if let Ok(children) = session.client.list_children(lock_path).await {
                    if let Some(child) = children.iter().find(|c| c.starts_with(&guid)) {
                        let path = format!("{lock_path}/{child}");
                        if let Ok(Some(stat)) = session.client.check_stat(&path).await {
                            return Ok((path, stat.czxid));
                        }
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

/// Whether `child` is a lock node: `<32 hex digits>-lock-<10 digits>`, as
/// [`create_protected`]-style creation names them.
pub(crate) fn is_contender(child: &str) -> bool {
    let bytes = child.as_bytes();
    bytes.len() == 48
        && bytes[..32].iter().all(|b| b.is_ascii_hexdigit())
        && &bytes[32..38] == b"-lock-"
        && bytes[38..].iter().all(u8::is_ascii_digit)
}

/// The sequence number at the end of a child's name (`<guid>-lock-<seq>`).
pub(crate) fn sequence(child: &str) -> i64 {
    child
        .rsplit('-')
        .next()
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
                    _ = watcher.changed() => {}
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
        if let Ok((data, _)) = session.client.get_data(&path).await {
            if data == request.owner.as_str().as_bytes() {
                return Err(Error::new(
                    ErrorKind::WouldDeadlock,
                    "this owner holds the lock through another ZooKeeper session; \
                     holds cannot be shared across sessions",
                ));
            }
        }
    }
    Ok(())
}
