//! The subject every ZooKeeper test binary builds its scenarios on.

use omnilock_core::StoreUrl;
use omnilock_testkit::{Subject, store_url};
use omnilock_zookeeper::ZkConfig;

/// The store in `OMNILOCK_TEST_<store>_URL`, opened through `ZkConfig`.
#[allow(dead_code)] // not every test binary uses it
pub(crate) fn subject(store: &str) -> Option<Subject> {
    subject_at(store, store_url(store)?)
}

/// The store in `OMNILOCK_TEST_<store>_URL` with its path replaced by `prefix`.
#[allow(dead_code)] // not every test binary uses it
pub(crate) fn subject_under(store: &str, prefix: &str) -> Option<Subject> {
    let url = store_url(store)?;
    let (before_query, query) = url.split_once('?').unwrap_or((&url, ""));
    let authority_end = before_query["zk://".len()..]
        .find('/')
        .map_or(before_query.len(), |i| i + "zk://".len());
    let mut url = format!("{}/{prefix}", &before_query[..authority_end]);
    if !query.is_empty() {
        url = format!("{url}?{query}");
    }
    subject_at(store, url)
}

fn subject_at(store: &str, url: String) -> Option<Subject> {
    let for_clients = url.clone();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move {
                omnilock_zookeeper::connect(ZkConfig::from_url(&StoreUrl::parse(&url)?)?).await
            }
        })
        .with_url(url),
    )
}
