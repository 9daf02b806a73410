//! Locks on the application's own client or pool (`run --byo`).
//!
//! Each client process opens an etcd or ZooKeeper client, a PostgreSQL or
//! MySQL/MariaDB pool, or a Redis client and connection manager, from the
//! store URL's settings (endpoints, credentials, TLS) as an application
//! would, and builds the store on it with the backend's builder. The
//! faults then hit what applications that share their client with omnilock
//! run: the client's own reconnects, its session, its pool.

use std::str::FromStr;
use std::time::Duration;

use omnilock::Locks;
use omnilock::etcd::{EtcdConfig, EtcdStore};
use omnilock::raw::StoreUrl;
use omnilock::redis::{Deployment, RedisConfig, RedisStore, redis};
use omnilock::sql::{SqlConfig, SqlPool, SqlStore, SslMode, TlsOptions};
use omnilock::zookeeper::{ZkConfig, ZkStore};

use crate::logs::{etcd_client, zk_client};

/// The locks of store `url`, built on an application's own client; `ttl`
/// is the client's lease (a ZooKeeper session as long as the TTL, the
/// shortest a lock on it may ask).
pub async fn locks(url: &str, ttl: Duration) -> Result<Locks, String> {
    // As an application with two rustls providers built in must (the
    // chaos crate has ZooKeeper's TLS): the clients below are built here,
    // before omnilock installs one.
    omnilock::ensure_crypto_provider();
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
            on_pool(pool, &config).await
        }
        "mysql" | "mariadb" => {
            let config = SqlConfig::from_url(&parsed).map_err(|e| e.to_string())?;
            let pool = sqlx::MySqlPool::connect_with(mysql_options(url, &config.tls)?)
                .await
                .map_err(|e| format!("the application's pool: {e}"))?;
            on_pool(pool, &config).await
        }
        "redis" | "rediss" => {
            let config = RedisConfig::from_url(&parsed).map_err(|e| e.to_string())?;
            if !matches!(config.deployment, Deployment::Single) {
                return Err("--byo on Redis runs on one server (redis://, rediss://)".into());
            }
            let client = redis_client(url, &config)?;
            let manager = client
                .get_connection_manager()
                .await
                .map_err(|e| format!("the application's connection manager: {e}"))?;
            RedisStore::builder(client)
                .connection_manager(manager)
                .prefix(config.options.prefix.clone())
                .build()
                .await
        }
        other => {
            return Err(format!(
                "--byo runs on etcd, ZooKeeper, PostgreSQL, MySQL/MariaDB and Redis, not \
                 {other}://"
            ));
        }
    };
    built.map_err(|e| format!("the store on the application's client: {e}"))
}

/// The SQL store on the application's `pool`, with the URL's table and mode.
async fn on_pool(pool: impl Into<SqlPool>, config: &SqlConfig) -> omnilock::Result<Locks> {
    SqlStore::builder(pool)
        .table(config.table.clone())
        .advisory(config.advisory)
        .build()
        .await
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

/// The connect options an application builds for its MySQL/MariaDB pool:
/// the URL's address, login and database, and its TLS settings through
/// sqlx's own setters.
fn mysql_options(url: &str, tls: &TlsOptions) -> Result<sqlx::mysql::MySqlConnectOptions, String> {
    use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    let base = base.replacen("mariadb://", "mysql://", 1);
    let mut options =
        MySqlConnectOptions::from_str(&base).map_err(|e| format!("the pool's URL: {e}"))?;
    if let Some(mode) = tls.mode {
        options = options.ssl_mode(match mode {
            SslMode::Disable => MySqlSslMode::Disabled,
            SslMode::Prefer => MySqlSslMode::Preferred,
            SslMode::Require => MySqlSslMode::Required,
            SslMode::VerifyCa => MySqlSslMode::VerifyCa,
            SslMode::VerifyFull => MySqlSslMode::VerifyIdentity,
        });
    }
    if let Some(ca) = &tls.root_cert {
        options = options.ssl_ca(ca);
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    Ok(options)
}

/// The client an application opens for one Redis server: the URL without
/// omnilock's options, and the CA of `tls_ca` given to redis-rs.
fn redis_client(url: &str, config: &RedisConfig) -> Result<redis::Client, String> {
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    // `redis://…?tls=true` asks for TLS as `rediss://` does.
    let base = match base.strip_prefix("redis://") {
        Some(rest) if config.tls => format!("rediss://{rest}"),
        _ => base.to_string(),
    };
    let base = base.as_str();
    let client = match &config.tls_ca {
        Some(path) => {
            let root_cert = std::fs::read(path)
                .map_err(|e| format!("cannot read tls_ca {}: {e}", path.display()))?;
            let certificates = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            };
            redis::Client::build_with_tls(base, certificates)
        }
        None => redis::Client::open(base),
    };
    client.map_err(|e| format!("the application's client: {e}"))
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
