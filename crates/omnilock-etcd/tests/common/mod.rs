//! The subject every etcd test binary builds its scenarios on, and the
//! application's own client on a test store.

pub(crate) mod guarded;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use omnilock_core::StoreUrl;
use omnilock_etcd::EtcdConfig;
use omnilock_testkit::{Subject, store_url};

/// The store in `OMNILOCK_TEST_<store>_URL`, opened through `EtcdConfig`.
#[allow(dead_code)] // not every test binary uses it
pub(crate) fn subject(store: &str) -> Option<Subject> {
    let url = store_url(store)?;
    let for_clients = url.clone();
    let config = EtcdConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    Some(
        Subject::new(store.to_lowercase(), move || {
            let url = for_clients.clone();
            async move { omnilock_etcd::connect(EtcdConfig::from_url(&StoreUrl::parse(&url)?)?).await }
        })
        .with_guarded_writes(guarded::opener(config))
        .with_url(url),
    )
}

/// An application's own client with a store URL's settings: endpoints,
/// credentials, TLS.
pub(crate) async fn app_client(config: &EtcdConfig) -> Result<Client, etcd_client::Error> {
    let mut options = ConnectOptions::new();
    if let (Some(user), Some(password)) = (&config.username, &config.password) {
        options = options.with_user(user.clone(), password.expose());
    }
    if config.tls.enabled {
        let mut tls = TlsOptions::new();
        if let Some(ca) = &config.tls.ca {
            tls = tls.ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()));
        }
        if let Some((cert, key)) = &config.tls.identity {
            tls = tls.identity(Identity::from_pem(
                std::fs::read(cert).unwrap(),
                std::fs::read(key).unwrap(),
            ));
        }
        options = options.with_tls(tls);
    }
    Client::connect(&config.endpoints, Some(options)).await
}
