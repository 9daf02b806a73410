//! The workloads of `omnilock-bench`, each measured into [`Row`]s.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnilock::Locks;
use omnilock_harness::Probe;

use crate::peers::Peer;
use crate::run::{By, Row, Workload};

/// Clients of the many-locks workload, and the names they spread over.
pub(crate) const MANY_CLIENTS: usize = 64;

const MANY_NAMES: usize = 10_000;

/// How long a herd chain may take before the run reports it stuck.
const HERD_LIMIT: Duration = Duration::from_secs(60);

/// The raw store operations the backend's algorithm needs, made by a bare
/// client of the store's usual client library ([`Probe::floor_round`]).
pub(crate) async fn floor(probe: Option<&Probe>, duration: Duration) -> omnilock::Result<Row> {
    let Some(measure) = probe else {
        return Ok(skipped(Workload::Floor, 1, "no floor probe for this store"));
    };
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < duration {
        let at = Instant::now();
        measure.floor_round().await?;
        samples.push(at.elapsed());
    }
    let mut row = row(Workload::Floor, 1, samples, started.elapsed(), None);
    row.note = measure.floor_ops().to_string();
    Ok(row)
}

/// 64 clients over 10,000 names: grants per second when locks rarely collide.
pub(crate) async fn many_locks(
    locks: &Locks,
    name: &str,
    duration: Duration,
) -> omnilock::Result<Row> {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..MANY_CLIENTS {
        let (locks, name, samples) = (locks.clone(), name.to_string(), samples.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = client * 7919;
            while started.elapsed() < duration {
                i = (i + 104_729) % MANY_NAMES;
                let at = Instant::now();
                let Some(guard) =
                    until(started + duration, locks.acquire(&format!("{name}/{i}"))).await?
                else {
                    break;
                };
                samples.lock().unwrap().push(at.elapsed());
                guard.release().await?;
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    let elapsed = started.elapsed();
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    Ok(row(
        Workload::ManyLocks,
        MANY_CLIENTS,
        samples,
        elapsed,
        None,
    ))
}

/// Store requests per hand-off along a chain of `waiters` queued
/// acquisitions, from the store's own counters: flat in the number of
/// waiters means no herd.
pub(crate) async fn herd(
    locks: &Locks,
    probe: Option<&Probe>,
    name: &str,
    waiters: usize,
) -> omnilock::Result<Row> {
    let Some(measure) = probe else {
        return Ok(skipped(
            Workload::Herd,
            waiters,
            "no request counter for this store",
        ));
    };
    if let Err(err) = measure.requests_served().await {
        if err.kind() == omnilock::ErrorKind::Unsupported {
            return Ok(skipped(
                Workload::Herd,
                waiters,
                "no request counter for this store",
            ));
        }
        return Err(err);
    }
    let ttl = Duration::from_secs(60);
    let holder = locks.lock(name).ttl(ttl).acquire().await?;
    let mut chain = Vec::new();
    for _ in 0..waiters {
        let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
        let (locks, name) = (locks.clone(), name.to_string());
        chain.push(tokio::spawn(async move {
            let guard = locks
                .lock(&name)
                .ttl(ttl)
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .acquire()
                .await?;
            guard.release().await
        }));
        let _ = queued_rx.await;
    }
    // Count from the moment the store is quiet (waiters finish setting up
    // their watches after they report waiting).
    let mut start = measure.requests_served().await?;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = measure.requests_served().await?;
        if now == start {
            break;
        }
        start = now;
    }
    let started = Instant::now();
    holder.release().await?;
    let aborts: Vec<_> = chain.iter().map(|t| t.abort_handle()).collect();
    if tokio::time::timeout(HERD_LIMIT, join(chain)).await.is_err() {
        // A stuck chain is a finding, not a reason to hang the whole run.
        aborts.iter().for_each(|a| a.abort());
        return Ok(skipped(
            Workload::Herd,
            waiters,
            &format!("the chain of hand-offs did not finish within {HERD_LIMIT:?}"),
        ));
    }
    let elapsed = started.elapsed();
    let end = measure.requests_served().await?;
    let mut row = row(Workload::Herd, waiters, Vec::new(), elapsed, None);
    row.ops = waiters;
    row.per_second = waiters as f64 / elapsed.as_secs_f64().max(1e-9);
    row.requests = Some(end.saturating_sub(start) as f64 / waiters as f64);
    Ok(row)
}

/// An acquisition cut off by the end of the run (`None`) is not counted:
/// on an unfair store a starved client would otherwise hold the run open.
async fn until(
    end: Instant,
    acquire: impl std::future::Future<Output = omnilock::Result<omnilock::LockGuard>>,
) -> omnilock::Result<Option<omnilock::LockGuard>> {
    match tokio::time::timeout_at(tokio::time::Instant::from_std(end), acquire).await {
        Ok(guard) => guard.map(Some),
        Err(_) => Ok(None),
    }
}

/// The row of a run that failed: no samples, and the error as its note.
pub(crate) fn failed(workload: Workload, clients: usize, err: &omnilock::Error) -> Row {
    skipped(workload, clients, &format!("failed: {err}"))
}

fn skipped(workload: Workload, clients: usize, why: &str) -> Row {
    let mut row = row(workload, clients, Vec::new(), Duration::from_secs(1), None);
    row.note = why.to_string();
    row
}

pub(crate) async fn join(
    tasks: Vec<tokio::task::JoinHandle<omnilock::Result<()>>>,
) -> omnilock::Result<()> {
    for task in tasks {
        task.await
            .map_err(|e| omnilock::Error::new(omnilock::ErrorKind::Backend, e.to_string()))??;
    }
    Ok(())
}

/// One client, acquire + release of the same name again and again, in
/// batches interleaved with the store's floor (`floor`) and the peer
/// library's lock + unlock of a name of its own (`peer`), so that drift on a
/// shared machine hits all of them alike. Rows: the floor's, the peer's,
/// then omnilock's.
pub(crate) async fn uncontended(
    locks: &Locks,
    name: &str,
    duration: Duration,
    floor: Option<&Probe>,
    peer: Option<&Peer>,
) -> omnilock::Result<Vec<Row>> {
    const BATCH: usize = 20;
    let started = Instant::now();
    let (mut samples, mut floor_samples, mut peer_samples) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lock_time, mut floor_time, mut peer_time) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let peer_name = format!("{name}/peer");
    // A floor or a peer that fails (rights its client lacks, say) is a row
    // that says why; omnilock's run goes on.
    let (mut floor_failed, mut peer_failed) = (None, None);
    while started.elapsed() < duration {
        if let (Some(floor), None) = (floor, &floor_failed) {
            let batch = Instant::now();
            for _ in 0..BATCH {
                let at = Instant::now();
                if let Err(err) = floor.floor_round().await {
                    floor_failed = Some(err);
                    break;
                }
                floor_samples.push(at.elapsed());
            }
            floor_time += batch.elapsed();
        }
        if let (Some(peer), None) = (peer, &peer_failed) {
            let batch = Instant::now();
            for _ in 0..BATCH {
                let at = Instant::now();
                let round = async {
                    let hold = peer.lock(&peer_name).await?;
                    peer.unlock(hold).await
                };
                if let Err(err) = round.await {
                    peer_failed = Some(err);
                    break;
                }
                peer_samples.push(at.elapsed());
            }
            peer_time += batch.elapsed();
        }
        let batch = Instant::now();
        for _ in 0..BATCH {
            let at = Instant::now();
            let guard = locks.acquire(name).await?;
            guard.release().await?;
            samples.push(at.elapsed());
        }
        lock_time += batch.elapsed();
    }
    let mut rows = Vec::new();
    if let Some(floor) = floor {
        let mut row = row(Workload::Floor, 1, floor_samples, floor_time, None);
        row.note = match floor_failed {
            None => format!("{} (interleaved with uncontended)", floor.floor_ops()),
            Some(err) => format!("failed: {err}"),
        };
        rows.push(row);
    }
    if let Some(peer) = peer {
        let mut row = row(Workload::Uncontended, 1, peer_samples, peer_time, None);
        row.by = By::Peer(peer.label());
        if let Some(err) = peer_failed {
            row.note = format!("failed: {err}");
        }
        rows.push(row);
    }
    rows.push(row(Workload::Uncontended, 1, samples, lock_time, None));
    Ok(rows)
}

/// One client, acquire + release of a new name each time.
pub(crate) async fn new_names(
    locks: &Locks,
    name: &str,
    duration: Duration,
) -> omnilock::Result<Row> {
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < duration {
        let fresh = format!("{name}/{}", samples.len());
        let at = Instant::now();
        let guard = locks.acquire(&fresh).await?;
        guard.release().await?;
        samples.push(at.elapsed());
    }
    Ok(row(Workload::NewNames, 1, samples, started.elapsed(), None))
}

/// `clients` tasks (sharing the handle's connection, each acquisition its own
/// owner) take one lock in turn with an empty critical section; latency is
/// the wait for each grant.
pub(crate) async fn contended(
    locks: &Locks,
    name: &str,
    clients: usize,
    duration: Duration,
) -> omnilock::Result<Row> {
    let shared = vec![locks.clone(); clients];
    contend(&shared, name, duration, Workload::Contended, take_lock).await
}

/// As [`contended`], but each client on its own connection (its own
/// `connect(url)`: its own sessions, leases and store connections), as
/// separate processes of an application are.
pub(crate) async fn contended_apart(
    url: &str,
    name: &str,
    clients: usize,
    duration: Duration,
) -> omnilock::Result<Row> {
    let mut apart = Vec::with_capacity(clients);
    for _ in 0..clients {
        apart.push(omnilock::connect(url).await?);
    }
    let row = contend(&apart, name, duration, Workload::ContendedApart, take_lock).await;
    for locks in apart {
        locks.close().await;
    }
    row
}

fn take_lock<'a>(locks: &'a Locks, name: &str, _: u64) -> omnilock::LockRequest<'a> {
    locks.lock(name)
}

/// Clients of the semaphore and rw workloads.
pub(crate) const SHARED_CLIENTS: usize = 16;

/// The semaphore workload's permits.
const PERMITS: u32 = 4;

/// 16 clients take permits of a 4-permit semaphore again and again: grants
/// per second, the wait for a permit, and fairness over the clients.
pub(crate) async fn semaphore(
    locks: &Locks,
    name: &str,
    duration: Duration,
) -> omnilock::Result<Row> {
    if !locks.capabilities().semaphore {
        let why = "no semaphores on this store";
        return Ok(skipped(Workload::Semaphore, SHARED_CLIENTS, why));
    }
    fn take<'a>(locks: &'a Locks, name: &str, _: u64) -> omnilock::LockRequest<'a> {
        locks.semaphore(name, PERMITS)
    }
    let shared = vec![locks.clone(); SHARED_CLIENTS];
    let row = contend(&shared, name, duration, Workload::Semaphore, take).await?;
    Ok(Row {
        note: format!("{PERMITS} permits"),
        ..row
    })
}

/// 16 clients take a read-write lock again and again, one take in ten a
/// write: grants per second and the wait for a grant.
pub(crate) async fn rw(locks: &Locks, name: &str, duration: Duration) -> omnilock::Result<Row> {
    if !locks.capabilities().rw_lock {
        let why = "no read-write locks on this store";
        return Ok(skipped(Workload::Rw, SHARED_CLIENTS, why));
    }
    fn take<'a>(locks: &'a Locks, name: &str, round: u64) -> omnilock::LockRequest<'a> {
        let lock = locks.rw_lock(name);
        if round % 10 == 9 {
            lock.write()
        } else {
            lock.read()
        }
    }
    let shared = vec![locks.clone(); SHARED_CLIENTS];
    let row = contend(&shared, name, duration, Workload::Rw, take).await?;
    Ok(Row {
        note: "9 reads in 10".to_string(),
        ..row
    })
}

/// One task per handle in `clients`, each taking what `take` builds (given
/// its round) again and again until `duration` is over: grants, waits and
/// fairness.
async fn contend(
    handles: &[Locks],
    name: &str,
    duration: Duration,
    workload: Workload,
    take: for<'a> fn(&'a Locks, &str, u64) -> omnilock::LockRequest<'a>,
) -> omnilock::Result<Row> {
    let clients = handles.len();
    let tally = Tally::new(clients);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (client, locks) in handles.iter().enumerate() {
        let (locks, name, tally) = (locks.clone(), name.to_string(), tally.clone());
        tasks.push(tokio::spawn(async move {
            // Clients start at different rounds, so writes are spread out.
            let mut round = client as u64;
            while started.elapsed() < duration {
                let at = Instant::now();
                let acquire = take(&locks, &name, round).acquire();
                let Some(guard) = until(started + duration, acquire).await? else {
                    break;
                };
                tally.granted(client, at.elapsed());
                guard.release().await?;
                round += 1;
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    Ok(tally.row(workload, clients, started.elapsed()))
}

/// The bookkeeping of a contended run, shared by its clients: each grant's
/// wait, who got it, and how often the lock changed hands.
#[derive(Clone)]
pub(crate) struct Tally(Arc<Mutex<Grants>>);

#[derive(Default)]
struct Grants {
    waits: Vec<Duration>,
    per_client: Vec<u64>,
    last: Option<usize>,
    /// Grants to a client other than the previous one: a waiter served, not
    /// the releaser taking the lock again.
    handoffs: u64,
}

impl Tally {
    pub(crate) fn new(clients: usize) -> Tally {
        Tally(Arc::new(Mutex::new(Grants {
            per_client: vec![0; clients],
            ..Grants::default()
        })))
    }

    /// `client` was granted the lock after waiting `waited`.
    pub(crate) fn granted(&self, client: usize, waited: Duration) {
        let mut grants = self.0.lock().unwrap();
        grants.waits.push(waited);
        grants.per_client[client] += 1;
        if grants.last.is_some_and(|last| last != client) {
            grants.handoffs += 1;
        }
        grants.last = Some(client);
    }

    /// The run's row: the waits, grants/s and fairness; for one lock
    /// (contended, contended-apart), hand-offs/s in the note.
    pub(crate) fn row(&self, workload: Workload, clients: usize, elapsed: Duration) -> Row {
        let grants = std::mem::take(&mut *self.0.lock().unwrap());
        let fairness = Some(jain(&grants.per_client));
        let mut row = row(workload, clients, grants.waits, elapsed, fairness);
        if matches!(workload, Workload::Contended | Workload::ContendedApart) {
            let per_second = grants.handoffs as f64 / elapsed.as_secs_f64();
            row.note =
                format!("{per_second:.0} hand-offs/s (grants to another client than the last)");
        }
        row
    }
}

/// Two clients, each with its own connection as two processes would have:
/// one holds the lock for `hold` while the other is blocked in `acquire()`.
/// A sample runs from the start of the holder's `release()` to the return
/// of the waiter's `acquire()`; then the roles swap, until `duration` is
/// spent (at least one sample). With `floor`, each sample is followed by a
/// floor round after the same idle time (a row of its own): what one round
/// trip costs a machine that has been idle as long as the holder was.
pub(crate) async fn handoff(
    url: &str,
    name: &str,
    hold: Duration,
    duration: Duration,
    floor: Option<&Probe>,
) -> omnilock::Result<Vec<Row>> {
    let clients = [omnilock::connect(url).await?, omnilock::connect(url).await?];
    let started = Instant::now();
    let (mut samples, mut idle_floor) = (Vec::new(), Vec::new());
    let mut floor_failed = None;
    let mut guard = clients[0].acquire(name).await?;
    let mut waiter = 1;
    while samples.is_empty() || started.elapsed() < duration {
        let (locks, name_owned) = (clients[waiter].clone(), name.to_string());
        let waiting = tokio::spawn(async move {
            let guard = locks.acquire(&name_owned).await?;
            Ok::<_, omnilock::Error>((guard, Instant::now()))
        });
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        guard.release().await?;
        let (next, granted) = waiting
            .await
            .map_err(|e| omnilock::Error::new(omnilock::ErrorKind::Backend, e.to_string()))??;
        samples.push(granted - released);
        guard = next;
        waiter = 1 - waiter;
        if let (Some(floor), None) = (floor, &floor_failed) {
            tokio::time::sleep(hold).await;
            let at = Instant::now();
            match floor.floor_round().await {
                Ok(()) => idle_floor.push(at.elapsed()),
                Err(err) => floor_failed = Some(err),
            }
        }
    }
    let elapsed = started.elapsed();
    guard.release().await?;
    for locks in clients {
        locks.close().await;
    }
    let mut rows = Vec::new();
    if let Some(floor) = floor {
        let mut row = row(Workload::Handoff, 1, idle_floor, elapsed, None);
        row.by = By::Floor;
        row.note = match floor_failed {
            None => format!(
                "{} after {hold:?} idle, as the hand-off's holder is (interleaved with handoff)",
                floor.floor_ops(),
            ),
            Some(err) => format!("failed: {err}"),
        };
        rows.push(row);
    }
    rows.push(row(Workload::Handoff, 2, samples, elapsed, None));
    Ok(rows)
}

pub(crate) fn row(
    workload: Workload,
    clients: usize,
    mut samples: Vec<Duration>,
    elapsed: Duration,
    fairness: Option<f64>,
) -> Row {
    samples.sort();
    Row {
        store: String::new(),
        workload,
        clients,
        ops: samples.len(),
        per_second: samples.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
        p999: percentile(&samples, 0.999),
        fairness,
        ratio: None,
        peer_ratio: None,
        by: if workload == Workload::Floor {
            By::Floor
        } else {
            By::Omnilock
        },
        run: 1,
        requests: None,
        note: String::new(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// Jain's fairness index: 1 when every client got the same share, 1/n when
/// one got everything.
fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|c| *c as f64).sum();
    let squares: f64 = counts.iter().map(|c| (*c as f64).powi(2)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (counts.len() as f64 * squares)
}

/// Acquisitions (and releases) in flight at once while the many-held
/// workload takes and gives back its locks.
const HOLDERS: usize = 64;

/// One process holds `count` locks (TTL `ttl`) and keeps them renewed:
/// what each held lock costs in memory (RSS growth over the locks), how many
/// store requests per second their renewals take (from the store's own
/// counter, over 1.2 TTL with nothing else running), and the acquire +
/// release latency of another client meanwhile (the row's latencies).
pub(crate) async fn many_held(
    locks: &Locks,
    other: &Locks,
    probe: Option<&Probe>,
    name: &str,
    count: usize,
    ttl: Duration,
    duration: Duration,
) -> omnilock::Result<Row> {
    // The bench's own list of guards is set aside before counting.
    let held = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let (before, heap_before) = (resident_bytes(), live_heap());
    let mut tasks = Vec::new();
    for holder in 0..HOLDERS {
        let (locks, name, held) = (locks.clone(), name.to_string(), held.clone());
        tasks.push(tokio::spawn(async move {
            for i in (holder..count).step_by(HOLDERS) {
                let guard = locks
                    .lock(&format!("{name}/{i}"))
                    .ttl(ttl)
                    .acquire()
                    .await?;
                held.lock().unwrap().push(guard);
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    let (after, heap_after) = (resident_bytes(), live_heap());
    // Renewals alone: the store's requests over 1.2 TTL, nothing else running.
    let renewal_rate = match probe {
        Some(probe) => {
            let window = ttl.mul_f64(1.2);
            match probe.round_trips_served().await {
                Ok(start) => {
                    let started = Instant::now();
                    tokio::time::sleep(window).await;
                    let end = probe.round_trips_served().await?;
                    Some(end.saturating_sub(start) as f64 / started.elapsed().as_secs_f64())
                }
                Err(err) if err.kind() == omnilock::ErrorKind::Unsupported => None,
                Err(err) => return Err(err),
            }
        }
        None => None,
    };
    // Another client's acquire + release while the locks stay held.
    // Its failures are counted, not fatal: a store that cannot keep up with
    // the renewals is the finding.
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut other_failures = 0;
    while started.elapsed() < duration {
        let at = Instant::now();
        let round = async {
            let guard = other.lock(&format!("{name}/other")).acquire().await?;
            guard.release().await
        };
        match tokio::time::timeout(duration, round).await {
            Ok(Ok(())) => samples.push(at.elapsed()),
            _ => other_failures += 1,
        }
    }
    let elapsed = started.elapsed();
    let guards = std::mem::take(&mut *held.lock().unwrap());
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    // A release that fails is counted, not fatal: the finding is in the row.
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut releases = Vec::new();
    let mut guards = guards.into_iter();
    for _ in 0..HOLDERS {
        let part: Vec<_> = guards.by_ref().take(count.div_ceil(HOLDERS)).collect();
        let failed = failed.clone();
        releases.push(tokio::spawn(async move {
            for guard in part {
                if guard.release().await.is_err() {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(releases).await?;
    let failed = failed.load(std::sync::atomic::Ordering::Relaxed);
    let mut row = row(Workload::ManyHeld, count, samples, elapsed, None);
    let per_lock = |bytes: u64| bytes as f64 / 1024.0 / count as f64;
    let mut memory = format!(
        "{:.2} KiB heap per held lock",
        per_lock(heap_after.saturating_sub(heap_before))
    );
    if let (Some(before), Some(after)) = (before, after) {
        // RSS grows less once an earlier run's freed memory is reused.
        memory.push_str(&format!(
            " ({:.2} KiB RSS)",
            per_lock(after.saturating_sub(before))
        ));
    }
    let renewals = match renewal_rate {
        Some(rate) => format!("{rate:.1} store requests/s renewing them"),
        None => "no request counter for this store".to_string(),
    };
    row.note = format!(
        "{count} locks held (TTL {ttl:?}): {memory}, {renewals}; latencies: another client's \
         acquire + release meanwhile"
    );
    if lost > 0 {
        row.note.push_str(&format!("; {lost} held locks were lost"));
    }
    if failed > 0 {
        row.note.push_str(&format!("; {failed} releases failed"));
    }
    if other_failures > 0 {
        row.note.push_str(&format!(
            "; {other_failures} of the other client's rounds failed or took over {duration:?}"
        ));
    }
    Ok(row)
}

/// Heap bytes live now (the binary installs the counting allocator).
fn live_heap() -> u64 {
    omnilock_harness::heap::live_bytes().unwrap_or(0)
}

/// This process's resident memory in bytes (Linux: /proc/self/statm).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_index() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[20, 0, 0, 0]) - 0.25).abs() < 1e-9);
    }
}
