//! Benchmark hooks for one instance: the server's own command counters and
//! the classic single-instance floor (`SET NX PX` + an owner-checked
//! `EVALSHA` delete).

use omnilock_core::{async_trait, Measure, Result};
use redis::Script;

use crate::single::RedisStore;

/// The owner-checked delete every Redis lock needs at least.
const FLOOR_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

#[async_trait]
impl Measure for RedisStore {
    /// Commands run (`INFO commandstats`, commands inside scripts included),
    /// except `INFO` itself and connection housekeeping.
    async fn requests_served(&self) -> Result<u64> {
        let node = self.node();
        let mut conn = node.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .map_err(|e| node.err(e))?;
        Ok(info
            .lines()
            .filter_map(|line| line.strip_prefix("cmdstat_"))
            .filter(|line| {
                !["info", "ping", "hello", "auth", "client", "select"]
                    .iter()
                    .any(|skip| line.starts_with(&format!("{skip}:")))
            })
            .filter_map(|line| {
                line.split_once("calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum())
    }

    fn floor_ops(&self) -> &'static str {
        "SET NX PX + EVALSHA owner-checked DEL"
    }

    async fn floor_round(&self) -> Result<()> {
        let node = self.node();
        let mut conn = node.conn.clone();
        let key = format!("{}:floor", self.prefix());
        let token = format!("{:x}", rand::random::<u64>());
        let _: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(15_000)
            .query_async(&mut conn)
            .await
            .map_err(|e| node.err(e))?;
        let _: i64 = Script::new(FLOOR_RELEASE)
            .key(&key)
            .arg(&token)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| node.err(e))?;
        Ok(())
    }
}
