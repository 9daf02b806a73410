//! The conformance suite on one Redis instance and on Redlock over five
//! nodes (`OMNILOCK_TEST_REDIS_URL`, `OMNILOCK_TEST_REDLOCK_URL`).

use omnilock_core::StoreUrl;
use omnilock_redis::RedisConfig;
use omnilock_testkit::{store_url, Subject};

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

mod redis {
    omnilock_testkit::conformance_tests!(super::subject("REDIS"));
}

mod redlock {
    omnilock_testkit::conformance_tests!(super::subject("REDLOCK"));
}

mod redis_tls {
    omnilock_testkit::conformance_tests!(super::subject("REDIS_TLS"));
}
