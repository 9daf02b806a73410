//! TLS to the test MariaDB and PostgreSQL (`scripts/stores.sh` gives them a
//! throw-away CA whose server certificate names only IP 127.0.0.1): what a
//! user gets wrong gets a clear, typed error that names the host and never
//! the password. The whole conformance suite over TLS is in conformance.rs.
#![cfg(all(feature = "mysql", feature = "postgres"))]

mod common;

use common::connect;
use omnilock_core::ErrorKind;
use omnilock_testkit::fixtures::take_and_release;
use omnilock_testkit::store_url;

const PASSWORD: &str = "omnilock-test-pw";

async fn works(url: &str, name: &str) {
    let locks = connect(url).await.expect("connect over TLS");
    take_and_release(&locks, name).await;
}

/// The TLS URLs (verify-full against the test CA) that are configured, by
/// store (under the test command, both: a missing one fails there).
fn tls_urls() -> Vec<(&'static str, String)> {
    [("POSTGRES", "POSTGRES_TLS"), ("MYSQL", "MYSQL_TLS")]
        .into_iter()
        .filter_map(|(store, var)| Some((store, store_url(var)?)))
        .collect()
}

/// `url` with its options replaced by `options`.
fn with_options(url: &str, options: &str) -> String {
    let base = url.split('?').next().unwrap();
    format!("{base}?{options}")
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_against_the_wrong_host_name_is_a_certificate_error() {
    for (store, url) in tls_urls() {
        // The certificate names 127.0.0.1 only; localhost reaches the same
        // server under a name the certificate does not carry.
        let wrong = url.replace("@127.0.0.1:", "@localhost:");
        let err = connect(&wrong).await.map(|_| ()).unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(
            matches!(err.kind(), ErrorKind::Tls | ErrorKind::Unavailable),
            "{store}: {err}"
        );
        assert!(
            !err.is_retryable(),
            "{store}: retrying cannot mend it: {err}"
        );
        assert!(text.contains("localhost"), "{store}: names the host: {err}");
        assert!(text.contains("certificate"), "{store}: says why: {err}");
        assert!(
            !text.contains(PASSWORD),
            "{store}: leaks the password: {text}"
        );
        // The right name works.
        works(&url, &format!("tls/{store}/right-host")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_only_account_over_plain_tcp_is_told_why() {
    for (store, url) in tls_urls() {
        let plain = with_options(&url, "sslmode=disable");
        let err = connect(&plain).await.map(|_| ()).unwrap_err();
        let text = format!("{err} {err:?}");
        assert_eq!(err.kind(), ErrorKind::Auth, "{store}: {err}");
        assert!(text.contains("TLS"), "{store}: says TLS: {err}");
        assert!(text.contains("127.0.0.1"), "{store}: names the host: {err}");
        assert!(
            !text.contains(PASSWORD),
            "{store}: leaks the password: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_certificate_fails_verify_ca() {
    for (store, url) in tls_urls() {
        // Without sslrootcert, the public roots: the test CA is not among them.
        let err = connect(&with_options(&url, "sslmode=verify-ca"))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Tls, "{store}: {err}");
        assert!(err.to_string().contains("certificate"), "{store}: {err}");
        // `require` encrypts without verifying: it connects.
        works(
            &with_options(&url, "sslmode=require"),
            &format!("tls/{store}/require"),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificates_log_in() {
    for store in ["POSTGRES_CERT", "MYSQL_CERT"] {
        let Some(url) = store_url(store) else {
            continue;
        };
        works(&url, &format!("tls/{store}/cert")).await;
        // The same account without its certificate is refused, clearly.
        let ca_only: String = url
            .split(['?', '&'])
            .skip(1)
            .filter(|o| o.contains("mode") || o.contains("rootcert") || o.contains("ssl-ca"))
            .collect::<Vec<_>>()
            .join("&");
        let err = connect(&with_options(&url, &ca_only))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth, "{store}: {err}");
        assert!(err.to_string().contains("certificate"), "{store}: {err}");
        assert!(!format!("{err:?}").contains(PASSWORD), "{store}: {err:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_certificate_file_is_named_before_connecting() {
    let Some((_, url)) = tls_urls().into_iter().next() else {
        return;
    };
    let err = connect(&with_options(
        &url,
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
    ))
    .await
    .map(|_| ())
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("sslrootcert"), "{err}");
    assert!(err.to_string().contains("/nonexistent/ca.crt"), "{err}");
}
