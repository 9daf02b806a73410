//! The subject every etcd test binary builds its scenarios on.

use omnilock_core::StoreUrl;
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::{Subject, store_url};

/// The store in `OMNILOCK_TEST_<store>_URL`, opened through `EtcdConfig`.
pub(crate) fn subject(store: &str) -> Option<Subject> {
    let url = store_url(store)?;
    let for_clients = url.clone();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move { omnilock_etcd::connect(EtcdConfig::from_url(&StoreUrl::parse(&url)?)?).await }
        })
        .with_url(url),
    )
}
