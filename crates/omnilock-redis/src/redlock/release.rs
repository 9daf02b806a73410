//! Releases on the nodes: by token where a node granted, by owner where
//! a node never answered, each answering once enough nodes released.

use super::*;
impl RedlockStore {
    /// Releases on every node that granted, answering once `enough` nodes
    /// released (None: once every node answered). The calls not waited for
    /// go on in the background (see [`Self::release_on_until`]).
    pub(super) async fn release_tokens(
        &self,
        request: &LockSpec,
        tokens: &NodeTokens,
        enough: Option<usize>,
    ) -> Vec<Option<NodeAnswer>> {
        let tokens: Vec<Option<String>> = tokens.iter().map(|t| t.map(|t| t.to_string())).collect();
        self.release_on_until(request, &tokens, None, enough, true)
            .await
    }

    /// Runs the release script on each node with `Some(token)` ('' = any);
    /// per node, its answer (None: not sent there). A call not answered in
    /// time is dropped: its callers (a failed round's undo, the late-grant
    /// sweep) must not have a release by owner, or a requeue, land after
    /// their next step.
    pub(super) async fn release_on(
        &self,
        request: &LockSpec,
        tokens: &[Option<String>],
        requeue: Option<&(String, u64)>,
    ) -> Vec<Option<NodeAnswer>> {
        self.release_on_until(request, tokens, requeue, None, false)
            .await
    }

    /// [`Self::release_on`], answering once `enough` nodes released, or
    /// when the response timeout has passed (a node not waited for answers
    /// `NoAnswer`).
    ///
    /// With `carry_on`, the calls not waited for go on in the background
    /// instead of being dropped. A sent release runs on its node anyway,
    /// but a node that lost omnilock's scripts (a restart, `SCRIPT FLUSH`)
    /// refuses it with `NOSCRIPT`, and only the call that sent it loads the
    /// script and sends it again (exactly once, since the first did not
    /// run: safe for a re-entered hold's count too). Dropped there, a late
    /// grant on a paused node that had lost its scripts stood for its whole
    /// TTL. The connection's own command timeout (the longer of `timeout`
    /// and `connect_timeout`) still ends a call to a node that stays silent
    /// longer; the TTL is only the outer bound.
    pub(super) async fn release_on_until(
        &self,
        request: &LockSpec,
        tokens: &[Option<String>],
        requeue: Option<&(String, u64)>,
        enough: Option<usize>,
        carry_on: bool,
    ) -> Vec<Option<NodeAnswer>> {
        let inner = &self.inner;
        let (entry, ticket) = requeue.map_or((String::new(), String::new()), |(entry, ticket)| {
            (entry.clone(), ticket.to_string())
        });
        let sent = Arc::new(SentRelease {
            keys: LineKeys::new(&inner.options.prefix, &request.name),
            owner: request.owner.as_str().to_string(),
            entry,
            ticket,
        });
        let mut calls: FuturesUnordered<_> = inner
            .nodes
            .iter()
            .zip(tokens)
            .enumerate()
            .filter_map(|(i, (node, token))| {
                let token = token.clone()?;
                let (store, sent, mut conn) = (self.clone(), sent.clone(), node.conn.clone());
                Some(async move {
                    let release = store.inner.scripts.redlock_release(
                        &mut conn,
                        &sent.keys,
                        &sent.owner,
                        &token,
                        &store.inner.channel_prefix,
                        (&sent.entry, &sent.ticket),
                    );
                    let answer = match release.await {
                        Ok(LineReleased::Absent) => NodeAnswer::Absent,
                        Ok(LineReleased::NotOwner) => NodeAnswer::NotOwner,
                        Ok(LineReleased::Released) => NodeAnswer::Released,
                        Err(_) => NodeAnswer::NoAnswer,
                    };
                    (i, answer)
                })
            })
            .collect();
        let mut answers: Vec<Option<NodeAnswer>> = tokens
            .iter()
            .map(|token| token.as_ref().map(|_| NodeAnswer::NoAnswer))
            .collect();
        let deadline = tokio::time::sleep(inner.options.response_timeout);
        tokio::pin!(deadline);
        let mut released = 0;
        loop {
            tokio::select! {
                biased;
                next = calls.next() => {
                    let Some((i, answer)) = next else { break };
                    released += usize::from(matches!(answer, NodeAnswer::Released));
                    answers[i] = Some(answer);
                    if enough.is_some_and(|enough| released >= enough) {
                        break;
                    }
                }
                () = &mut deadline => break,
            }
        }
        if carry_on && !calls.is_empty() {
            // Not if this process exits first: Redis drops a closed
            // connection's unread commands, and the TTL frees the lock.
            let bound = request.ttl;
            omnilock_core::spawn_cleanup(async move {
                let _ = tokio::time::timeout(bound, calls.collect::<Vec<_>>()).await;
            });
        }
        answers
    }
}

/// What one release sends to every node, shared by the calls that may
/// outlive [`RedlockStore::release_on_until`].
struct SentRelease {
    keys: LineKeys,
    owner: String,
    /// The waiter entry and ticket to put back in line (empty: none).
    entry: String,
    ticket: String,
}
