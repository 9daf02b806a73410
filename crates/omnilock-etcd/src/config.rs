//! etcd store URLs → settings.
//!
//! `etcd://[user:pw@]h1:p1,h2:p2,h3:p3[/prefix][?mode=recipe|lockapi&tls=true&...]`
//! (`etcds://` is `etcd://` with `tls=true`).

use std::time::Duration;

use omnilock_core::{Error, Result, Secret, StoreUrl, TlsFiles, check_timeouts};

/// How locks are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// omnilock's own recipe: one shared lease per TTL, a key per owner in a
    /// create-revision queue, a watch on the predecessor only (the default).
    Recipe,
    /// etcd's own lock protocol, the one `etcdctl lock` (client-side) and
    /// the Lock RPC (server-side) run: one lease per acquisition, keys named
    /// by lease ID. omnilock runs it client-side: it never waits inside the
    /// Lock RPC (see [docs/backends/etcd.md](https://github.com/omnilock/omnilock/blob/main/docs/backends/etcd.md)).
    LockApi,
}

/// Settings for one etcd cluster: where it is and how to log in (from the
/// URL), plus the [`EtcdOptions`] that
/// [`EtcdBuilder`](crate::EtcdBuilder) takes as well.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// Client endpoints, as `http(s)://host:port`.
    pub endpoints: Vec<String>,
    /// User name for etcd's authentication, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<Secret>,
    /// TLS (`etcds://` or `?tls=true`), with `?tls_ca=` (CA certificates
    /// to trust, PEM) and `?tls_cert=` / `?tls_key=` (a client certificate
    /// and key for mutual TLS).
    pub tls: TlsFiles,
    /// The lock options: prefix (the URL path), `?mode=`,
    /// `?connect_timeout=`, `?timeout=`.
    pub options: EtcdOptions,
    /// Where the store is, for messages (password redacted).
    pub shown: String,
}

/// The options of an etcd store that are not about reaching it: the URL's
/// path and query options, and the setters of
/// [`EtcdBuilder`](crate::EtcdBuilder). Both paths check them with the same
/// rules and messages.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EtcdOptions {
    /// Key prefix: the URL path without its leading and trailing `/`
    /// (default `omnilock`). A lock's keys live under `<prefix>/<name>/`
    /// where `/` and `%` in both prefix and name are percent-encoded, so
    /// that each is one key segment: prefix `app/locks` puts lock `job` in
    /// `app%2Flocks/job/`, apart from lock `locks/job` under prefix `app`
    /// (`app/locks%2Fjob/`).
    pub prefix: String,
    /// Recipe or etcd's lock protocol (`?mode=`).
    pub mode: Mode,
    /// How long connecting may take before the store counts as unreachable
    /// (`?connect_timeout=`, default 3s).
    pub connect_timeout: Duration,
    /// Deadline of one request (`?timeout=`, default 5s). Waiting for a lock
    /// is not one request: it has no deadline but the caller's.
    pub request_timeout: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            prefix: "omnilock".to_string(),
            mode: Mode::Recipe,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl EtcdOptions {
    /// The rules every path applies: `InvalidConfig` naming the option.
    pub(crate) fn check(&self) -> Result<()> {
        let prefix = &self.prefix;
        if prefix.is_empty()
            || prefix.chars().any(char::is_control)
            || prefix.split('/').any(str::is_empty)
        {
            return Err(Error::config(format!(
                "invalid key prefix {prefix:?}: no control characters or empty segments"
            )));
        }
        check_timeouts(self.connect_timeout, self.request_timeout)
    }
}

impl EtcdConfig {
    /// Reads an `etcd://` or `etcds://` URL. Unknown options are an error.
    ///
    /// ```
    /// use omnilock_core::StoreUrl;
    /// use omnilock_etcd::{EtcdConfig, Mode};
    /// let url = StoreUrl::parse("etcd://a:2379,b:2379,c:2379/app?mode=lockapi").unwrap();
    /// let config = EtcdConfig::from_url(&url).unwrap();
    /// assert_eq!(config.endpoints, ["http://a:2379", "http://b:2379", "http://c:2379"]);
    /// assert_eq!((config.options.prefix.as_str(), config.options.mode), ("app", Mode::LockApi));
    /// ```
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        let mut url = url.clone();
        if !matches!(url.scheme(), "etcd" | "etcds") {
            return Err(Error::config(format!(
                "not an etcd scheme: {}",
                url.scheme()
            )));
        }
        if url.hosts().is_empty() {
            return Err(Error::config("the URL names no etcd endpoint"));
        }
        let mut options = EtcdOptions::default();
        let path = url.path().trim_matches('/');
        if !path.is_empty() {
            options.prefix = path.to_string();
        }
        options.mode = match url.take("mode").as_deref() {
            None | Some("recipe") => Mode::Recipe,
            Some("lockapi") => Mode::LockApi,
            Some(other) => {
                return Err(Error::config(format!(
                    "option \"mode\" must be \"recipe\" or \"lockapi\", not {other:?}"
                )));
            }
        };
        let tls = TlsFiles::take(&mut url, "etcds")?;
        url.take_timeouts(&mut options.connect_timeout, &mut options.request_timeout)?;
        options.check()?;
        url.finish()?;
        if url.password().is_some() && url.username().unwrap_or("").is_empty() {
            return Err(Error::config(
                "a password needs a user name (etcd://user:pw@...)",
            ));
        }
        let scheme = if tls.enabled { "https" } else { "http" };
        let endpoints = url
            .hosts()
            .iter()
            .map(|h| {
                let mut h = h.clone();
                h.port.get_or_insert(2379);
                format!("{scheme}://{h}")
            })
            .collect();
        Ok(EtcdConfig {
            endpoints,
            username: url.username().filter(|u| !u.is_empty()).map(str::to_string),
            password: url.password().cloned(),
            tls,
            options,
            shown: url.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnilock_core::ErrorKind;

    fn parse(url: &str) -> Result<EtcdConfig> {
        EtcdConfig::from_url(&StoreUrl::parse(url)?)
    }

    #[test]
    fn shapes() {
        let c = parse("etcd://root:pw@127.0.0.1:1,127.0.0.1:2/app/locks?timeout=1s").unwrap();
        assert_eq!(c.endpoints, ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        assert_eq!(c.options.prefix, "app/locks");
        assert_eq!(c.options.mode, Mode::Recipe);
        assert_eq!(c.username.as_deref(), Some("root"));
        assert_eq!(c.password.unwrap().expose(), "pw");
        assert!(!c.shown.contains("pw"), "{}", c.shown);
        assert_eq!(c.options.request_timeout, Duration::from_secs(1));
        let c = parse("etcds://h?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem").unwrap();
        assert_eq!(c.endpoints, ["https://h:2379"]);
        assert!(c.tls.identity.is_some());
        assert_eq!(parse("etcd://h/").unwrap().options.prefix, "omnilock");
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for bad in [
            "etcd:///x",
            "etcd://h?mode=fast",
            "etcd://h?tls_ca=/ca.pem",
            "etcds://h?tls_ca=ca.pem",
            "etcds://h?tls_cert=/c.pem",
            "etcd://h?colour=red",
            "etcd://h/a//b",
            "etcd://:pw@h",
            "etcd://h?timeout=soon",
            "etcd://h?timeout=0s",
        ] {
            assert_eq!(
                parse(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
    }
}
