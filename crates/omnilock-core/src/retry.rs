//! Exponential backoff with jitter, shared by renewal, polling waiters and
//! retried store calls.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// Exponential backoff with "equal jitter": each delay is half the current
/// step plus a random part of the other half, so that many clients that failed
/// together do not retry together, while none retries too eagerly.
///
/// ```
/// use std::time::Duration;
/// use omnilock_core::Backoff;
/// let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(80));
/// for _ in 0..10 {
///     let delay = backoff.next_delay();
///     assert!(delay >= Duration::from_millis(5) && delay <= Duration::from_millis(80));
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    /// Starts at `initial` and doubles up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        let max = max.max(initial);
        Backoff {
            initial,
            max,
            step: initial,
        }
    }

    /// The next delay to wait before trying again.
    pub fn next_delay(&mut self) -> Duration {
        let half = self.step / 2;
        let jitter = rand::thread_rng().gen_range(Duration::ZERO..=half);
        self.step = (self.step * 2).min(self.max);
        half + jitter
    }

    /// Back to the initial step, after a success.
    pub fn reset(&mut self) {
        self.step = self.initial;
    }
}

/// Runs `op` until it succeeds, fails with an error that is not
/// [retryable](crate::Error::is_retryable), or the next attempt would start
/// after `deadline`; returns the last result.
pub async fn retry<T, F, Fut>(backoff: Backoff, deadline: Instant, op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    retry_when(backoff, deadline, Error::is_retryable, op).await
}

/// [`retry`] for the errors `again` picks: for a call that is safe to run
/// twice only after some failures, such as a transaction the database
/// rolled back (it took nothing) but not a reply lost on the way back (it
/// may have taken a lock).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use omnilock_core::{retry_when, Backoff, Error, ErrorKind};
/// use tokio::time::Instant;
///
/// let mut calls = 0;
/// let result: Result<(), Error> = retry_when(
///     Backoff::new(Duration::from_millis(1), Duration::from_millis(2)),
///     Instant::now() + Duration::from_secs(1),
///     |e| e.kind() == ErrorKind::Backend,
///     || {
///         calls += 1;
///         async { Err(Error::unavailable("the reply was lost")) }
///     },
/// )
/// .await;
/// assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
/// assert_eq!(calls, 1, "not picked: not tried again");
/// # }
/// ```
pub async fn retry_when<T, F, Fut>(
    mut backoff: Backoff,
    deadline: Instant,
    again: impl Fn(&Error) -> bool,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    loop {
        match op().await {
            Err(err) if again(&err) => {
                let delay = backoff.next_delay();
                if Instant::now() + delay >= deadline {
                    return Err(err);
                }
                tracing::debug!(error = %err, ?delay, "omnilock retrying");
                tokio::time::sleep(delay).await;
            }
            other => return other,
        }
    }
}

/// How often [`retry_in_background`] tries before it gives up.
const BACKGROUND_ATTEMPTS: u32 = 10;

/// Runs `attempt` in a background task on the current runtime, again after a
/// backoff (20 ms doubling to 1 s) while it fails with a
/// [retryable](crate::Error::is_retryable) error, at most 10 times.
///
/// For clean-up nobody waits for, such as deleting the queue entry of a
/// dropped acquire: the caller must not wait (a dropped future cannot), and
/// a store that stalls for a moment must not leave the entry behind until
/// its lease runs out. Outside any runtime nothing runs: the lease then
/// removes whatever was left. A caller that must know when the clean-up is
/// over (before it tries again what the clean-up undoes) awaits the
/// returned task; [`Locks::close`](crate::Locks::close) waits for it too.
pub fn retry_in_background<F, Fut>(mut attempt: F) -> Option<tokio::task::JoinHandle<()>>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    crate::spawn_cleanup(async move {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        for _ in 0..BACKGROUND_ATTEMPTS {
            match attempt().await {
                Err(err) if err.is_retryable() => tokio::time::sleep(backoff.next_delay()).await,
                _ => return,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, ErrorKind};
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn grows_to_max() {
        let mut backoff = Backoff::new(Duration::from_millis(4), Duration::from_millis(32));
        let delays: Vec<_> = (0..8).map(|_| backoff.next_delay()).collect();
        assert!(delays[7] >= Duration::from_millis(16));
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(32)));
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(4));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_only_retryable_errors() {
        let calls = AtomicU32::new(0);
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
        let deadline = Instant::now() + Duration::from_secs(10);
        let result = retry(backoff.clone(), deadline, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0..=2 => Err(Error::unavailable("flaky")),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 4);

        calls.store(0, Ordering::SeqCst);
        let result: Result<()> = retry(backoff, deadline, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::new(ErrorKind::NotOwner, "no"))
        })
        .await;
        assert_eq!(result.unwrap_err().kind(), ErrorKind::NotOwner);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn background_retries_stop_on_success_or_after_ten() {
        let calls = std::sync::Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        retry_in_background(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(Error::unavailable("flaky"))
                } else {
                    Ok(())
                }
            }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let calls = std::sync::Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        retry_in_background(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(Error::unavailable("down")) }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(calls.load(Ordering::SeqCst), BACKGROUND_ATTEMPTS);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_at_deadline() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
        let deadline = Instant::now() + Duration::from_millis(500);
        let result: Result<()> = retry(backoff, deadline, || async {
            Err(Error::unavailable("down"))
        })
        .await;
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Unavailable);
        // The last sleep ended before the deadline, give or take the
        // timer's 1 ms resolution (a sleep's end is rounded up to it).
        assert!(Instant::now() <= deadline + Duration::from_millis(1));
    }
}
