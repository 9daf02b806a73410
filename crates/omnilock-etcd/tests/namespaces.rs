//! Prefixes that nest (issue 13, finding 6): lock `locks` under prefix `p`
//! and lock `job` under prefix `p/locks` must be two locks that never see,
//! block or break each other. With the prefix as a path of segments, the
//! first one's range `p/locks/` held every key of the second
//! (`p/locks/job/...`); the prefix is now one key segment
//! (`p%2Flocks/job/`).

use omnilock_core::StoreUrl;
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::{Subject, store_url};

/// `url` with its path replaced by `prefix`.
fn with_prefix(url: &str, prefix: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority = authority_and_path.split('/').next().unwrap();
    match query {
        Some(query) => format!("{scheme}://{authority}/{prefix}?{query}"),
        None => format!("{scheme}://{authority}/{prefix}"),
    }
}

/// A subject on the store in `OMNILOCK_TEST_<store>_URL`, with key prefix
/// `prefix`, built the way the conformance file builds its subjects.
fn subject(store: &str, prefix: &str) -> Option<Subject> {
    let url = with_prefix(&store_url(store)?, prefix);
    let for_clients = url.clone();
    Some(
        Subject::new(format!("{} /{prefix}", store.to_lowercase()), move || {
            let url = for_clients.clone();
            async move { omnilock_etcd::connect(EtcdConfig::from_url(&StoreUrl::parse(&url)?)?).await }
        })
        .with_url(url),
    )
}

fn unique_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("ns-{}-{nanos}", std::process::id())
}

async fn nested(store: &str) {
    let p = unique_prefix();
    let (Some(a), Some(b)) = (subject(store, &p), subject(store, &format!("{p}/locks"))) else {
        return;
    };
    // Both orders (the scenario takes each side's lock first in turn).
    omnilock_testkit::scenarios::namespaces_are_disjoint(&a, "locks", &b, "job").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_prefixes_are_disjoint_recipe() {
    nested("ETCD").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_prefixes_are_disjoint_lockapi() {
    nested("ETCD_LOCKAPI").await;
}

/// The key layout the docs promise (RBAC grants and `etcdctl lock` name
/// it): prefix `<p>/locks` is the one segment `<p>%2Flocks`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_segment_prefix_is_one_key_segment() {
    let Some(url) = store_url("ETCD") else { return };
    let p = unique_prefix();
    let url = with_prefix(&url, &format!("{p}/locks"));
    let locks =
        omnilock_etcd::connect(EtcdConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap())
            .await
            .expect("connect");
    let owner = omnilock_core::Owner::new("layout").unwrap();
    let guard = locks
        .lock("job")
        .owner(&owner)
        .acquire()
        .await
        .expect("acquire");
    let port =
        std::env::var("OMNILOCK_TEST_ETCD_FIRST_PORT").expect("OMNILOCK_TEST_ETCD_FIRST_PORT");
    let mut raw = etcd_client::Client::connect([format!("http://127.0.0.1:{port}")], None)
        .await
        .expect("raw client");
    let keys = |resp: etcd_client::GetResponse| -> Vec<String> {
        resp.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect()
    };
    let all = etcd_client::GetOptions::new().with_prefix();
    let under_p = keys(raw.get(p.as_str(), Some(all.clone())).await.unwrap());
    assert_eq!(under_p, [format!("{p}%2Flocks/job/o:layout")]);
    guard.release().await.expect("release");
    assert!(keys(raw.get(p.as_str(), Some(all)).await.unwrap()).is_empty());
}

#[test]
fn with_prefix_replaces_the_path() {
    assert_eq!(
        with_prefix("etcd://a:1,b:2/omnilock?mode=lockapi", "x/y"),
        "etcd://a:1,b:2/x/y?mode=lockapi"
    );
    assert_eq!(with_prefix("etcd://a:1/omnilock", "x"), "etcd://a:1/x");
}
