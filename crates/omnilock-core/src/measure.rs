//! Hooks for benchmarks (`omnilock bench`): the store's own request counter
//! and one round of the raw operations the backend's algorithm needs, made
//! with the same client library and connection, so that omnilock's latency
//! can be shown as a ratio to that floor measured in the same run.

use async_trait::async_trait;

use crate::error::Result;

/// What a backend offers to benchmarks; see [`Backend::measure`](crate::Backend::measure).
#[async_trait]
pub trait Measure: Send + Sync {
    /// How many requests the store has served so far, from its own counters
    /// (etcd's metrics, ZooKeeper's `mntr`, Redis `INFO commandstats`...),
    /// without lease keep-alives. Comparable only between two reads.
    async fn requests_served(&self) -> Result<u64>;

    /// Like [`Measure::requests_served`], but counting what clients sent:
    /// on Redis a script is one request, whatever commands it runs inside.
    /// The same count on stores that have no such distinction.
    async fn round_trips_served(&self) -> Result<u64> {
        self.requests_served().await
    }

    /// What one floor round does, for the report (e.g. "Txn put-if-absent +
    /// Txn fenced delete").
    fn floor_ops(&self) -> &'static str;

    /// Runs one floor round on a key of its own.
    async fn floor_round(&self) -> Result<()>;
}
