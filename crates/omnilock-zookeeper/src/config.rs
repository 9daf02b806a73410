//! ZooKeeper store URLs → settings.
//!
//! `zk://[user:pw@]h1:p1,h2:p2,h3:p3[/prefix][?connect_timeout=3s]`
//! (`zookeeper://` is the same; `zks://` is `zk://` with `tls=true`).

use std::time::Duration;

use omnilock_core::{Error, Result, Secret, StoreUrl, TlsFiles, check_timeouts};

/// Settings for one ZooKeeper ensemble: where it is and how to log in (from
/// the URL), plus the [`ZkOptions`] that [`ZkBuilder`](crate::ZkBuilder)
/// takes as well.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ZkConfig {
    /// The connection string handed to the client: `h1:p1,h2:p2,...`.
    pub hosts: String,
    /// Digest authentication (`zk://user:pw@...`): nodes are then created
    /// with the ACL `creator_all`, so only clients with the same credentials
    /// can delete them.
    pub digest: Option<(String, Secret)>,
    /// TLS to every server (`zks://` or `?tls=true`: ZooKeeper's
    /// `secureClientPort`), with `?tls_ca=` (CA certificates to trust, PEM;
    /// else the system's) and `?tls_cert=` / `?tls_key=` (a client
    /// certificate and key, for `ssl.clientAuth`).
    pub tls: TlsFiles,
    /// The lock options: prefix (the URL path), `?connect_timeout=`,
    /// `?timeout=`.
    pub options: ZkOptions,
    /// The default lease when the URL sets none (`?session_timeout=` is
    /// accepted as another name for `ttl`, for ZooKeeper habits).
    pub session_timeout: Option<Duration>,
    /// Where the store is, for messages (password redacted).
    pub shown: String,
}

/// The options of a ZooKeeper store that are not about reaching it: the
/// URL's path and query options, and the setters of
/// [`ZkBuilder`](crate::ZkBuilder). Both paths check them with the same
/// rules and messages.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ZkOptions {
    /// The path under which lock nodes live (the URL path, default
    /// `/omnilock`): lock N is the node `<prefix>/<encoded N>`.
    pub prefix: String,
    /// How long connecting may take before the ensemble counts as unreachable
    /// (`?connect_timeout=`, default 3s).
    pub connect_timeout: Duration,
    /// Deadline of one request (`?timeout=`, default 5s).
    pub request_timeout: Duration,
}

impl Default for ZkOptions {
    fn default() -> Self {
        ZkOptions {
            prefix: "/omnilock".to_string(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl ZkOptions {
    /// `path` (with or without its leading and trailing `/`) as a prefix:
    /// `/path`, or the default for an empty one.
    pub(crate) fn prefix_from_path(path: &str) -> String {
        match path.trim_matches('/') {
            "" => "/omnilock".to_string(),
            path => format!("/{path}"),
        }
    }

    /// The rules every path applies: `InvalidConfig` naming the option.
    pub(crate) fn check(&self) -> Result<()> {
        let prefix = &self.prefix;
        let bad_segment = |s: &str| {
            s.is_empty()
                || s == "."
                || s == ".."
                || s.chars()
                    .any(|c| c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c))
        };
        if !prefix.starts_with('/')
            || prefix[1..].split('/').any(bad_segment)
            || prefix == "/zookeeper"
        {
            return Err(Error::config(format!(
                "invalid node path prefix {prefix:?}: no empty, \".\" or \"..\" segments, no control characters"
            )));
        }
        check_timeouts(self.connect_timeout, self.request_timeout)
    }
}

impl ZkConfig {
    /// Reads a `zk://`, `zookeeper://` or `zks://` URL. Unknown options are
    /// an error.
    ///
    /// ```
    /// use omnilock_core::StoreUrl;
    /// use omnilock_zookeeper::ZkConfig;
    /// let url = StoreUrl::parse("zk://a:2181,b:2181/apps/locks").unwrap();
    /// let config = ZkConfig::from_url(&url).unwrap();
    /// assert_eq!(config.hosts, "a:2181,b:2181");
    /// assert_eq!(config.options.prefix, "/apps/locks");
    /// ```
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        let mut url = url.clone();
        if !matches!(url.scheme(), "zk" | "zookeeper" | "zks") {
            return Err(Error::config(format!(
                "not a ZooKeeper scheme: {}",
                url.scheme()
            )));
        }
        if url.hosts().is_empty() {
            return Err(Error::config("the URL names no ZooKeeper server"));
        }
        let mut options = ZkOptions {
            prefix: ZkOptions::prefix_from_path(url.path()),
            ..ZkOptions::default()
        };
        url.take_timeouts(&mut options.connect_timeout, &mut options.request_timeout)?;
        options.check()?;
        let session_timeout = url.take_duration("session_timeout")?;
        let tls = TlsFiles::take(&mut url, "zks")?;
        #[cfg(not(feature = "tls"))]
        if tls.enabled {
            return Err(Error::config(
                "TLS to ZooKeeper (zks:// or tls=true) needs the cargo feature \
                 `zookeeper-tls` of omnilock (`tls` of omnilock-zookeeper)",
            ));
        }
        url.finish()?;
        let digest = match (url.username(), url.password()) {
            (Some(user), Some(pw)) if !user.is_empty() => Some((user.to_string(), pw.clone())),
            (None, None) => None,
            _ => {
                return Err(Error::config(
                    "digest authentication needs both a user name and a password (zk://user:pw@...)",
                ));
            }
        };
        let hosts = url
            .hosts()
            .iter()
            .map(|h| {
                let mut h = h.clone();
                h.port.get_or_insert(2181);
                h.to_string()
            })
            .collect::<Vec<_>>()
            .join(",");
        Ok(ZkConfig {
            hosts,
            digest,
            tls,
            options,
            session_timeout,
            shown: url.to_string(),
        })
    }
}

#[cfg(feature = "tls")]
impl ZkConfig {
    /// The TLS settings of this URL for a `zookeeper_client` connector
    /// (`None` without TLS): the files read, and checked before any I/O
    /// (`InvalidConfig` naming the file: unreadable, no certificate, no
    /// key, or a certificate and key that do not belong together). For an
    /// application that opens its own client from the same URL:
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use omnilock_core::StoreUrl;
    /// use omnilock_zookeeper::{ZkConfig, zookeeper_client::Client};
    /// let url = StoreUrl::parse("zks://zk1:2281/locks?tls_ca=/etc/zk/ca.pem")?;
    /// let config = ZkConfig::from_url(&url)?;
    /// let client = match config.client_tls()? {
    ///     Some(tls) => Client::connector().with_tls(tls).secure_connect(&config.hosts).await?,
    ///     None => Client::connector().connect(&config.hosts).await?,
    /// };
    /// # Ok(()) }
    /// ```
    pub fn client_tls(&self) -> Result<Option<zookeeper_client::TlsOptions>> {
        Ok(crate::tls::Setup::read(&self.tls)?.map(|setup| setup.options))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnilock_core::ErrorKind;

    fn parse(url: &str) -> Result<ZkConfig> {
        ZkConfig::from_url(&StoreUrl::parse(url)?)
    }

    #[test]
    fn shapes() {
        let c = parse("zk://app:pw@127.0.0.1:1,127.0.0.1:2/x?session_timeout=4s").unwrap();
        assert_eq!(c.hosts, "127.0.0.1:1,127.0.0.1:2");
        assert_eq!(c.options.prefix, "/x");
        assert_eq!(c.digest.as_ref().unwrap().0, "app");
        assert_eq!(c.digest.unwrap().1.expose(), "pw");
        assert!(!c.shown.contains("pw@"), "{}", c.shown);
        assert_eq!(c.session_timeout, Some(Duration::from_secs(4)));
        assert_eq!(parse("zookeeper://h").unwrap().options.prefix, "/omnilock");
        assert_eq!(parse("zk://h").unwrap().hosts, "h:2181");
        assert!(!parse("zk://h").unwrap().tls.enabled);
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_shapes() {
        let c = parse("zks://h?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem").unwrap();
        assert!(c.tls.enabled && c.tls.identity.is_some());
        assert!(parse("zk://h?tls=true").unwrap().tls.enabled);
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_without_the_feature_is_a_config_error_naming_it() {
        for url in ["zks://h", "zk://h?tls=true"] {
            let e = parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(e.to_string().contains("zookeeper-tls"), "{e}");
        }
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for bad in [
            "zk:///x",
            "zk://h/a//b",
            "zk://h/a/../b",
            "zk://h/zookeeper",
            "zk://h?colour=red",
            "zk://:pw@h",
            "zk://user@h",
            "zk://h?timeout=soon",
            "zk://h?connect_timeout=0s",
            "zk://h?tls_ca=/ca.pem",
            "zks://h?tls_ca=ca.pem",
            "zks://h?tls_cert=/c.pem",
        ] {
            assert_eq!(
                parse(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
    }
}
