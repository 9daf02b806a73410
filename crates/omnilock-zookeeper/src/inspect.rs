//! What an operator reads and does: a lock's holders and waiters
//! ([`ZkStore::inspect_lock`]), the held locks under a name prefix
//! ([`ZkStore::list_locks`]), and removing a semaphore's or read-write
//! lock's holds ([`ZkStore::break_counted`]), on the layouts of
//! [`crate::queue`] and [`crate::counted`] (Curator's).
//!
//! A lock's nodes are read after a `sync`, so the answer is as fresh as
//! the leader's; their data and stats in one `multiRead` (ZooKeeper 3.6+;
//! one read per node on older servers). A node's ctime is when its holder
//! asked (a waiter that got the lock later keeps its first ctime); the
//! lease is the session, so no holder has a `lease_left`: nodes of an
//! expired session are gone.

use omnilock_core::{
    Error, ErrorKind, Held as Holding, Inspection, Listed, LockKind, LockName, Owner, Result, Side,
    Waiting,
};
use zookeeper_client::{MultiReadResult, Stat};

use crate::conn::{call_raw, classify};
use crate::counted::{is_lease, lease_record, semaphore_paths};
use crate::queue::{contenders, rw_node, sequence};
use crate::session::Session;
use crate::store::ZkStore;

/// Reads in one `multiRead` at most.
const READ_BATCH: usize = 64;

/// One child node of a lock, read.
struct Node {
    /// The child's name.
    name: String,
    data: Vec<u8>,
    stat: Stat,
}

impl Node {
    /// The owner the node's data names: omnilock writes its owner there
    /// (Curator the client's address); a node whose data is no owner shows
    /// as `node:<name>`.
    fn owner(&self) -> Result<Owner> {
        let data = String::from_utf8_lossy(&self.data);
        let named = lease_record(&self.data).map_or(data.as_ref(), |(_, owner)| owner);
        match Owner::new(named) {
            Ok(owner) => Ok(owner),
            Err(_) => Owner::new(&format!("node:{}", self.name)),
        }
    }

    /// The node as a holder of `side`: its czxid (the token). No `since`:
    /// the node's ctime is when it joined the line, which for a holder
    /// that waited is not when it was granted, and an operator would read
    /// the wait as time held.
    fn held(&self, side: Side) -> Result<Holding> {
        Ok(Holding::new(self.owner()?, self.stat.czxid as u64, side))
    }

    /// The node as a waiter for `side`.
    fn waiting(&self, side: Side) -> Result<Waiting> {
        Ok(Waiting::new(Some(self.owner()?), side))
    }
}

/// Which of a lock's kinds a container's children show held.
struct Kinds {
    mutex: bool,
    rw_lock: bool,
    /// The container has a `leases` child: the semaphore is held if it has
    /// lease nodes.
    leases: bool,
}

impl Kinds {
    fn of(children: &[String]) -> Kinds {
        let mut mutex = children.to_vec();
        contenders(&mut mutex);
        Kinds {
            mutex: !mutex.is_empty(),
            rw_lock: children.iter().any(|c| rw_node(c).is_some()),
            leases: children.iter().any(|c| c == "leases"),
        }
    }
}

impl ZkStore {
    /// Lock `kind` of `name` as the store has it now.
    pub(crate) async fn inspect_lock(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        let session = self.any_session().await?;
        let lock_path = self.lock_path(name.as_str())?;
        self.sync(&session, &lock_path).await?;
        let mut seen = Inspection::free(name.as_str(), kind);
        let mut waiters = Vec::new();
        match kind {
            LockKind::Mutex => {
                let mut children = self.children(&session, &lock_path).await?;
                contenders(&mut children);
                let nodes = self.read(&session, &lock_path, children).await?;
                for (at, node) in nodes.iter().enumerate() {
                    if at == 0 {
                        seen.holders.push(node.held(Side::Exclusive)?);
                    } else {
                        waiters.push(node.waiting(Side::Exclusive)?);
                    }
                }
            }
            LockKind::RwLock => {
                for (node, writer, holds) in self.rw_nodes(&session, &lock_path).await? {
                    let side = if writer { Side::Write } else { Side::Read };
                    if holds {
                        seen.holders.push(node.held(side)?);
                    } else {
                        waiters.push(node.waiting(side)?);
                    }
                }
            }
            _ => {
                let (permits, leases, known) = self.leases(&session, &lock_path).await?;
                seen.permits = permits;
                seen.exact = known;
                for (node, holds) in leases {
                    if holds {
                        seen.holders.push(node.held(Side::Permit)?);
                    }
                }
                // Every pending acquisition queues in `locks` (the first
                // may have put its lease already: it is that waiter).
                let (locks, _) = semaphore_paths(&lock_path);
                let mut queued = self.children(&session, &locks).await?;
                contenders(&mut queued);
                for node in self.read(&session, &locks, queued).await? {
                    waiters.push(node.waiting(Side::Permit)?);
                }
            }
        }
        seen.waiters = Some(waiters);
        Ok(seen)
    }

    /// The read-write lock's nodes at `lock_path` in sequence order, each
    /// with whether it is a writer and whether it holds: a writer when it
    /// is first, a reader when no writer comes before it.
    async fn rw_nodes(
        &self,
        session: &Session,
        lock_path: &str,
    ) -> Result<Vec<(Node, bool, bool)>> {
        let mut children = self.children(session, lock_path).await?;
        children.retain(|c| rw_node(c).is_some());
        children.sort_by_key(|c| sequence(c));
        let nodes = self.read(session, lock_path, children).await?;
        let mut writer_seen = false;
        let mut sides = Vec::with_capacity(nodes.len());
        for (at, node) in nodes.into_iter().enumerate() {
            let writer = rw_node(&node.name) == Some(true);
            let holds = if writer { at == 0 } else { !writer_seen };
            writer_seen |= writer;
            sides.push((node, writer, holds));
        }
        Ok(sides)
    }

    /// The semaphore's lease nodes at `lock_path` in sequence order, each
    /// with whether it holds, and the permits omnilock's leases record.
    /// The first `permits` leases hold (a lease beyond them is the one
    /// acquisition holding `locks`, waiting for room). Without a recorded
    /// count (Curator's leases alone) every lease counts as held, and the
    /// answer is not exact (`false`).
    async fn leases(
        &self,
        session: &Session,
        lock_path: &str,
    ) -> Result<(Option<u32>, Vec<(Node, bool)>, bool)> {
        let (_, leases) = semaphore_paths(lock_path);
        let mut children = self.children(session, &leases).await?;
        children.retain(|c| is_lease(c));
        children.sort_by_key(|c| sequence(c));
        let nodes = self.read(session, &leases, children).await?;
        let permits = nodes
            .iter()
            .find_map(|n| lease_record(&n.data).map(|r| r.0));
        let room = permits.map_or(usize::MAX, |p| p as usize);
        let exact = permits.is_some() || nodes.is_empty();
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(at, node)| (node, at < room))
            .collect();
        Ok((permits, nodes, exact))
    }

    /// Deletes the nodes that hold the semaphore or read-write lock `name`
    /// (by `kind`), only `owner`'s where given: how many were deleted.
    /// Waiters stay in line: a semaphore's waiter watches the leases and
    /// a read-write lock's its predecessor, so each is admitted as room
    /// frees; a broken holder learns at its next renewal, which finds its
    /// node gone.
    pub(crate) async fn break_counted(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        let session = self.any_session().await?;
        let lock_path = self.lock_path(name.as_str())?;
        self.sync(&session, &lock_path).await?;
        let (parent, holders) = match kind {
            LockKind::Semaphore => {
                let (_, leases, _) = self.leases(&session, &lock_path).await?;
                let holders: Vec<Node> = leases
                    .into_iter()
                    .filter_map(|(node, holds)| holds.then_some(node))
                    .collect();
                (semaphore_paths(&lock_path).1, holders)
            }
            LockKind::RwLock => {
                let nodes = self.rw_nodes(&session, &lock_path).await?;
                let holders = nodes
                    .into_iter()
                    .filter_map(|(node, _, holds)| holds.then_some(node))
                    .collect();
                (lock_path, holders)
            }
            other => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("break_holds breaks semaphores and read-write locks, not a {other}"),
                ));
            }
        };
        let mut broken = 0;
        for node in holders {
            if let Some(owner) = owner
                && &node.owner()? != owner
            {
                continue;
            }
            let path = format!("{parent}/{}", node.name);
            let deleted = call_raw(self.ctx(), session.client.delete(&path, None)).await?;
            match deleted {
                Ok(()) => broken += 1,
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(classify(e, &self.ctx().shown)),
            }
        }
        Ok(broken)
    }

    /// The locks with holders whose names start with `prefix`. Names are
    /// one flat level of nodes under the store's prefix, encoded so that
    /// no prefix of a name is one of its node's, so every lock's node is
    /// listed and decoded, and those under `prefix` looked into: their
    /// children in `multiRead`s, then the `leases` of those with any.
    pub(crate) async fn list_locks(&self, prefix: &str) -> Result<Vec<Listed>> {
        let session = self.any_session().await?;
        let root = self.ctx().options.prefix.clone();
        self.sync(&session, &root).await?;
        let names: Vec<(String, String)> = self
            .children(&session, &root)
            .await?
            .into_iter()
            .filter_map(|child| {
                let name = ZkStore::lock_name(&child)?;
                name.starts_with(prefix).then_some((name, child))
            })
            .collect();
        let paths: Vec<String> = names.iter().map(|(_, c)| format!("{root}/{c}")).collect();
        let kinds: Vec<Kinds> = self
            .children_of(&session, &paths)
            .await?
            .iter()
            .map(|children| Kinds::of(children))
            .collect();
        let with_leases: Vec<usize> = (0..names.len()).filter(|&i| kinds[i].leases).collect();
        let lease_paths: Vec<String> = with_leases
            .iter()
            .map(|&i| semaphore_paths(&paths[i]).1)
            .collect();
        let leases = self.children_of(&session, &lease_paths).await?;
        let mut listed = Vec::new();
        for (i, (name, _)) in names.iter().enumerate() {
            if kinds[i].mutex {
                listed.push(Listed::new(name.clone(), LockKind::Mutex));
            }
            if kinds[i].rw_lock {
                listed.push(Listed::new(name.clone(), LockKind::RwLock));
            }
        }
        for (i, children) in with_leases.into_iter().zip(leases) {
            if children.iter().any(|c| is_lease(c)) {
                listed.push(Listed::new(names[i].0.clone(), LockKind::Semaphore));
            }
        }
        Ok(listed)
    }

    /// The children of `path`; none if it does not exist.
    async fn children(&self, session: &Session, path: &str) -> Result<Vec<String>> {
        match call_raw(self.ctx(), session.client.list_children(path)).await? {
            Ok(children) => Ok(children),
            Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(classify(e, &self.ctx().shown)),
        }
    }

    /// The children of each of `paths` (none for a path that is gone), in
    /// `multiRead`s of up to [`READ_BATCH`], else one by one.
    async fn children_of(&self, session: &Session, paths: &[String]) -> Result<Vec<Vec<String>>> {
        let mut all = Vec::with_capacity(paths.len());
        for batch in paths.chunks(READ_BATCH) {
            let read = self
                .multi_read(session, batch, |reader, path| reader.add_get_children(path))
                .await;
            match read {
                Some(answers) => all.extend(answers.into_iter().map(|answer| match answer {
                    MultiReadResult::Children { children } => children,
                    _ => Vec::new(),
                })),
                None => {
                    for path in batch {
                        all.push(self.children(session, path).await?);
                    }
                }
            }
        }
        Ok(all)
    }

    /// The data and stat of `children` of `parent`, in the order given,
    /// leaving out those gone meanwhile.
    async fn read(
        &self,
        session: &Session,
        parent: &str,
        children: Vec<String>,
    ) -> Result<Vec<Node>> {
        let mut nodes = Vec::with_capacity(children.len());
        for batch in children.chunks(READ_BATCH) {
            let paths: Vec<String> = batch.iter().map(|c| format!("{parent}/{c}")).collect();
            let read = self
                .multi_read(session, &paths, |reader, path| reader.add_get_data(path))
                .await;
            match read {
                Some(answers) => {
                    for (name, answer) in batch.iter().zip(answers) {
                        if let MultiReadResult::Data { data, stat } = answer {
                            let name = name.clone();
                            nodes.push(Node { name, data, stat });
                        }
                    }
                }
                None => {
                    for (name, path) in batch.iter().zip(&paths) {
                        match call_raw(self.ctx(), session.client.get_data(path)).await? {
                            Ok((data, stat)) => {
                                let name = name.clone();
                                nodes.push(Node { name, data, stat });
                            }
                            Err(zookeeper_client::Error::NoNode) => {}
                            Err(e) => return Err(classify(e, &self.ctx().shown)),
                        }
                    }
                }
            }
        }
        Ok(nodes)
    }

    /// One `multiRead` of `add` for each of `paths`: an answer per path, or
    /// `None` when the server cannot (older than 3.6) or the batch failed
    /// as a whole (the caller then reads one by one).
    async fn multi_read(
        &self,
        session: &Session,
        paths: &[String],
        add: impl Fn(
            &mut zookeeper_client::MultiReader<'_>,
            &str,
        ) -> std::result::Result<(), zookeeper_client::Error>,
    ) -> Option<Vec<MultiReadResult>> {
        let mut reader = session.client.new_multi_reader();
        if paths.iter().any(|path| add(&mut reader, path).is_err()) {
            return None;
        }
        match call_raw(self.ctx(), reader.commit()).await {
            Ok(Ok(answers)) if answers.len() == paths.len() => Some(answers),
            _ => None,
        }
    }
}
