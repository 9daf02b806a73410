//! Cancellation safety for store calls that may take a lock.
//!
//! A future dropped while its request is on the wire cannot know whether the
//! store applied it. For a call that may grant a lock, that uncertainty would
//! leave an orphaned lock behind. [`complete_or_undo`] runs such a call as its
//! own task, so it always finishes; if the caller has gone by then, the result
//! is handed to an undo step (releasing the lock it may have taken).

use std::future::Future;

use tokio::sync::oneshot;

/// Runs `call` to completion even if the returned future is dropped; when it
/// is, the call's output goes to `undo` instead of the caller.
///
/// Must be called within a tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let granted = omnilock_core::complete_or_undo(async { 42 }, |_token| async {}).await;
/// assert_eq!(granted, 42);
/// # }
/// ```
pub async fn complete_or_undo<T, C, U, UF>(call: C, undo: U) -> T
where
    T: Send + 'static,
    C: Future<Output = T> + Send + 'static,
    U: FnOnce(T) -> UF + Send + 'static,
    UF: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let output = call.await;
        if let Err(abandoned) = tx.send(output) {
            undo(abandoned).await;
        }
    });
    match rx.await {
        Ok(output) => output,
        // The task only ends without sending if it panicked (or the runtime is
        // shutting down); surface that as the panic it was.
        Err(_) => panic!("omnilock: a detached store call did not complete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

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
