//! The in-memory store as a [`Backend`]: grants, the FIFO queue with push
//! hand-off, leases and the counted locks, all under one process's locks.

use super::*;

#[async_trait]
impl Backend for MemStore {
    /// The acquisition's lost signal, besides the owner and token: a
    /// release takes it off the holder (one holder may stand for several
    /// acquisitions of its owner).
    type Hold = LostNotifier;

    fn kind(&self) -> &'static str {
        SCHEME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fair: true,
            push_wakeups: true,
            fencing: true,
            cross_process_reentrancy: false,
            lease_renewal: true,
            cross_process: false,
            break_lock: true,
            holder: true,
            election: true,
            // One process: losing it loses the holders too.
            survives_failover: true,
            semaphore: true,
            rw_lock: true,
            atomic_lock_all: true,
            check: true,
            // The store keeps nothing but locks.
            guarded_write: false,
            inspect: true,
            inspect_waiters: true,
            list: true,
            records: true,
        }
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<MemGrant>> {
        let mut state = self.state();
        if Family::of(request.primitive).is_some() {
            return Ok(match state.join_counted(request, false)?.1 {
                Some(Joined::Admitted(admitted)) => Some(admitted_grant(admitted, request)),
                _ => None,
            });
        }
        let attempt = state.try_take(request, Instant::now());
        state.tidy(&request.name);
        match attempt? {
            Attempt::Taken(granted) => Ok(Some(grant(granted, request))),
            Attempt::Busy => Ok(None),
        }
    }

    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<Option<Vec<MemGrant>>> {
        // One lock over the whole state: look at every part, then take them.
        let mut state = self.state();
        let now = Instant::now();
        for request in requests {
            let slot = state.slot(&request.name, now);
            let free = slot.holder.is_none() && slot.queue.is_empty();
            state.tidy(&request.name);
            if !free {
                return Ok(None);
            }
        }
        let mut grants = Vec::with_capacity(requests.len());
        for request in requests {
            match state.try_take(request, now)? {
                Attempt::Taken(granted) => grants.push(grant(granted, request)),
                Attempt::Busy => {
                    return Err(Error::new(
                        ErrorKind::Backend,
                        "internal: a part free a moment ago under the same lock was busy",
                    ));
                }
            }
        }
        Ok(Some(grants))
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<MemGrant> {
        if Family::of(request.primitive).is_some() {
            return self.acquire_counted(request).await;
        }
        let (mut rx, entry) = {
            let mut state = self.state();
            let attempt = state.try_take(request, Instant::now());
            state.tidy(&request.name);
            if let Attempt::Taken(granted) = attempt? {
                return Ok(grant(granted, request));
            }
            state.last_grant += 1;
            let grant_id = state.last_grant;
            let (tx, rx) = oneshot::channel();
            let slot = state.locks.entry(request.name.clone()).or_default();
            slot.queue.push_back(Waiter {
                grant_id,
                owner: request.owner.clone(),
                ttl: request.ttl,
                lost: request.lost.clone(),
                tx,
            });
            let entry = QueueEntry {
                store: self.clone(),
                name: request.name.clone(),
                grant_id,
                armed: true,
            };
            (rx, entry)
        };
        request.waiting.raise();
        let mut entry = entry;
        loop {
            // Wake at the holder's expiry too: a crashed holder never releases.
            let expiry = {
                let state = self.state();
                state
                    .locks
                    .get(&request.name)
                    .and_then(|slot| slot.holder.as_ref())
                    .map(|holder| holder.expires)
            };
            let expiry = expiry.map(tokio::time::Instant::from_std);
            tokio::select! {
                granted = &mut rx => {
                    entry.armed = false;
                    return match granted {
                        Ok(granted) => Ok(grant(granted, request)),
                        Err(_) => Err(Error::new(ErrorKind::Backend, "the in-memory queue dropped this waiter")),
                    };
                }
                _ = sleep_until_opt(expiry) => {
                    let mut state = self.state();
                    state.slot(&request.name, Instant::now());
                }
            }
        }
    }

    async fn release(&self, spec: &LockSpec, grant: &MemGrant) -> Result<()> {
        let mut state = self.state();
        let now = Instant::now();
        if Family::of(spec.primitive).is_some() {
            let (counted, last_token) = state.counted();
            return counted.leave(spec, Leaving::Holder(grant.token), now, last_token);
        }
        let result = match state.existing_slot(&spec.name) {
            Some((slot, last_token)) => {
                slot.expire(now, last_token);
                match &mut slot.holder {
                    Some(holder) if holder.owner == spec.owner && holder.token == grant.token => {
                        holder.lost.retain(|l| !l.same_as(&grant.hold));
                        slot.release_one(now, last_token);
                        Ok(())
                    }
                    _ => Err(Error::not_owner()),
                }
            }
            None => Err(Error::not_owner()),
        };
        state.tidy(&spec.name);
        result
    }

    async fn renew(&self, spec: &LockSpec, grant: &MemGrant) -> Result<Instant> {
        let mut state = self.state();
        let now = Instant::now();
        if Family::of(spec.primitive).is_some() {
            let (counted, last_token) = state.counted();
            return counted.renew(spec, grant.token, now, last_token);
        }
        let slot = state.slot(&spec.name, now);
        let result = match &mut slot.holder {
            Some(holder) if holder.owner == spec.owner && holder.token == grant.token => {
                holder.expires = holder.expires.max(now + spec.ttl);
                Ok(now + spec.ttl)
            }
            _ => Err(Error::new(
                ErrorKind::LockLost,
                "the lock is no longer held by this owner",
            )),
        };
        state.tidy(&spec.name);
        result
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        let mut state = self.state();
        let now = Instant::now();
        let Some((slot, last_token)) = state.existing_slot(name) else {
            return Ok(false);
        };
        let broken = slot.holder.take();
        if let Some(holder) = &broken {
            for lost in &holder.lost {
                lost.fire(Error::new(ErrorKind::LockLost, "the lock was broken"));
            }
        }
        slot.hand_off(now, last_token);
        state.tidy(name);
        Ok(broken.is_some())
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        let mut state = self.state();
        let (counted, last_token) = state.counted();
        Ok(counted.break_holds(name, kind, owner, Instant::now(), last_token))
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        let until = Instant::now() + keep;
        let mut state = self.state();
        state
            .records
            .insert(name.clone(), (value.to_string(), until));
        Ok(())
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<crate::Record>> {
        let now = Instant::now();
        let mut state = self.state();
        state.records.retain(|_, (_, until)| *until > now);
        Ok(state.records.get(name).map(|(value, until)| {
            crate::Record::new(value.clone(), Some(until.saturating_duration_since(now)))
        }))
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        let now = Instant::now();
        let removed = self.state().records.remove(name);
        Ok(removed.is_some_and(|(_, until)| until > now))
    }

    async fn holder(&self, name: &LockName) -> Result<Option<crate::Holder>> {
        let mut state = self.state();
        let now = Instant::now();
        let Some((slot, last_token)) = state.existing_slot(name) else {
            return Ok(None);
        };
        slot.expire(now, last_token);
        Ok(slot.holder.as_ref().map(|h| crate::Holder {
            owner: h.owner.clone(),
            token: h.token,
        }))
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        let mut state = self.state();
        let now = Instant::now();
        Ok(match kind {
            LockKind::Mutex => state.inspect_mutex(name, now),
            _ => {
                let (counted, last_token) = state.counted();
                counted.inspect(name, kind, now, last_token)
            }
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        Ok(self.state().list(prefix, Instant::now()))
    }
}
