//! Cancellation safety for store calls that may take a lock.
//!
//! A future dropped while its request is on the wire cannot know whether the
//! store applied it. For a call that may grant a lock, that uncertainty would
//! leave an orphaned lock behind. [`complete_or_undo`] makes such a call
//! always finish: inline while its caller waits, in the background once the
//! caller has gone, and then its result is handed to an undo step (releasing
//! the lock it may have taken).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs `call` to completion even if the returned future is dropped; when it
/// is, the call's output goes to `undo` instead of the caller.
///
/// The call runs inline (no task, no thread hop) as long as the caller polls
/// it; only if the caller drops it unfinished is the rest of the call moved
/// to a background task on the current runtime, followed by `undo`
/// ([`Locks::close`](crate::Locks::close) waits for it). Dropped
/// outside any runtime, the call is abandoned: the lease then frees whatever
/// it may have taken.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let granted = omnilock_core::complete_or_undo(async { 42 }, |_token| async {}).await;
/// assert_eq!(granted, 42);
/// # }
/// ```
pub fn complete_or_undo<T, C, U, UF>(call: C, undo: U) -> CompleteOrUndo<T>
where
    T: Send + 'static,
    C: Future<Output = T> + Send + 'static,
    U: FnOnce(T) -> UF + Send + 'static,
    UF: Future<Output = ()> + Send + 'static,
{
    CompleteOrUndo {
        call: Some(Box::pin(call)),
        abandon: Some(Box::new(move |rest: Call<T>| {
            crate::spawn_cleanup(async move { undo(rest.await).await });
        })),
    }
}

type Call<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The future [`complete_or_undo`] returns.
#[must_use = "futures do nothing unless awaited"]
pub struct CompleteOrUndo<T> {
    call: Option<Call<T>>,
    /// Moves an unfinished call and its undo step to a background task.
    abandon: Option<Box<dyn FnOnce(Call<T>) + Send>>,
}

impl<T> Future for CompleteOrUndo<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let call = self
            .call
            .as_mut()
            .expect("CompleteOrUndo polled after completion");
        match call.as_mut().poll(cx) {
            Poll::Ready(output) => {
                self.call = None;
                self.abandon = None;
                Poll::Ready(output)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for CompleteOrUndo<T> {
    fn drop(&mut self) {
        if let (Some(call), Some(abandon)) = (self.call.take(), self.abandon.take()) {
            abandon(call);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn abandoned_results_are_undone() {
        let undone = Arc::new(AtomicU32::new(0));
        let (started_tx, started_rx) = oneshot::channel();
        let (finish_tx, finish_rx) = oneshot::channel::<()>();
        let u = undone.clone();
        let (done_tx, done_rx) = oneshot::channel();
        let call = complete_or_undo(
            async move {
                let _ = started_tx.send(());
                let _ = finish_rx.await;
                7u32
            },
            move |v| async move {
                u.fetch_add(v, Ordering::SeqCst);
                let _ = done_tx.send(());
            },
        );
        let waiter = tokio::spawn(call);
        started_rx.await.unwrap();
        waiter.abort();
        let _ = waiter.await;
        finish_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(undone.load(Ordering::SeqCst), 7);
    }
}
