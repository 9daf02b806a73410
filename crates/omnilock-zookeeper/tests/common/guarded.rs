//! The conformance suite's guarded writes on ZooKeeper: records as nodes,
//! each written by the application's own `multi` with
//! `omnilock_zookeeper::OwnerCheck`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use omnilock_core::{Error, LockGuard, Result, async_trait};
use omnilock_testkit::{GuardedWrite, GuardedWrites};
use omnilock_zookeeper::{OwnerCheck, ZkConfig};
use zookeeper_client::{Acls, Client, CreateMode};

const RECORDS: &str = "/omnilock-guarded-records";

/// Opens the guarded writes of a subject with `config`'s settings, on a
/// client of its own (the application's).
pub(crate) fn opener(
    config: ZkConfig,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Arc<dyn GuardedWrites>> + Send>>
+ Send
+ Sync
+ 'static {
    move || {
        let config = config.clone();
        Box::pin(async move {
            let client = super::app_client(&config, Duration::from_secs(10)).await;
            ensure(&client, RECORDS).await.expect("the records' parent");
            Arc::new(ZkRecords { client }) as Arc<dyn GuardedWrites>
        })
    }
}

/// Creates `path` empty unless it exists.
async fn ensure(client: &Client, path: &str) -> Result<()> {
    let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match client.create(path, b"", &mode).await {
        Ok(_) | Err(zookeeper_client::Error::NodeExists) => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

fn path(record: &str) -> String {
    format!("{RECORDS}/{}", record.replace('/', "%2F"))
}

fn failed(e: zookeeper_client::Error) -> Error {
    Error::unavailable(format!("the application's request: {e}"))
}

struct ZkRecords {
    client: Client,
}

#[async_trait]
impl GuardedWrites for ZkRecords {
    fn prepare(&self, guard: &LockGuard, record: &str) -> Result<Box<dyn GuardedWrite>> {
        Ok(Box::new(ZkWrite {
            client: self.client.clone(),
            owner: OwnerCheck::new(guard)?,
            path: path(record),
        }))
    }

    async fn read(&self, record: &str) -> Result<Option<u64>> {
        match self.client.get_data(&path(record)).await {
            Ok((data, _)) if data.is_empty() => Ok(None),
            Ok((data, _)) => Ok(Some(
                String::from_utf8_lossy(&data).parse().expect("a number"),
            )),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(e) => Err(failed(e)),
        }
    }
}

struct ZkWrite {
    client: Client,
    owner: OwnerCheck,
    path: String,
}

#[async_trait]
impl GuardedWrite for ZkWrite {
    async fn write(&self, value: u64) -> Result<bool> {
        // The record exists before the guarded write, which only sets it.
        ensure(&self.client, &self.path).await?;
        let mut writer = self.client.new_multi_writer();
        self.owner.add_to(&mut writer)?;
        writer
            .add_set_data(&self.path, value.to_string().as_bytes(), None)
            .map_err(failed)?;
        match writer.commit().await {
            Ok(_) => Ok(true),
            // The check failed: the hold's node is gone.
            Err(zookeeper_client::MultiWriteError::OperationFailed {
                index: 0,
                source: zookeeper_client::Error::NoNode | zookeeper_client::Error::BadVersion,
            }) => Ok(false),
            Err(e) => Err(Error::unavailable(format!("the application's multi: {e}"))),
        }
    }
}
