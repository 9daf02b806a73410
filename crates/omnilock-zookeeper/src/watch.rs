//! Waiting for a ZooKeeper watch to fire.

use zookeeper_client::OneshotWatcher;

/// Waits until `watcher` fires. zookeeper-client 0.11 panics inside a
/// watcher whose session goes away without delivering an event (its
/// sender dropped, as when the client's task ends with the runtime). Every
/// caller reads again after any change, so that ending counts as one: the
/// wait runs in a task of its own, which keeps the panic there, and the
/// task is aborted when this future is dropped.
pub(crate) async fn fired(watcher: OneshotWatcher) {
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(async move {
        watcher.changed().await;
    }));
    let _ = (&mut task.0).await;
}
