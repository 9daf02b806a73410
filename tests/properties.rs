//! Property tests of everything a user types: store URLs, lock names and
//! owners. No input panics; no message, `Display` or `Debug` ever shows a
//! password, however mangled the URL around it.

use omnilock::raw::StoreUrl;
use omnilock::{ErrorKind, LockName, Owner};
use proptest::prelude::*;

/// A password made of distinctive chunks (`PW` + six capitals, which no other
/// part of a generated URL can contain) joined by the characters that split
/// URLs: if any chunk shows up in output, part of the password leaked.
fn password() -> impl Strategy<Value = (String, Vec<String>)> {
    let chunk = "PW[A-Z]{6}";
    let separator = prop::sample::select(vec![
        "", "/", "?", "#", "@", ":", "%", "%2", "%41", ",", "&", "=", "[", "]", " ", "//", "@/",
        "?a=", ":99", "%FF",
    ]);
    prop::collection::vec((chunk, separator), 1..4).prop_map(|parts| {
        let mut text = String::new();
        let mut chunks = Vec::new();
        for (chunk, separator) in parts {
            text.push_str(&chunk);
            text.push_str(separator);
            chunks.push(chunk);
        }
        (text, chunks)
    })
}

/// A store URL with a user and that password, around hosts, a path and
/// options from an alphabet that cannot spell a chunk.
fn url_with_password() -> impl Strategy<Value = (String, Vec<String>)> {
    let scheme = prop::sample::select(vec![
        "mem",
        "etcd",
        "etcds",
        "zk",
        "zks",
        "zookeeper",
        "redis",
        "rediss",
        "redlock",
        "mysql",
        "mariadb",
        "postgres",
        "postgresql",
        "sqlite",
    ]);
    let user = "[a-z0-9]{0,6}";
    let hosts = "[a-z0-9.]{1,8}(:[0-9]{1,5})?(,[a-z0-9.]{1,8}(:[0-9]{1,5})?){0,2}";
    let path = "(/[a-z0-9/._-]{0,10})?";
    let query = r"(\?[a-z_]{1,8}=[a-z0-9]{0,6}(&[a-z_]{1,8}=[a-z0-9]{0,6}){0,2})?";
    (scheme, user, password(), hosts, path, query).prop_map(
        |(scheme, user, (password, chunks), hosts, path, query)| {
            (
                format!("{scheme}://{user}:{password}@{hosts}{path}{query}"),
                chunks,
            )
        },
    )
}

/// Fails if `text` contains any chunk of the password.
fn assert_no_chunk(text: &str, chunks: &[String], input: &str) {
    for chunk in chunks {
        assert!(
            !text.contains(chunk.as_str()),
            "password text {chunk:?} of {input:?} shown in {text:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_text_parses_or_fails_cleanly(input in any::<String>()) {
        match StoreUrl::parse(&input) {
            Ok(url) => { let _ = (url.to_string(), format!("{url:?}")); }
            Err(err) => prop_assert_eq!(err.kind(), ErrorKind::InvalidConfig),
        }
    }

    #[test]
    fn url_shaped_text_parses_or_fails_cleanly(
        input in r"[a-z+]{0,6}(:|://|:/)[a-zA-Z0-9:/@?#%&=,\[\]. +_-]{0,40}"
    ) {
        if let Ok(mut url) = StoreUrl::parse(&input) {
            let _ = url.take_duration("ttl");
            let _ = url.take_bool("tls");
            let _ = url.take_u64("db");
            let _ = url.finish();
        }
    }

    #[test]
    fn passwords_never_shown((input, chunks) in url_with_password()) {
        match StoreUrl::parse(&input) {
            Ok(mut url) => {
                assert_no_chunk(&format!("{url} {url:?}"), &chunks, &input);
                for key in ["ttl", "tls", "db"] {
                    if let Err(err) = url.take_duration(key) {
                        assert_no_chunk(&format!("{err} {err:?}"), &chunks, &input);
                    }
                }
                if let Err(err) = url.finish() {
                    assert_no_chunk(&format!("{err} {err:?}"), &chunks, &input);
                }
            }
            Err(err) => assert_no_chunk(&format!("{err} {err:?}"), &chunks, &input),
        }
    }

    /// Every store's own URL reading (`from_url`) keeps the password out of
    /// its errors and of its configuration's `Debug`.
    #[test]
    fn store_configs_never_show_passwords((input, chunks) in url_with_password()) {
        if let Ok(url) = StoreUrl::parse(&input) {
            assert_no_chunk(&store_config_text(&url), &chunks, &input);
        }
    }

    /// A password written percent-encoded, as the docs ask, always comes
    /// back whole.
    #[test]
    fn encoded_passwords_round_trip(password in any::<String>(), host in "[a-z]{1,8}") {
        let encoded: String = percent_encoding::utf8_percent_encode(
            &password,
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        let input = format!("redis://user:{encoded}@{host}:6379/0");
        let url = StoreUrl::parse(&input).expect("an encoded password always parses");
        prop_assert_eq!(url.password().map(|p| p.expose()), Some(password.as_str()));
        prop_assert_eq!(url.hosts()[0].host.as_str(), host.as_str());
    }

    #[test]
    fn names_and_owners_follow_their_rules(input in any::<String>()) {
        let valid = !input.is_empty() && input.len() <= 256 && !input.chars().any(char::is_control);
        match LockName::new(&input) {
            Ok(name) => {
                prop_assert!(valid);
                prop_assert_eq!(name.as_str(), input.as_str());
                prop_assert_eq!(name.to_string(), input.clone());
            }
            Err(err) => {
                prop_assert!(!valid);
                prop_assert_eq!(err.kind(), ErrorKind::InvalidName);
            }
        }
        match Owner::new(&input) {
            Ok(owner) => prop_assert!(valid && owner.as_str() == input),
            Err(err) => {
                prop_assert!(!valid);
                prop_assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            }
        }
    }
}

#[test]
fn password_with_a_slash_is_not_echoed() {
    // The report: "invalid port \"SECRET\" for host u".
    for input in [
        "postgres://u:SECRET/PW@127.0.0.1:1/db",
        "redis://u:SECRET?PW@127.0.0.1:1/0",
        "etcd://u:SEC/RET@h1:1,h2:2/app",
        "zk://u:SECRET/@h/app",
        "mysql://u:12345/SECRET@h/db",
        "postgres//u:SECRET@h://x",
    ] {
        let err = StoreUrl::parse(input).expect_err(input);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("SEC"), "{input}: {shown}");
        assert!(!shown.contains("PW"), "{input}: {shown}");
    }
}

/// What `url`'s store shows of it once read with its `from_url`: the
/// configuration's `Debug`, or the error's `Display` and `Debug`.
fn store_config_text(url: &StoreUrl) -> String {
    fn shown<T: std::fmt::Debug>(config: omnilock::Result<T>) -> String {
        match config {
            Ok(config) => format!("{config:?}"),
            Err(err) => format!("{err} {err:?}"),
        }
    }
    match url.scheme() {
        "mem" => shown(omnilock::MemStore::from_url(url)),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => shown(omnilock::etcd::EtcdConfig::from_url(url)),
        #[cfg(feature = "zookeeper")]
        "zk" | "zks" | "zookeeper" => shown(omnilock::zookeeper::ZkConfig::from_url(url)),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redlock" => shown(omnilock::redis::RedisConfig::from_url(url)),
        #[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
        "mysql" | "mariadb" | "postgres" | "postgresql" | "sqlite" => {
            shown(omnilock::sql::SqlConfig::from_url(url))
        }
        _ => String::new(),
    }
}
