//! The conformance suite's guarded writes on Redis: records as keys in the
//! lock's hash slot, each written by `omnilock_redis::GuardedWrite` and read
//! back through a store connection of their own.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use omnilock_core::{ErrorKind, LockGuard, Result, StoreUrl, async_trait};
use omnilock_redis::{GuardedWrite as Write, RedisConfig, RedisStore};
use omnilock_testkit::{GuardedWrite, GuardedWrites};

/// Opens the guarded writes of a subject on the store at `url`: its reads
/// go through a store opened on their own.
pub(crate) fn opener(
    url: String,
) -> impl Fn() -> Pin<Box<dyn Future<Output = Arc<dyn GuardedWrites>> + Send>> + Send + Sync + 'static
{
    move || {
        let url = url.clone();
        Box::pin(async move {
            let config = RedisConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
            let reader = RedisStore::connect(config)
                .await
                .expect("the reader's store");
            Arc::new(RedisRecords {
                reader,
                keys: Mutex::new(HashMap::new()),
            }) as Arc<dyn GuardedWrites>
        })
    }
}

struct RedisRecords {
    reader: RedisStore,
    /// Each record's key, named after the first lock that wrote it (the
    /// key must be in the lock's slot on a cluster).
    keys: Mutex<HashMap<String, String>>,
}

#[async_trait]
impl GuardedWrites for RedisRecords {
    fn prepare(&self, guard: &LockGuard, record: &str) -> Result<Box<dyn GuardedWrite>> {
        let write = Write::new(guard)?;
        let key = self
            .keys
            .lock()
            .unwrap()
            .entry(record.to_string())
            .or_insert_with(|| write.key(record))
            .clone();
        Ok(Box::new(RedisWrite {
            write,
            key,
            conn: self.reader.connection(),
        }))
    }

    async fn read(&self, record: &str) -> Result<Option<u64>> {
        let key = self.keys.lock().unwrap().get(record).cloned();
        let Some(key) = key else { return Ok(None) };
        let value: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut self.reader.connection())
            .await
            .map_err(|e| omnilock_core::Error::unavailable(format!("GET {key}: {e}")))?;
        Ok(value.map(|v| v.parse().expect("a number")))
    }
}

/// A prepared write, applied through the application's connection: the
/// holder's own store may be gone (a vanished holder).
struct RedisWrite {
    write: Write,
    key: String,
    conn: omnilock_redis::RedisConnection,
}

#[async_trait]
impl GuardedWrite for RedisWrite {
    async fn write(&self, value: u64) -> Result<bool> {
        match self
            .write
            .clone()
            .set(&self.key, value.to_string())
            .commit_on(&mut self.conn.clone())
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::LockLost | ErrorKind::StaleToken) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
