//! Redis store URLs → settings.
//!
//! `redis://[user:pw@]host:port[/db]` (one instance) and
//! `redlock://[user:pw@]h1:p1,h2:p2,...,hN:pN[/db]` (N independent nodes).

use std::path::PathBuf;
use std::time::Duration;

use omnilock_core::{Error, HostPort, Result, Secret, StoreUrl};

/// Settings for one Redis store: where it is and how to log in (from the
/// URL), plus the [`RedisOptions`] that a bring-your-own-client builder
/// takes as well.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The nodes: one for `redis://`, N for `redlock://`.
    pub nodes: Vec<HostPort>,
    /// Redlock over the nodes, rather than one instance.
    pub redlock: bool,
    /// ACL user, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<Secret>,
    /// Database number (`/db`).
    pub db: i64,
    /// Speak TLS to every node (`rediss://`, or `?tls=true`).
    pub tls: bool,
    /// A PEM file of CA certificates to trust instead of the system's
    /// (`?tls_ca=/abs/ca.pem`).
    pub tls_ca: Option<PathBuf>,
    /// The lock options (`?prefix=`, `?waiter_lease=`, `?connect_timeout=`,
    /// `?timeout=`).
    pub options: RedisOptions,
    /// Where the store is, for messages (password redacted).
    pub shown: String,
}

/// The options of a Redis store that are not about reaching it: the URL's
/// query options, and the setters of
/// [`RedisBuilder`](crate::RedisBuilder) and
/// [`RedlockBuilder`](crate::RedlockBuilder). Both paths check them with the
/// same rules and messages.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Key prefix (`?prefix=`, default `omnilock`): keys are `{prefix:name}...`.
    pub prefix: String,
    /// How long a waiter's place in the queue lasts without a refresh
    /// (`?waiter_lease=`, default 3s). Waiters re-check every third of it,
    /// which also covers a lost wake-up message.
    pub waiter_lease: Duration,
    /// Connect timeout per node (`?connect_timeout=`, default 2s).
    pub connect_timeout: Duration,
    /// Reply timeout per command (`?timeout=`, default 2s; Redlock 250ms per
    /// node, which must stay far below the TTL).
    pub response_timeout: Duration,
}

impl RedisOptions {
    /// The defaults for one instance, or for Redlock (`redlock`), whose
    /// per-node reply timeout is shorter.
    pub fn defaults(redlock: bool) -> Self {
        RedisOptions {
            prefix: "omnilock".into(),
            waiter_lease: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(2),
            response_timeout: if redlock {
                Duration::from_millis(250)
            } else {
                Duration::from_secs(2)
            },
        }
    }

    /// Takes the options this type holds out of `url`, over the defaults,
    /// and checks them.
    fn take_from(url: &mut StoreUrl, redlock: bool) -> Result<Self> {
        let mut options = RedisOptions::defaults(redlock);
        if let Some(prefix) = url.take("prefix") {
            options.prefix = prefix;
        }
        if let Some(lease) = url.take_duration("waiter_lease")? {
            options.waiter_lease = lease;
        }
        if let Some(timeout) = url.take_duration("connect_timeout")? {
            options.connect_timeout = timeout;
        }
        if let Some(timeout) = url.take_duration("timeout")? {
            options.response_timeout = timeout;
        }
        options.check()?;
        Ok(options)
    }

    /// The rules every path applies: `InvalidConfig` naming the option.
    pub(crate) fn check(&self) -> Result<()> {
        let prefix = &self.prefix;
        if prefix.is_empty() || prefix.contains(['{', '}']) || prefix.chars().any(char::is_control)
        {
            return Err(Error::config(
                "option \"prefix\" must be non-empty, without braces or control characters",
            ));
        }
        if self.waiter_lease < Duration::from_millis(100) {
            return Err(Error::config(
                "option \"waiter_lease\" must be at least 100ms",
            ));
        }
        // Zero would make every connect or reply time out at once.
        if self.connect_timeout.is_zero() {
            return Err(Error::config(
                "option \"connect_timeout\" must be above zero",
            ));
        }
        if self.response_timeout.is_zero() {
            return Err(Error::config("option \"timeout\" must be above zero"));
        }
        Ok(())
    }
}

impl RedisConfig {
    /// Reads a `redis://` or `redlock://` URL. Unknown options are an error.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        let mut url = url.clone();
        let redlock = match url.scheme() {
            "redis" => false,
            "redlock" => true,
            "rediss" => false,
            other => return Err(Error::config(format!("not a Redis scheme: {other}"))),
        };
        let nodes = url.hosts().to_vec();
        if nodes.is_empty() {
            return Err(Error::config("the URL names no Redis host"));
        }
        if !redlock && nodes.len() > 1 {
            return Err(Error::config(
                "redis:// names one instance; use redlock://h1,h2,h3/ for several independent nodes",
            ));
        }
        check_redlock_nodes(redlock, nodes.len())?;
        let db = match url.path() {
            "" => 0,
            db => db
                .parse()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| Error::config(format!("invalid database number {db:?}")))?,
        };
        let options = RedisOptions::take_from(&mut url, redlock)?;
        let tls = url.scheme() == "rediss" || url.take_bool("tls")?.unwrap_or(false);
        let tls_ca = url.take("tls_ca").map(PathBuf::from);
        if let Some(ca) = &tls_ca {
            if !tls {
                return Err(Error::config(
                    "option \"tls_ca\" needs rediss:// or tls=true",
                ));
            }
            if !ca.is_absolute() {
                return Err(Error::config("option \"tls_ca\" must be an absolute path"));
            }
        }
        url.finish()?;
        Ok(RedisConfig {
            nodes,
            redlock,
            username: url.username().map(str::to_string),
            password: url.password().cloned(),
            db,
            tls,
            tls_ca,
            options,
            shown: url.to_string(),
        })
    }
}

/// Redlock's majority means nothing below three independent nodes.
pub(crate) fn check_redlock_nodes(redlock: bool, nodes: usize) -> Result<()> {
    if redlock && nodes < 3 {
        return Err(Error::config(
            "redlock:// needs at least 3 independent nodes (5 is usual)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnilock_core::ErrorKind;

    fn parse(url: &str) -> Result<RedisConfig> {
        RedisConfig::from_url(&StoreUrl::parse(url)?)
    }

    #[test]
    fn shapes() {
        let c = parse("redis://:pw@127.0.0.1:6379/2?prefix=app").unwrap();
        assert_eq!(c.db, 2);
        assert_eq!(c.options.prefix, "app");
        assert_eq!(c.password.unwrap().expose(), "pw");
        assert!(!c.shown.contains("pw"));
        let c = parse("redlock://a:1,b:2,c:3,d:4,e:5/").unwrap();
        assert!(c.redlock);
        assert_eq!(c.nodes.len(), 5);
        for bad in [
            "redis://a:1,b:2",
            "redlock://a:1,b:2",
            "redis://h/x",
            "redis://h?prefix={x}",
            "redis://h?waiter_lease=1ms",
            "redis://h?timeout=0s",
            "redis://h?colour=red",
        ] {
            assert_eq!(
                parse(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
        let c = parse("rediss://h:1?tls_ca=/etc/ca.pem").unwrap();
        assert!(c.tls);
        assert!(parse("redis://h?tls_ca=/etc/ca.pem").is_err());
        assert!(parse("rediss://h?tls_ca=ca.pem").is_err());
    }
}
