//! One round on every node: the fast `SET NX PX` or the acquire script on
//! each, the votes counted into a hold or a busy lock, and the undo of a
//! round that won no majority.

use super::*;
impl RedlockStore {
    /// One parallel round on every node, for a waiter with `turn` (none
    /// for a try-acquire), and the undo of its partial grant if it left
    /// one: the waiter's next round must wait for it, or it would find its
    /// own grant there (`WouldDeadlock` for a lock that is not reentrant).
    ///
    /// A `fast` round takes a free lock with `SET NX PX` on each node, as
    /// rslock does, and no script: a newcomer's first try. It cannot queue,
    /// re-enter or report the holder's lease; when it finds the lock taken,
    /// the caller goes on with script rounds.
    pub(super) async fn round(
        &self,
        request: &AcquireRequest,
        turn: Option<Turn<'_>>,
        fast: bool,
    ) -> Round {
        let mut undoing = None;
        let outcome = self.round_votes(request, turn, fast, &mut undoing).await;
        (outcome, undoing)
    }

    /// One node's answer to a round: `SET NX PX` (and what holds the lock
    /// if that refused) on the fast path, the acquire script otherwise.
    pub(super) async fn node_reply(
        &self,
        node: &Node,
        keys: &LineKeys,
        request: &AcquireRequest,
        turn: (&str, &str),
        token: u64,
        fast: bool,
    ) -> Result<Reply> {
        let inner = &self.inner;
        let mut conn = node.conn.clone();
        let timeout = inner.options.response_timeout;
        let ttl = request.ttl.as_millis() as u64;
        let call = async {
            let (entry, ticket) = turn;
            if fast {
                let value = format!("h {token} 1 {}", request.owner.as_str());
                let mut set = redis::cmd("SET");
                set.arg(&keys.lock).arg(&value).arg("NX").arg("PX").arg(ttl);
                let set: Option<String> = set.query_async(&mut conn).await?;
                if set.is_some() {
                    return Ok(Reply::Granted(token));
                }
                // A waiting acquire goes on with the script when the lock is
                // taken, whoever holds it. A try-acquire stops there unless
                // this owner is the holder (re-entry), which a GET tells:
                // sent only now, so that a free lock costs each node one
                // command, and a taken one a second round trip there.
                if !entry.is_empty() {
                    return Ok(Reply::Taken { own: false });
                }
                let now: Option<String> = redis::cmd("GET")
                    .arg(&keys.lock)
                    .query_async(&mut conn)
                    .await?;
                return Ok(Reply::Taken {
                    own: now.as_deref().and_then(held_by) == Some(request.owner.as_str()),
                });
            }
            let acquire = LineAcquire {
                owner: request.owner.as_str(),
                ttl: request.ttl,
                reentrant: request.reentrant,
                entry,
                ticket,
                place_lease: inner.options.waiter_lease,
                token,
            };
            let answer = inner
                .scripts
                .redlock_acquire(&mut conn, keys, &acquire)
                .await?;
            Ok(match answer {
                LineAcquired::Granted(token) => Reply::Granted(token),
                LineAcquired::Reentered(token) => Reply::Reentered(token),
                LineAcquired::HeldNotReentrant => Reply::Deadlock,
                LineAcquired::Busy { pttl, clock } => Reply::Busy { pttl, clock },
                LineAcquired::Other => Reply::Taken { own: false },
            })
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result.map_err(|e: redis::RedisError| node.err(e)),
            Err(_) => Err(Error::unavailable(format!(
                "Redis at {} did not answer within {timeout:?}",
                node.address
            ))),
        }
    }

    pub(super) async fn round_votes(
        &self,
        request: &AcquireRequest,
        turn: Option<Turn<'_>>,
        fast: bool,
        undoing: &mut Option<tokio::task::JoinHandle<()>>,
    ) -> Result<Outcome> {
        let inner = &self.inner;
        let keys = LineKeys::new(&inner.options.prefix, &request.name);
        let entry = turn.map_or("", |t| t.entry);
        let ticket = turn
            .and_then(|t| t.ticket)
            .map_or(String::new(), |t| t.to_string());
        // One token for the whole round: every node's fresh grant is known
        // before it answers.
        let token = fresh_token();
        let started = Instant::now();
        let mut calls: FuturesUnordered<_> = inner
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let reply = self.node_reply(node, &keys, request, (entry, &ticket), token, fast);
                async move { (i, reply.await) }
            })
            .collect();
        let mut results: Vec<Option<Result<Reply>>> = inner.nodes.iter().map(|_| None).collect();
        let (mut fresh, mut reentered) = (0, false);
        while let Some((i, result)) = calls.next().await {
            fresh += usize::from(matches!(result, Ok(Reply::Granted(_))));
            reentered |= matches!(result, Ok(Reply::Reentered(_)));
            results[i] = Some(result);
            // A round that has its majority of fresh grants goes on at
            // once: the nodes still to answer join the hold with the
            // round's token (the request is on their connection, and the
            // release or renewal that follows it there settles them
            // whatever they did with it). Waiting for the slowest of N is
            // what a round costs otherwise. Not with a re-entry: a node
            // not waited for may re-enter too, with its own older token.
            if !reentered && fresh >= self.quorum() {
                break;
            }
        }
        drop(calls);
        let elapsed = started.elapsed();
        let mut votes = vec![Vote::Refused; inner.nodes.len()];
        let (mut granted, mut deadlock, mut own, mut failures) = (0, false, false, Vec::new());
        let (mut clocks, mut remaining) = (Vec::new(), Vec::new());
        let mut reentered_token = None;
        for (i, result) in results.into_iter().enumerate() {
            let Some(result) = result else {
                votes[i] = Vote::Pending(token);
                continue;
            };
            match result {
                Ok(reply) => match reply {
                    Reply::Granted(token) => {
                        votes[i] = Vote::Granted(token);
                        granted += 1;
                    }
                    Reply::Reentered(held) => {
                        votes[i] = Vote::Granted(held);
                        granted += 1;
                        reentered_token = reentered_token.max(Some(held));
                    }
                    Reply::Deadlock => deadlock = true,
                    Reply::Busy { pttl, clock } => {
                        clocks.push(clock);
                        if pttl > 0 {
                            remaining.push(Duration::from_millis(pttl as u64));
                        }
                    }
                    Reply::Taken { own: mine } => own |= mine,
                },
                Err(e) if e.kind() == ErrorKind::InvalidConfig => return Err(e),
                Err(e) => {
                    votes[i] = Vote::Unknown;
                    failures.push(e.message().to_string());
                }
            }
        }
        let tokens: NodeTokens = votes
            .iter()
            .map(|v| match v {
                Vote::Granted(token) | Vote::Pending(token) => Some(*token),
                _ => None,
            })
            .collect();
        let validity = request
            .ttl
            .checked_sub(elapsed + Self::drift(request.ttl))
            .unwrap_or_default();
        if granted >= self.quorum() && !validity.is_zero() {
            // A node that did not answer may still grant (a paused node
            // runs the queued acquire when it resumes). Nobody would
            // release or renew that grant, and it would block the lock
            // there for a TTL: release it by owner, until the node has
            // answered after it ran what it had queued.
            if !failures.is_empty() {
                let late: Vec<Option<String>> = votes
                    .iter()
                    .map(|v| matches!(v, Vote::Unknown).then(String::new))
                    .collect();
                let (store, late_request) = (self.clone(), request.clone());
                omnilock_core::spawn_cleanup(async move {
                    store.release_late(&late_request, late).await;
                });
            }
            return Ok(Outcome::Held {
                token: reentered_token.unwrap_or(token),
                valid_until: started + request.ttl - Self::drift(request.ttl),
                answered: votes
                    .iter()
                    .map(|v| matches!(v, Vote::Granted(_)))
                    .collect(),
                tokens,
            });
        }
        // Not held: undo the partial grant everywhere at once, including on
        // nodes that did not answer in time (their grant may still come),
        // and keep this waiter's turn where the grant took it out of the
        // line. In the background: a stalled node must not hold up the
        // caller, and each undo follows its grant on that node's connection
        // anyway.
        if granted > 0 || !failures.is_empty() {
            let requeue = turn.and_then(|t| Some((t.entry.to_string(), t.ticket?)));
            let (store, undo_request) = (self.clone(), request.clone());
            *undoing = Some(tokio::spawn(async move {
                store
                    .undo_votes(&undo_request, &votes, requeue.as_ref())
                    .await
            }));
        }
        if deadlock {
            return Err(Error::would_deadlock());
        }
        let answered = inner.nodes.len() - failures.len();
        if answered < self.quorum() {
            return Err(Error::unavailable(format!(
                "only {answered} of {} Redlock nodes answered: {}",
                inner.node_count,
                failures.join("; ")
            )));
        }
        Ok(Outcome::Busy {
            clocks,
            remaining: median(remaining),
            own,
        })
    }

    pub(super) async fn round_detached(
        &self,
        request: &AcquireRequest,
        turn: Option<Turn<'_>>,
        fast: bool,
    ) -> Round {
        let (store, undo) = (self.clone(), self.clone());
        let (call_request, undo_request) = (request.clone(), request.clone());
        let turn = turn.map(|t| (t.entry.to_string(), t.ticket));
        complete_or_undo(
            async move {
                let turn = turn.as_ref().map(|(entry, ticket)| Turn {
                    entry,
                    ticket: *ticket,
                });
                store.round(&call_request, turn, fast).await
            },
            move |abandoned: Round| async move {
                if let (Ok(Outcome::Held { tokens, .. }), _) = abandoned {
                    undo.release_tokens(&undo_request, &tokens, None).await;
                }
            },
        )
        .await
    }

    /// Releases by owner the grants that nodes which did not answer a won
    /// round may still apply (`late`: `Some` for those nodes). A release
    /// sent to a stalled node runs after the acquire it had queued, if
    /// both went on one connection; but a timeout may have replaced that
    /// connection meanwhile, and then the order is not sure. So each node
    /// is asked, every quarter of a second, until it released something, or
    /// [`LATE_SETTLE`] after its first answer (which shows it runs again):
    /// what it had queued from before has run by then. (An
    /// application that names the owner itself and takes the lock again
    /// within those three seconds may lose that one node's grant to this
    /// release; the hold keeps the nodes that answered, a majority.)
    pub(super) async fn release_late(
        &self,
        request: &AcquireRequest,
        mut late: Vec<Option<String>>,
    ) {
        const TRIES: usize = 16;
        let mut first_answer: Vec<Option<Instant>> = vec![None; late.len()];
        for _ in 0..TRIES {
            let answers = self.release_on(request, &late, None).await;
            for (i, answer) in answers.iter().enumerate() {
                match answer {
                    Some(NodeAnswer::Released) => late[i] = None,
                    Some(NodeAnswer::Absent | NodeAnswer::NotOwner) => {
                        let first = *first_answer[i].get_or_insert_with(Instant::now);
                        if first.elapsed() >= LATE_SETTLE {
                            late[i] = None;
                        }
                    }
                    Some(NodeAnswer::NoAnswer) | None => {}
                }
            }
            if late.iter().all(Option::is_none) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Undoes a failed round: granted nodes by token, silent nodes by owner
    /// (the release follows the late acquire on the same connection), and
    /// puts the waiter back in line where a grant took it out.
    pub(super) async fn undo_votes(
        &self,
        request: &AcquireRequest,
        votes: &[Vote],
        requeue: Option<&(String, u64)>,
    ) {
        let tokens: Vec<Option<String>> = votes
            .iter()
            .map(|v| match v {
                Vote::Granted(token) | Vote::Pending(token) => Some(token.to_string()),
                Vote::Unknown => Some(String::new()),
                Vote::Refused => None,
            })
            .collect();
        self.release_on(request, &tokens, requeue).await;
    }
}

/// How long after a stalled node answers again its late grant may still
/// land (see [`RedlockStore::release_late`]).
const LATE_SETTLE: Duration = Duration::from_secs(1);

impl RedlockStore {
    /// `token` is not a fencing token (capabilities say so): it names the
    /// hold in logs, and re-entries of one hold share it.
    pub(super) fn grant(token: u64, tokens: NodeTokens, valid_until: Instant) -> Grant {
        let nodes = tokens.len();
        omnilock_core::Grant::new(token, valid_until).with_hold(Hold {
            tokens,
            valid_until: Mutex::new(valid_until),
            released: Mutex::new(vec![NodeRelease::NotSent; nodes]),
        })
    }
}

/// A round's grant id, the same on every node: unique in this process,
/// and a time in µs (the larger of this process's clock and one more than
/// the last id drawn), so that logs can tell grants apart.
pub(super) fn fresh_token() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let previous = LAST
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(0);
    now.max(previous + 1)
}

/// The owner of a lock key's value, if the key is held (`h <token> <holds>
/// <owner>`; see `scripts/redlock.rs`).
pub(super) fn held_by(value: &str) -> Option<&str> {
    let mut parts = value.splitn(4, ' ');
    (parts.next() == Some("h")).then_some(())?;
    parts.nth(2)
}

/// The token and owner of a lock key's value, if the key is held (as
/// [`held_by`]).
pub(super) fn held_grant(value: &str) -> Option<(u64, &str)> {
    let token = value.strip_prefix("h ")?.split(' ').next()?.parse().ok()?;
    Some((token, held_by(value)?))
}

/// The median of `values` (the upper one of an even count), if any.
pub(super) fn median<T: Ord + Copy>(mut values: Vec<T>) -> Option<T> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}
