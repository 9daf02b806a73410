//! The docs say what the code does: every option a store's `from_url` reads
//! is on that store's page, and every scheme `connect` knows is in the
//! README, the crate docs and the unknown-scheme error.
//!
//! Options are collected from the code, not from a list kept by hand:
//! [`StoreUrl::consulted_options`] records each name a reader asks for,
//! given or not.

use omnilock::SCHEMES;
use omnilock::raw::StoreUrl;

fn read(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The options `read_options` consults for `url`, which must parse.
fn consulted(url: &str, read_options: impl FnOnce(&StoreUrl)) -> Vec<String> {
    let parsed = StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    read_options(&parsed);
    parsed.consulted_options()
}

/// Fails naming every option of `options` that `page` does not show as
/// `` `name` ``.
fn assert_documented(page: &str, what: &str, options: &[String]) {
    assert!(
        !options.is_empty(),
        "{what}: no option consulted; is the check still wired?"
    );
    let text = read(page);
    let missing: Vec<&String> = options
        .iter()
        .filter(|option| !text.contains(&format!("`{option}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "{page} does not document {what} option(s) {missing:?}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn redis_options_are_documented() {
    use omnilock::redis::RedisConfig;
    for url in [
        "redis://h:6379",
        "rediss://h:6379",
        "redlock://a:1,b:2,c:3/",
    ] {
        let options = consulted(url, |u| {
            let _ = RedisConfig::from_url(u);
        });
        assert_documented("docs/backends/redis.md", url, &options);
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_options_are_documented() {
    use omnilock::etcd::EtcdConfig;
    for url in [
        "etcd://h:2379/app",
        "etcds://h:2379/app",
        "etcd://h:2379/app?mode=lockapi",
    ] {
        let options = consulted(url, |u| {
            let _ = EtcdConfig::from_url(u);
        });
        assert_documented("docs/backends/etcd.md", url, &options);
    }
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_options_are_documented() {
    use omnilock::zookeeper::ZkConfig;
    for url in ["zk://h:2181/app", "zookeeper://u:p@h:2181/app"] {
        let options = consulted(url, |u| {
            let _ = ZkConfig::from_url(u);
        });
        assert_documented("docs/backends/zookeeper.md", url, &options);
    }
}

#[cfg(all(feature = "mysql", feature = "postgres", feature = "sqlite"))]
#[test]
fn sql_options_are_documented() {
    use omnilock::sql::SqlConfig;
    for url in [
        "sqlite:///tmp/x.db",
        "postgres://u:p@h:5432/db",
        "mysql://u:p@h:3306/db",
        "postgres://u:p@h:5432/db?sslmode=require",
        "mysql://u:p@h:3306/db?ssl-mode=REQUIRED",
    ] {
        let options = consulted(url, |u| {
            let _ = SqlConfig::from_url(u);
        });
        assert_documented("docs/backends/sql.md", url, &options);
    }
}

/// `ttl` and the mem store's options are read by `connect` itself.
#[test]
fn common_options_are_documented() {
    let options = consulted("mem://", |u| {
        let mut u = u.clone();
        let _ = u.take_duration("ttl");
        let _ = omnilock::MemStore::from_url(&u);
    });
    assert_documented("README.md", "common", &options);
}

/// Each scheme shows as `scheme://` in the README's store table and the crate
/// docs (the rustdoc table), and the unknown-scheme error lists it.
#[tokio::test]
async fn every_scheme_is_in_the_readme_the_crate_docs_and_the_error() {
    let readme = read("README.md");
    let crate_docs = read("src/lib.rs");
    let err = omnilock::connect("nosuch://h")
        .await
        .unwrap_err()
        .to_string();
    for (scheme, _) in SCHEMES {
        let shown = format!("`{scheme}://");
        assert!(
            readme.contains(&shown),
            "README.md does not show {scheme}://"
        );
        assert!(
            crate_docs.contains(&shown),
            "the crate docs do not show {scheme}://"
        );
        let known = err.split_once("known: ").map_or("", |(_, list)| list);
        assert!(
            known.split([',', ' ']).any(|word| word == *scheme),
            "the unknown-scheme error does not list {scheme}: {err}"
        );
    }
}

/// A scheme whose feature is compiled out names that feature; one whose
/// feature is in never says "unknown".
#[tokio::test]
async fn every_scheme_is_known_to_connect() {
    for (scheme, feature) in SCHEMES {
        // Port 9 (discard) on loopback with tiny timeouts: nothing connects,
        // which is not what this checks.
        let url = format!("{scheme}://127.0.0.1:9/x?connect_timeout=50ms");
        let message = match omnilock::connect(&url).await {
            Ok(_) => continue,
            Err(err) => err.to_string(),
        };
        assert!(
            !message.contains("unknown store scheme"),
            "{scheme}: {message}"
        );
        if let Some(feature) = feature
            && message.contains("needs the cargo feature")
        {
            assert!(
                message.contains(&format!("`{feature}`")),
                "{scheme}: {message}"
            );
        }
    }
}
