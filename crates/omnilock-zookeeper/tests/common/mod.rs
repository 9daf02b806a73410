//! The subject every ZooKeeper test binary builds its scenarios on.

pub(crate) mod guarded;

use std::time::Duration;

use omnilock_core::StoreUrl;
use omnilock_testkit::{Subject, store_url};
use omnilock_zookeeper::ZkConfig;
use zookeeper_client::Client;

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
    let config = ZkConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move {
                omnilock_zookeeper::connect(ZkConfig::from_url(&StoreUrl::parse(&url)?)?).await
            }
        })
        .with_guarded_writes(guarded::opener(config))
        .with_url(url),
    )
}

/// An application's own client with a store URL's hosts, credentials and
/// TLS, its session timeout `session`.
pub(crate) async fn app_client(config: &ZkConfig, session: Duration) -> Client {
    let connector = Client::connector().with_session_timeout(session);
    let connector = match &config.digest {
        Some((user, pw)) => {
            connector.with_auth("digest", format!("{user}:{}", pw.expose()).as_bytes())
        }
        None => connector,
    };
    #[cfg(feature = "tls")]
    if let Some(tls) = config.client_tls().expect("TLS files") {
        let connecting = connector.with_tls(tls).secure_connect(&config.hosts);
        return connecting.await.expect("app client over TLS");
    }
    connector.connect(&config.hosts).await.expect("app client")
}
