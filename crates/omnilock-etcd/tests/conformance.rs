//! The conformance suite on the 3-member test cluster, in both modes
//! (`OMNILOCK_TEST_ETCD_URL`, `OMNILOCK_TEST_ETCD_LOCKAPI_URL`), and through
//! the member with authentication enabled (`OMNILOCK_TEST_ETCD_AUTH_URL`).

use omnilock_core::StoreUrl;
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::{store_url, Subject};

pub fn subject(store: &str) -> Option<Subject> {
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

mod etcd {
    omnilock_testkit::conformance_tests!(super::subject("ETCD"));
}

mod etcd_lockapi {
    omnilock_testkit::conformance_tests!(super::subject("ETCD_LOCKAPI"));
}

mod etcd_auth {
    omnilock_testkit::conformance_tests!(super::subject("ETCD_AUTH"));
}
