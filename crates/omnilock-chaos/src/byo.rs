//! Locks on the application's own client or pool (`run --byo`).
//!
//! Each client process opens an etcd or ZooKeeper client, or a PostgreSQL
//! pool, from the store URL's settings (endpoints, credentials, TLS) as an
//! application would, and builds the store on it with the backend's
//! builder. The faults then hit what applications that share their client
//! with omnilock run: the client's own reconnects, its session, its pool.

use std::time::Duration;

use omnilock::Locks;
use omnilock::etcd::{EtcdConfig, EtcdStore};
use omnilock::raw::StoreUrl;
use omnilock::sql::{SqlConfig, SqlStore};
use omnilock::zookeeper::{ZkConfig, ZkStore};

use crate::logs::{etcd_client, zk_client};

/// The locks of store `url`, built on an application's own client; `ttl`
/// is the client's lease (a ZooKeeper session as long as the TTL, the
/// shortest a lock on it may ask).
pub async fn locks(url: &str, ttl: Duration) -> Result<Locks, String> {
    let parsed = StoreUrl::parse(url).map_err(|e| e.to_string())?;
    let built = match parsed.scheme() {
        "etcd" | "etcds" => {
            let config = EtcdConfig::from_url(&parsed).map_err(|e| e.to_string())?;
            EtcdStore::builder(etcd_client(&config).await?)
                .prefix(config.options.prefix.clone())
                .build()
                .await
        }
        "zk" | "zks" | "zookeeper" => {
            let config = ZkConfig::from_url(&parsed).map_err(|e| e.to_string())?;
            ZkStore::builder(zk_client(&config, ttl).await?)
                .prefix(&config.options.prefix)
                .build()
                .await
        }
        "postgres" | "postgresql" => {
            let config = SqlConfig::from_url(&parsed).map_err(|e| e.to_string())?;
            let pool = sqlx::PgPool::connect(&postgres_url(url))
                .await
                .map_err(|e| format!("the application's pool: {e}"))?;
            SqlStore::builder(pool)
                .table(config.table.clone())
                .advisory(config.advisory)
                .build()
                .await
        }
        other => {
            return Err(format!(
                "--byo runs on etcd, ZooKeeper and PostgreSQL, not {other}://"
            ));
        }
    };
    built.map_err(|e| format!("the store on the application's client: {e}"))
}

/// What sqlx takes of an omnilock PostgreSQL URL: the address, login and
/// database, and the TLS options (named as sqlx names them); omnilock's own
/// options left out.
fn postgres_url(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let tls: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.starts_with("ssl"))
        .collect();
    if tls.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", tls.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_gets_the_address_and_tls_only() {
        assert_eq!(
            postgres_url(
                "postgres://u:p@h:1/db?sslmode=verify-full&mode=advisory&sslrootcert=/ca.pem&table=t"
            ),
            "postgres://u:p@h:1/db?sslmode=verify-full&sslrootcert=/ca.pem"
        );
        assert_eq!(postgres_url("postgres://h/db?table=t"), "postgres://h/db");
        assert_eq!(postgres_url("postgres://h/db"), "postgres://h/db");
    }
}
