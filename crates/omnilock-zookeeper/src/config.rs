//! ZooKeeper store URLs → settings.
//!
//! `zk://[user:pw@]h1:p1,h2:p2,h3:p3[/prefix][?connect_timeout=3s]`
//! (`zookeeper://` is the same).

use std::time::Duration;

use omnilock_core::{Error, Result, Secret, StoreUrl, check_timeouts};

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
    /// Reads a `zk://` or `zookeeper://` URL. Unknown options are an error.
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
        if !matches!(url.scheme(), "zk" | "zookeeper") {
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
            options,
            session_timeout,
            shown: url.to_string(),
        })
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
        ] {
            assert_eq!(
                parse(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
    }
}
