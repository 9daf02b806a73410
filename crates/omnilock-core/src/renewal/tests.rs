//! The renewal task against stores that hang or slow down.

use async_trait::async_trait;

use super::*;
use crate::backend::{AcquireRequest, Backend, Capabilities, Grant};
use crate::error::Result;
use crate::{Locks, MemStore};

/// How [`FaultyRenewals`] answers a renewal call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// As the in-memory store does.
    None,
    /// A call naming a `stall/` lock never answers (a store that hangs on
    /// one request while others go through).
    HangOnStall,
    /// A call for several holds answers only after [`BATCH_DELAY`], and
    /// one for a single hold never does (a loaded store, with the slower
    /// per-lock requests queued behind everything else).
    SlowBatches,
}

const BATCH_DELAY: Duration = Duration::from_millis(450);

/// The in-memory store, whose renewals misbehave as `fault` says once
/// it is set.
#[derive(Debug)]
struct FaultyRenewals {
    store: MemStore,
    fault: Arc<Mutex<Fault>>,
    /// A call hung on a `stall/` lock.
    stalled: Arc<Notify>,
}

impl FaultyRenewals {
    fn new() -> Self {
        FaultyRenewals {
            store: MemStore::default(),
            fault: Arc::new(Mutex::new(Fault::None)),
            stalled: Arc::default(),
        }
    }
}

#[async_trait]
impl Backend for FaultyRenewals {
    type Hold = <MemStore as Backend>::Hold;
    fn kind(&self) -> &'static str {
        "mem"
    }
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<Grant<Self::Hold>>> {
        self.store.try_acquire(request).await
    }
    async fn acquire(&self, request: &AcquireRequest) -> Result<Grant<Self::Hold>> {
        self.store.acquire(request).await
    }
    async fn release(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<()> {
        self.store.release(spec, grant).await
    }
    async fn renew(&self, spec: &LockSpec, grant: &Grant<Self::Hold>) -> Result<Instant> {
        self.store.renew(spec, grant).await
    }
    async fn renew_all(&self, holds: &[(&LockSpec, &Grant<Self::Hold>)]) -> Vec<Result<Instant>> {
        let fault = *lock(&self.fault);
        match fault {
            Fault::None => {}
            Fault::HangOnStall => {
                let stalls = holds
                    .iter()
                    .any(|(spec, _)| spec.name.as_str().starts_with("stall/"));
                if stalls {
                    self.stalled.notify_one();
                    std::future::pending::<()>().await;
                }
            }
            Fault::SlowBatches => {
                if holds.len() == 1 {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(BATCH_DELAY).await;
            }
        }
        self.store.renew_all(holds).await
    }
}

/// A renewal call that hangs until its leases run out holds back
/// neither the holds that come due meanwhile (here with a shorter TTL,
/// renewed several times during the hang) nor the lost signal of the
/// hold whose renewal hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_renewal_holds_back_no_other_hold() {
    let backend = FaultyRenewals::new();
    let (fault, stalled) = (backend.fault.clone(), backend.stalled.clone());
    let locks = Locks::new(backend);
    let slow_ttl = Duration::from_secs(3);
    let fast_ttl = Duration::from_millis(600);
    let hung = locks
        .lock("stall/a")
        .ttl(slow_ttl)
        .acquire()
        .await
        .expect("acquire");
    let fast = locks
        .lock("fast/b")
        .ttl(fast_ttl)
        .acquire()
        .await
        .expect("acquire");
    let first_deadline = fast.safe_until();
    *lock(&fault) = Fault::HangOnStall;
    tokio::time::timeout(slow_ttl, stalled.notified())
        .await
        .expect("the stalled renewal started");
    // The hung hold is reported lost once its lease is over.
    let loss = tokio::time::timeout(slow_ttl * 2, hung.lost())
        .await
        .expect("the lost signal fires while the store hangs");
    assert_eq!(loss.kind(), ErrorKind::LockLost, "{loss}");
    // Meanwhile (more than 2 of its TTLs), the other hold stayed held
    // and was renewed.
    assert!(fast.is_held(), "a hold renewed beside a hung call was lost");
    assert!(
        fast.safe_until() > first_deadline + fast_ttl,
        "the other hold was not renewed while a renewal hung"
    );
    fast.release().await.expect("release");
}

/// A batch that answers late, after its holds have started to be
/// renewed one by one as well, still renews them all: its call is not
/// abandoned for single calls on the same loaded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_batch_still_renews_its_holds() {
    let backend = FaultyRenewals::new();
    let fault = backend.fault.clone();
    let locks = Locks::new(backend);
    // Renewed every 300 ms, with 600 ms of lease left: the batch's
    // 450 ms answer comes after the 300 ms its holds wait for it alone.
    let ttl = Duration::from_millis(900);
    let (a, b) = tokio::join!(
        locks.lock("slow/a").ttl(ttl).acquire(),
        locks.lock("slow/b").ttl(ttl).acquire()
    );
    let (a, b) = (a.expect("acquire"), b.expect("acquire"));
    let first_deadline = a.safe_until().max(b.safe_until());
    *lock(&fault) = Fault::SlowBatches;
    tokio::select! {
        loss = a.lost() => panic!("a renewed lock was lost: {loss}"),
        loss = b.lost() => panic!("a renewed lock was lost: {loss}"),
        _ = tokio::time::sleep(ttl * 3) => {}
    }
    for guard in [&a, &b] {
        assert!(guard.is_held(), "a lock renewed by a slow batch was lost");
        assert!(
            guard.safe_until() > first_deadline + ttl,
            "a slow batch did not renew its locks"
        );
    }
    *lock(&fault) = Fault::None;
    a.release().await.expect("release");
    b.release().await.expect("release");
}
