//! Releases on the nodes: by token where a node granted, by owner where
//! a node never answered, each answering once enough nodes released.

use super::*;
impl RedlockStore {
    /// Releases on every node that granted, answering once `enough` nodes
    /// released (None: once every node answered).
    pub(super) async fn release_tokens(
        &self,
        request: &LockSpec,
        tokens: &NodeTokens,
        enough: Option<usize>,
    ) -> Vec<Option<NodeAnswer>> {
        let tokens: Vec<Option<String>> = tokens.iter().map(|t| t.map(|t| t.to_string())).collect();
        self.release_on_until(request, &tokens, None, enough).await
    }

    /// Runs the release script on each node with `Some(token)` ('' = any);
    /// per node, its answer (None: not sent there).
    pub(super) async fn release_on(
        &self,
        request: &LockSpec,
        tokens: &[Option<String>],
        requeue: Option<&(String, u64)>,
    ) -> Vec<Option<NodeAnswer>> {
        self.release_on_until(request, tokens, requeue, None).await
    }

    /// [`Self::release_on`], answering once `enough` nodes released: the
    /// others have their release sent, and it runs there (a node not
    /// waited for answers `NoAnswer`).
    pub(super) async fn release_on_until(
        &self,
        request: &LockSpec,
        tokens: &[Option<String>],
        requeue: Option<&(String, u64)>,
        enough: Option<usize>,
    ) -> Vec<Option<NodeAnswer>> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, &request.name);
        let (entry, ticket) = requeue.map_or((String::new(), String::new()), |(entry, ticket)| {
            (entry.clone(), ticket.to_string())
        });
        let calls = inner.nodes.iter().zip(tokens).map(|(node, token)| {
            let mut conn = node.conn.clone();
            let (keys, entry, ticket) = (&keys, &entry, &ticket);
            let timeout = inner.options.response_timeout;
            async move {
                let token = token.as_deref()?;
                let release = inner.scripts.redlock_release(
                    &mut conn,
                    keys,
                    request.owner.as_str(),
                    token,
                    &inner.channel_prefix,
                    (entry, ticket),
                );
                // Once sent, the release runs on the node even if we stop
                // waiting for its reply (not if this process exits first:
                // Redis drops a closed connection's unread commands; the
                // TTL then frees the lock).
                Some(match tokio::time::timeout(timeout, release).await {
                    Ok(Ok(LineReleased::Absent)) => NodeAnswer::Absent,
                    Ok(Ok(LineReleased::NotOwner)) => NodeAnswer::NotOwner,
                    Ok(Ok(LineReleased::Released)) => NodeAnswer::Released,
                    _ => NodeAnswer::NoAnswer,
                })
            }
        });
        let mut calls: FuturesUnordered<_> = calls
            .enumerate()
            .map(|(i, call)| async move { (i, call.await) })
            .collect();
        let mut answers: Vec<Option<NodeAnswer>> = tokens
            .iter()
            .map(|token| token.as_ref().map(|_| NodeAnswer::NoAnswer))
            .collect();
        let mut released = 0;
        while let Some((i, answer)) = calls.next().await {
            released += usize::from(matches!(answer, Some(NodeAnswer::Released)));
            answers[i] = answer;
            if enough.is_some_and(|enough| released >= enough) {
                break;
            }
        }
        answers
    }
}
