//! The subject every Redis test binary builds its scenarios on.

use omnilock_core::StoreUrl;
use omnilock_redis::RedisConfig;
use omnilock_testkit::{store_url, Subject};

/// The store in `OMNILOCK_TEST_<store>_URL`, opened through `RedisConfig`.
#[allow(dead_code)] // not every test binary uses it
pub fn subject(store: &str) -> Option<Subject> {
    subject_at(store, store_url(store)?)
}

/// The store in `OMNILOCK_TEST_<store>_URL` with `option=value` added.
#[allow(dead_code)] // not every test binary uses it
pub fn subject_with(store: &str, option: &str, value: &str) -> Option<Subject> {
    let url = store_url(store)?;
    let joiner = if url.contains('?') { '&' } else { '?' };
    subject_at(store, format!("{url}{joiner}{option}={value}"))
}

fn subject_at(store: &str, url: String) -> Option<Subject> {
    let for_clients = url.clone();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move { omnilock_redis::connect(RedisConfig::from_url(&StoreUrl::parse(&url)?)?).await }
        })
        .with_url(url),
    )
}
