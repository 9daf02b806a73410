//! The subject every Redis test binary builds its scenarios on.

use omnilock_core::StoreUrl;
use omnilock_redis::RedisConfig;
use omnilock_testkit::{store_url, Subject};

/// The store in `OMNILOCK_TEST_<store>_URL`, opened through `RedisConfig`.
pub fn subject(store: &str) -> Option<Subject> {
    let url = store_url(store)?;
    let for_clients = url.clone();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move { omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&url)?)?).await }
        })
        .with_url(url),
    )
}
