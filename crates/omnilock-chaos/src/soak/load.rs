//! The steady load of a soak: clients, each with a `Locks` of its own (its
//! own connections, as separate applications have), looping over a mix of
//! every primitive on a fixed set of names. Errors are expected while a
//! store is faulted: they are counted by operation and kind, never fatal.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnilock::{Locks, MultiGuard};
use rand::Rng;
use serde::Serialize;

/// Permits of every semaphore of the soak (a name is always asked for
/// with the same count).
const PERMITS: u32 = 3;

/// How a client behaves.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Names the clients of one store spread over, split by primitive: half
    /// mutexes, a quarter semaphores, a quarter read-write locks.
    pub names: u32,
    /// The longest a guard is held (a random time from 1 ms to this).
    pub hold: Duration,
    /// The mean pause between two operations of a client (uniform, 0 to
    /// twice this).
    pub think: Duration,
    /// The lease of every acquisition.
    pub ttl: Duration,
    /// The longest an acquire waits.
    pub wait: Duration,
}

/// What the clients of one store did.
#[derive(Debug, Default)]
pub struct Tally {
    /// Grants (a `lock_all` counts once).
    pub grants: AtomicU64,
    /// Tries that found the lock busy.
    pub busy: AtomicU64,
    /// Guards dropped without a release (released in the background).
    pub dropped: AtomicU64,
    /// Errors by `<operation> <kind>` (`acquire Timeout`, `release Unavailable`).
    pub errors: Mutex<BTreeMap<String, u64>>,
}

/// A [`Tally`] as numbers, for the summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    /// See [`Tally::grants`].
    pub grants: u64,
    /// See [`Tally::busy`].
    pub busy: u64,
    /// See [`Tally::dropped`].
    pub dropped: u64,
    /// See [`Tally::errors`].
    pub errors: BTreeMap<String, u64>,
}

impl Tally {
    fn error(&self, operation: &str, err: &omnilock::Error) {
        let key = format!("{operation} {:?}", err.kind());
        *self.errors.lock().unwrap().entry(key).or_default() += 1;
    }

    /// The errors so far, all kinds.
    pub fn error_total(&self) -> u64 {
        self.errors.lock().unwrap().values().sum()
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            grants: self.grants.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            errors: self.errors.lock().unwrap().clone(),
        }
    }
}

/// One operation of the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Wait for a mutex, hold it, release it.
    Acquire,
    /// Try a mutex once.
    Try,
    /// A permit of a semaphore.
    Permit,
    /// The read side of a read-write lock.
    Read,
    /// The write side.
    Write,
    /// Two mutexes at once through `lock_all`.
    Both,
}

/// The mix, by weight.
const MIX: &[(Op, u32)] = &[
    (Op::Acquire, 30),
    (Op::Try, 20),
    (Op::Permit, 15),
    (Op::Read, 12),
    (Op::Write, 8),
    (Op::Both, 15),
];

/// One guard in every this many is dropped instead of released.
const DROP_ONE_IN: u32 = 16;

fn pick_op(rng: &mut impl Rng) -> Op {
    let total: u32 = MIX.iter().map(|(_, w)| w).sum();
    let mut at = rng.gen_range(0..total);
    for (op, weight) in MIX {
        if at < *weight {
            return *op;
        }
        at -= weight;
    }
    Op::Acquire
}

/// A random name of the primitive `class` takes: mutexes are the names
/// 0 and 1 mod 4, semaphores 2, read-write locks 3.
fn name(rng: &mut impl Rng, names: u32, class: u32) -> String {
    let slots = (names / 4).max(1);
    let n = rng.gen_range(0..slots) * 4 + class + if class == 0 { rng.gen_range(0..2) } else { 0 };
    let kind = match class {
        2 => "semaphore",
        3 => "rw",
        _ => "mutex",
    };
    format!("soak/{kind}/{n}")
}

/// Loops operations on `locks` until `stop`.
pub async fn client(
    locks: &Locks,
    workload: Arc<Workload>,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) {
    let capabilities = locks.capabilities();
    while !stop.load(Ordering::Relaxed) {
        let (op, hold, think, drop_it) = {
            let mut rng = rand::thread_rng();
            let mut op = pick_op(&mut rng);
            if (op == Op::Permit && !capabilities.semaphore)
                || (matches!(op, Op::Read | Op::Write) && !capabilities.rw_lock)
            {
                op = Op::Acquire;
            }
            let hold = rng.gen_range(1..=workload.hold.as_millis().max(1) as u64);
            let think = workload.think.mul_f64(rng.gen_range(0.0..2.0));
            (
                op,
                Duration::from_millis(hold),
                think,
                rng.gen_ratio(1, DROP_ONE_IN),
            )
        };
        let failed = match operate(locks, &workload, &tally, op, hold, drop_it).await {
            Ok(()) => false,
            Err((operation, err)) => {
                tally.error(operation, &err);
                err.kind() != omnilock::ErrorKind::Timeout
            }
        };
        // After an error, a pause of its own: a store that is down is not
        // asked in a tight loop.
        let pause = if failed {
            think + Duration::from_millis(rand::thread_rng().gen_range(100..300))
        } else {
            think
        };
        tokio::time::sleep(pause).await;
    }
}

type Failure = (&'static str, omnilock::Error);

async fn operate(
    locks: &Locks,
    workload: &Workload,
    tally: &Tally,
    op: Op,
    hold: Duration,
    drop_it: bool,
) -> Result<(), Failure> {
    let (names, ttl, wait) = (workload.names, workload.ttl, workload.wait);
    if op == Op::Both {
        let (a, b) = {
            let mut rng = rand::thread_rng();
            let a = name(&mut rng, names, 0);
            let mut b = name(&mut rng, names, 0);
            while b == a {
                b = name(&mut rng, names, 0);
            }
            (a, b)
        };
        let both = locks
            .lock_all([a, b])
            .ttl(ttl)
            .timeout(wait)
            .acquire()
            .await
            .map_err(|e| ("lock_all", e))?;
        tally.grants.fetch_add(1, Ordering::Relaxed);
        return hold_and_let_go_all(both, hold, drop_it, tally).await;
    }
    let name = {
        let mut rng = rand::thread_rng();
        let class = match op {
            Op::Permit => 2,
            Op::Read | Op::Write => 3,
            _ => 0,
        };
        name(&mut rng, names, class)
    };
    let rw = locks.rw_lock(&name);
    let request = match op {
        Op::Permit => locks.semaphore(&name, PERMITS),
        Op::Read => rw.read(),
        Op::Write => rw.write(),
        _ => locks.lock(&name),
    }
    .ttl(ttl)
    .timeout(wait);
    let guard = if op == Op::Try {
        match request
            .try_acquire()
            .await
            .map_err(|e| ("try_acquire", e))?
        {
            Some(guard) => guard,
            None => {
                tally.busy.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
    } else {
        request.acquire().await.map_err(|e| ("acquire", e))?
    };
    tally.grants.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(hold).await;
    if drop_it {
        tally.dropped.fetch_add(1, Ordering::Relaxed);
        drop(guard);
        return Ok(());
    }
    guard.release().await.map_err(|e| ("release", e))
}

async fn hold_and_let_go_all(
    both: MultiGuard,
    hold: Duration,
    drop_it: bool,
    tally: &Tally,
) -> Result<(), Failure> {
    tokio::time::sleep(hold).await;
    if drop_it {
        tally.dropped.fetch_add(1, Ordering::Relaxed);
        drop(both);
        return Ok(());
    }
    both.release().await.map_err(|e| ("release_all", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_to_their_primitive() {
        let mut rng = rand::thread_rng();
        for _ in 0..1000 {
            let mutex = name(&mut rng, 1000, 0);
            let n: u32 = mutex.rsplit('/').next().unwrap().parse().unwrap();
            assert!(
                mutex.starts_with("soak/mutex/") && n % 4 < 2 && n < 1000,
                "{mutex}"
            );
            let sem = name(&mut rng, 1000, 2);
            let n: u32 = sem.rsplit('/').next().unwrap().parse().unwrap();
            assert!(sem.starts_with("soak/semaphore/") && n % 4 == 2, "{sem}");
            let rw = name(&mut rng, 1000, 3);
            assert!(rw.starts_with("soak/rw/"), "{rw}");
        }
    }

    #[test]
    fn the_mix_takes_every_operation() {
        let mut rng = rand::thread_rng();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            seen.insert(format!("{:?}", pick_op(&mut rng)));
        }
        assert_eq!(seen.len(), MIX.len());
    }

    #[tokio::test]
    async fn a_client_on_memory_grants_and_stops() {
        let locks = omnilock::connect("mem://").await.unwrap();
        let workload = Arc::new(Workload {
            names: 8,
            hold: Duration::from_millis(2),
            think: Duration::from_millis(1),
            ttl: Duration::from_secs(5),
            wait: Duration::from_secs(1),
        });
        let (tally, stop) = (Arc::new(Tally::default()), Arc::new(AtomicBool::new(false)));
        let (counted, stopping) = (tally.clone(), stop.clone());
        let task = tokio::spawn(async move { client(&locks, workload, tally, stop).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        stopping.store(true, Ordering::SeqCst);
        task.await.unwrap();
        let counts = counted.counts();
        assert!(counts.grants > 10, "{counts:?}");
        assert!(counts.errors.is_empty(), "{counts:?}");
    }
}
