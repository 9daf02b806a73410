//! The conformance suite's guarded writes on etcd: records as keys, each
//! written by the application's own `Txn` under `omnilock_etcd::is_owner`.

use std::future::Future;
use std::sync::Arc;

use etcd_client::{Client, Compare, Txn, TxnOp};
use omnilock_core::{Error, LockGuard, Result, async_trait};
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::{GuardedWrite, GuardedWrites};

/// Opens the guarded writes of a subject with `config`'s settings, on a
/// client of its own (the application's).
pub(crate) fn opener(
    config: EtcdConfig,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Arc<dyn GuardedWrites>> + Send>>
+ Send
+ Sync
+ 'static {
    move || {
        let config = config.clone();
        Box::pin(async move {
            let client = super::app_client(&config).await.expect("app client");
            Arc::new(EtcdRecords { client }) as Arc<dyn GuardedWrites>
        })
    }
}

/// Where a record lives: under the test user's `omnilock/` grant, as one
/// key segment.
fn key(record: &str) -> String {
    format!("omnilock/guarded-records/{}", record.replace('/', "%2F"))
}

fn failed(e: etcd_client::Error) -> Error {
    Error::unavailable(format!("the application's request: {e}"))
}

struct EtcdRecords {
    client: Client,
}

#[async_trait]
impl GuardedWrites for EtcdRecords {
    fn prepare(&self, guard: &LockGuard, record: &str) -> Result<Box<dyn GuardedWrite>> {
        Ok(Box::new(EtcdWrite {
            client: self.client.clone(),
            owner: omnilock_etcd::is_owner(guard)?,
            key: key(record),
        }))
    }

    async fn read(&self, record: &str) -> Result<Option<u64>> {
        let got = self
            .client
            .kv_client()
            .get(key(record), None)
            .await
            .map_err(failed)?;
        Ok(got.kvs().first().map(|kv| {
            String::from_utf8_lossy(kv.value())
                .parse()
                .expect("a number")
        }))
    }
}

struct EtcdWrite {
    client: Client,
    owner: Compare,
    key: String,
}

#[async_trait]
impl GuardedWrite for EtcdWrite {
    async fn write(&self, value: u64) -> Result<bool> {
        let txn = Txn::new().when([self.owner.clone()]).and_then([TxnOp::put(
            self.key.clone(),
            value.to_string(),
            None,
        )]);
        let done = self.client.kv_client().txn(txn).await.map_err(failed)?;
        Ok(done.succeeded())
    }
}
