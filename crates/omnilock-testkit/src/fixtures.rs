//! Fixtures for the backends' own test binaries: the checks that several
//! stores' specific tests share (connecting where nothing listens, a
//! builder's refusals, a chain of hand-offs, polling a store's raw state),
//! written once here beside the conformance scenarios, which they do not
//! replace: a guarantee every store gives belongs in [`crate::scenarios`].

use std::future::Future;
use std::time::{Duration, Instant};

use omnilock_core::{Error, ErrorKind, LockRequest, Locks, Result};
use tokio::task::JoinHandle;

use crate::Subject;

/// A name unique to this process and moment, `<what>-<pid>-<nanos>`: no
/// `/`, so it is one node or key segment of any store as it is.
pub fn unique_name(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

/// The subject `<store>-byo` of a bring-your-own-client suite: each client
/// is built by `build` from the store's `settings` (read from its test URL),
/// on a client of the store's own library.
pub fn byo_subject<S, F, Fut>(store: &str, settings: S, build: F) -> Subject
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Locks>> + Send + 'static,
{
    let label = format!("{}-byo", store.to_lowercase());
    // The suite's URL subjects run the same store code in full; what a
    // brought client adds is its connection.
    Subject::new(label, move || build(settings.clone())).connection_variant()
}

/// Connecting (or building a store) where nothing answers: `connect` fails
/// with `Unavailable` within `within`, its message names `whom` (the
/// endpoints, or whose client it was), and neither the message nor the
/// debug form shows `password`. Returns the error for further checks.
pub async fn assert_unreachable<T>(
    connect: impl Future<Output = Result<T>>,
    whom: &str,
    password: Option<&str>,
    within: Duration,
) -> Error {
    let started = Instant::now();
    let Err(err) = connect.await else {
        panic!("connected to {whom}, where nothing answers");
    };
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(took < within, "{whom}: took {took:?}, not under {within:?}");
    let text = format!("{err} {err:?}");
    assert!(text.contains(whom), "does not name {whom}: {text}");
    if let Some(password) = password {
        assert!(!text.contains(password), "leaks the password: {text}");
    }
    err
}

/// `result` is refused with `InvalidConfig` and a message containing
/// `words` (a builder's option checks). Returns the error.
pub fn assert_refused<T>(result: Result<T>, words: &str) -> Error {
    assert_refused_as(result, ErrorKind::InvalidConfig, words)
}

/// `result` is refused with `kind` and a message containing `words` (for
/// example `Auth` for credentials a server refused). Returns the error.
pub fn assert_refused_as<T>(result: Result<T>, kind: ErrorKind, words: &str) -> Error {
    let Err(err) = result else {
        panic!("accepted what should be refused ({words})");
    };
    assert_eq!(err.kind(), kind, "{words}: {err}");
    assert!(err.to_string().contains(words), "{words}: {err}");
    err
}

/// A store builder refuses, when it builds, a zero timeout and a 1 ms TTL
/// (which every store's builder has) and each option given, each on its
/// own: `InvalidConfig`, with the option's words (see [`assert_refused`]).
/// The builder expression is evaluated afresh for every option.
///
/// ```ignore
/// assert_builder_refuses!(EtcdStore::builder(client.clone());
///     prefix("a//b") => "prefix",
/// );
/// ```
#[macro_export]
macro_rules! assert_builder_refuses {
    ($builder:expr; $($option:ident($($arg:expr),*) => $words:expr),* $(,)?) => {
        $crate::assert_builder_refuses!(@one $builder; timeout(::std::time::Duration::ZERO) => "timeout");
        $crate::assert_builder_refuses!(@one $builder; ttl(::std::time::Duration::from_millis(1)) => "TTL");
        $($crate::assert_builder_refuses!(@one $builder; $option($($arg),*) => $words);)*
    };
    (@one $builder:expr; $option:ident($($arg:expr),*) => $words:expr) => {
        $crate::fixtures::assert_refused($builder.$option($($arg),*).build().await, $words);
    };
}

/// A builder refuses an option with the very words the URL parser uses.
pub fn assert_same_refusal<T, U>(from_url: Result<T>, from_builder: Result<U>) {
    let (Err(from_url), Err(from_builder)) = (from_url, from_builder) else {
        panic!("the URL or the builder accepted an option the other refuses");
    };
    assert_eq!(from_url.message(), from_builder.message());
}

/// Try-acquires `name` on `locks` (it must be free) and releases it: one
/// uncontended round, proof that a client works.
pub async fn take_and_release(locks: &Locks, name: &str) {
    let guard = locks
        .try_acquire(name)
        .await
        .expect("acquire")
        .expect("free");
    guard.release().await.expect("release");
}

/// `waiters` acquires of `name` (held by another) on `locks` at once, each
/// given up by its `timeout`: every one must end in `Timeout`. What they
/// leave behind is for the caller to look for in the store.
pub async fn time_out_waiters(locks: &Locks, name: &str, waiters: usize, timeout: Duration) {
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (locks, name) = (locks.clone(), name.to_string());
            tokio::spawn(async move {
                locks
                    .lock(&name)
                    .timeout(timeout)
                    .acquire()
                    .await
                    .map(|_| ())
            })
        })
        .collect();
    for task in tasks {
        let err = task
            .await
            .expect("waiter task")
            .expect_err("the lock is held");
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
}

/// Asks `check` every 50 ms until it answers `Ok`, for state a store
/// changes in the background (a cancelled waiter's entry, an empty
/// container) and announces to no one; fails with `what` and the last
/// `Err` if that takes longer than `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(done) => return done,
            Err(why) => assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}: {why}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What each waiter of a hand-off chain takes: a lock, a permit, a side of
/// a read-write lock.
pub type Link = for<'a> fn(&'a Locks, &str) -> LockRequest<'a>;

/// Queues `waiters` acquisitions of `name` (held by the caller) with
/// `link`, on `clients` in turn, each releasing as soon as it is granted,
/// and returns once every one reports waiting. The caller's release starts
/// the chain of hand-offs; the tasks end when their waiter has released.
pub async fn queue_handoff_chain(
    clients: &[Locks],
    name: &str,
    waiters: usize,
    ttl: Duration,
    link: Link,
) -> Vec<JoinHandle<()>> {
    let mut chain = Vec::with_capacity(waiters);
    for i in 0..waiters {
        let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
        let locks = clients[i % clients.len()].clone();
        let name = name.to_string();
        chain.push(tokio::spawn(async move {
            let guard = link(&locks, &name)
                .ttl(ttl)
                .on_wait(move || {
                    let _ = queued_tx.send(());
                })
                .acquire()
                .await
                .expect("waiter");
            guard.release().await.expect("release");
        }));
        crate::scenarios::within("a waiter reports that it waits", queued_rx)
            .await
            .expect("queued");
    }
    chain
}

/// Checks that an election observer on `locks` follows the store's watch:
/// with a poll interval of an hour, it still reports each of two leaders in
/// turn and each resignation, within `within`.
pub async fn assert_observer_follows_the_watch(locks: &Locks, within: Duration) {
    let election = locks
        .election(&unique_name("watched"))
        .with_poll_interval(Duration::from_secs(3600));
    let mut observer = election.observe();
    assert!(
        next_change(&mut observer, within).await.is_none(),
        "nobody leads at the start"
    );
    for value in ["first", "second"] {
        let leader = election.campaign(value).await.expect("campaign");
        let seen = next_change(&mut observer, within).await.expect("a leader");
        assert_eq!((seen.value.as_str(), seen.term), (value, leader.term()));
        leader.resign().await.expect("resign");
        assert!(
            next_change(&mut observer, within).await.is_none(),
            "nobody leads after {value} resigned"
        );
    }
}

/// The observer's next answer, within `within`.
async fn next_change(
    observer: &mut omnilock_core::Observer,
    within: Duration,
) -> Option<omnilock_core::Leader> {
    tokio::time::timeout(within, observer.changed())
        .await
        .expect("the observer reports the change within the limit")
        .expect("the observer reads the store")
}
