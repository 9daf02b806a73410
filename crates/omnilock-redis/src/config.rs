//! Redis store URLs → settings.
//!
//! - `redis://[user:pw@]host:port[/db]` (one instance),
//! - `redlock://[user:pw@]h1:p1,h2:p2,...,hN:pN[/db]` (N independent nodes),
//! - `redis+cluster://[user:pw@]h1:p1,h2:p2,...[/]` (Redis Cluster: any
//!   reachable node finds the rest),
//! - `redis+sentinel://[user:pw@]s1:p1,s2:p2,.../MASTER_NAME[?sentinel_password=..]`
//!   (a master and its replicas watched by Sentinel),
//!
//! and `rediss://`, `rediss+cluster://`, `rediss+sentinel://` for TLS.

use std::path::PathBuf;
use std::time::Duration;

use omnilock_core::{Error, HostPort, Result, Secret, StoreUrl, check_timeouts};

/// Settings for one Redis store: where it is and how to log in (from the
/// URL), plus the [`RedisOptions`] that a bring-your-own-client builder
/// takes as well.
///
/// Made by `from_url` or a builder, never field by field
/// (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The nodes: one for `redis://`, N for `redlock://`, the seed nodes of
    /// a cluster, or the sentinels.
    pub nodes: Vec<HostPort>,
    /// How the nodes make up the store.
    pub deployment: Deployment,
    /// ACL user of the data nodes, if any.
    pub username: Option<String>,
    /// Password of the data nodes, if any.
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

/// How the nodes of a Redis URL make up the store.
///
/// ```
/// use omnilock_core::StoreUrl;
/// use omnilock_redis::{Deployment, RedisConfig};
///
/// let url = StoreUrl::parse(
///     "redis+sentinel://:datapw@s1:26379,s2:26379/mymaster?sentinel_password=sentpw",
/// )?;
/// let config = RedisConfig::from_url(&url)?;
/// match &config.deployment {
///     Deployment::Sentinel { master, password, .. } => {
///         assert_eq!(master, "mymaster");
///         assert_eq!(password.as_ref().map(|p| p.expose()), Some("sentpw"));
///     }
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(config.deployment.kind(), "redis-sentinel");
/// // Neither password is ever shown.
/// assert!(!config.shown.contains("datapw") && !config.shown.contains("sentpw"));
/// # Ok::<(), omnilock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deployment {
    /// One instance (`redis://`).
    Single,
    /// Redlock over N independent instances (`redlock://`).
    Redlock,
    /// Redis Cluster (`redis+cluster://`): the nodes are seeds; the client
    /// learns the slot map from any of them.
    Cluster,
    /// A master found through Sentinel (`redis+sentinel://`): the nodes are
    /// sentinels, which name the current master.
    Sentinel {
        /// The master's name in the sentinels' configuration (the URL's path).
        master: String,
        /// ACL user for the sentinels (`?sentinel_username=`), if they differ
        /// from the data nodes'.
        username: Option<String>,
        /// Password for the sentinels (`?sentinel_password=`); without it the
        /// sentinels are reached without a password.
        password: Option<Secret>,
    },
}

impl Deployment {
    /// The store's short name, for messages and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Deployment::Single => "redis",
            Deployment::Redlock => "redlock",
            Deployment::Cluster => "redis-cluster",
            Deployment::Sentinel { .. } => "redis-sentinel",
        }
    }
}

/// Grants confirmed by replicas (`?wait_replicas=N&wait_timeout=DUR`): after
/// the script that grants or renews a lock, `WAIT N timeout` on the same
/// connection. If fewer than N replicas have the write in time, the grant is
/// undone and the acquire tries again (or fails `Unavailable` once its
/// timeout passes); a renewal fails the same way and is retried by the
/// renewal loop.
///
/// This narrows the window in which a failover to a replica loses a held
/// lock; it does not close it. Replication stays asynchronous: the master
/// may fail after the script and before `WAIT` returns, and a replica that
/// acknowledged may still not be the one promoted.
///
/// ```
/// use std::time::Duration;
/// use omnilock_core::StoreUrl;
/// use omnilock_redis::{RedisConfig, WaitReplicas};
///
/// let url = StoreUrl::parse("redis+cluster://:pw@h1:7000,h2:7000?wait_replicas=1&wait_timeout=200ms")?;
/// let config = RedisConfig::from_url(&url)?;
/// assert_eq!(
///     config.options.wait_replicas,
///     Some(WaitReplicas { replicas: 1, timeout: Duration::from_millis(200) })
/// );
/// // Redlock's nodes have no replicas to wait for.
/// assert!(RedisConfig::from_url(&StoreUrl::parse("redlock://a,b,c/?wait_replicas=1")?).is_err());
/// # Ok::<(), omnilock_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    /// How many replicas must acknowledge.
    pub replicas: u32,
    /// How long `WAIT` may block.
    pub timeout: std::time::Duration,
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
    /// Replicas that must confirm a grant or renewal before it is returned
    /// (`?wait_replicas=N`, default none), and how long to wait for them
    /// (`?wait_timeout=`, default 1s). Not for Redlock. See [`WaitReplicas`].
    pub wait_replicas: Option<WaitReplicas>,
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
            wait_replicas: None,
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
        url.take_timeouts(&mut options.connect_timeout, &mut options.response_timeout)?;
        let replicas = url.take_u64("wait_replicas")?;
        let timeout = url.take_duration("wait_timeout")?;
        options.wait_replicas = match (replicas, timeout) {
            (None | Some(0), None) => None,
            (None | Some(0), Some(_)) => {
                return Err(Error::config(
                    "option \"wait_timeout\" needs wait_replicas=N (N at least 1)",
                ));
            }
            (Some(replicas), timeout) => Some(WaitReplicas {
                replicas: u32::try_from(replicas).unwrap_or(u32::MAX),
                timeout: timeout.unwrap_or(Duration::from_secs(1)),
            }),
        };
        options.check(redlock)?;
        Ok(options)
    }

    /// The rules every path applies: `InvalidConfig` naming the option.
    pub(crate) fn check(&self, redlock: bool) -> Result<()> {
        let prefix = &self.prefix;
        if prefix.is_empty() || prefix.contains(['{', '}']) || prefix.chars().any(char::is_control)
        {
            return Err(Error::config(
                "option \"prefix\" must be non-empty, without braces or control characters",
            ));
        }
        // Above an hour a dead waiter would hold up the line that long, and
        // far above it the scripts' millisecond arithmetic leaves integers.
        if self.waiter_lease < Duration::from_millis(100)
            || self.waiter_lease > Duration::from_secs(3600)
        {
            return Err(Error::config(
                "option \"waiter_lease\" must be between 100ms and 1h",
            ));
        }
        check_timeouts(self.connect_timeout, self.response_timeout)?;
        if let Some(wait) = self.wait_replicas {
            if redlock {
                return Err(Error::config(
                    "option \"wait_replicas\" is for a master with replicas (redis://, \
                     redis+cluster://, redis+sentinel://); Redlock's nodes are independent",
                ));
            }
            if !(1..=64).contains(&wait.replicas) {
                return Err(Error::config(
                    "option \"wait_replicas\" must be between 1 and 64 (0, or leaving it \
                     out, waits for none)",
                ));
            }
            // WAIT 0 blocks for ever; WAIT plus the script and a round trip
            // must fit in the reply timeout.
            if wait.timeout < Duration::from_millis(1) || wait.timeout * 2 > self.response_timeout {
                return Err(Error::config(format!(
                    "option \"wait_timeout\" must be at least 1ms and at most half the reply \
                     timeout (\"timeout\", now {:?})",
                    self.response_timeout
                )));
            }
        }
        Ok(())
    }
}

impl RedisConfig {
    /// Reads a `redis://`, `redlock://`, `redis+cluster://` or
    /// `redis+sentinel://` URL (and their TLS forms). Unknown options are an
    /// error.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        let mut url = url.clone();
        let (kind, tls_scheme) = match url.scheme() {
            "redis" => ("single", false),
            "rediss" => ("single", true),
            "redlock" => ("redlock", false),
            "redis+cluster" => ("cluster", false),
            "rediss+cluster" => ("cluster", true),
            "redis+sentinel" => ("sentinel", false),
            "rediss+sentinel" => ("sentinel", true),
            other => return Err(Error::config(format!("not a Redis scheme: {other}"))),
        };
        let redlock = kind == "redlock";
        let nodes = url.hosts().to_vec();
        if nodes.is_empty() {
            return Err(Error::config("the URL names no Redis host"));
        }
        if kind == "single" && nodes.len() > 1 {
            return Err(Error::config(
                "redis:// names one instance; use redlock://h1,h2,h3/ for several independent \
                 nodes, redis+cluster://h1,h2,h3/ for a cluster, or \
                 redis+sentinel://s1,s2,s3/MASTER for sentinels",
            ));
        }
        check_redlock_nodes(redlock, nodes.len())?;
        let path = url.path().trim_end_matches('/').to_string();
        let (deployment, db) = match kind {
            "single" => (Deployment::Single, database(&path)?),
            "redlock" => (Deployment::Redlock, database(&path)?),
            "cluster" if path.is_empty() => (Deployment::Cluster, 0),
            "cluster" => {
                return Err(Error::config(format!(
                    "Redis Cluster has only database 0; remove the path {path:?}"
                )));
            }
            _ => {
                // redis+sentinel://s1,s2/MASTER[/DB]
                let (master, db) = match path.split_once('/') {
                    Some((master, db)) => (master, database(db)?),
                    None => (path.as_str(), 0),
                };
                if master.is_empty() {
                    return Err(Error::config(
                        "redis+sentinel:// needs the master's name as the path: \
                         redis+sentinel://s1:26379,s2:26379/mymaster",
                    ));
                }
                let deployment = Deployment::Sentinel {
                    master: master.to_string(),
                    username: url.take("sentinel_username").filter(|u| !u.is_empty()),
                    // Empty: no password (AUTH "" would only fail).
                    password: url
                        .take("sentinel_password")
                        .filter(|p| !p.is_empty())
                        .map(Secret::new),
                };
                (deployment, db)
            }
        };
        let options = RedisOptions::take_from(&mut url, redlock)?;
        let tls = tls_scheme || url.take_bool("tls")?.unwrap_or(false);
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
            deployment,
            username: url.username().map(str::to_string),
            password: url.password().cloned(),
            db,
            tls,
            tls_ca,
            options,
            shown: url.to_string(),
        })
    }

    /// Redlock over the nodes, rather than one master.
    pub fn is_redlock(&self) -> bool {
        self.deployment == Deployment::Redlock
    }
}

/// The database number of a URL's path (`""` is 0).
fn database(path: &str) -> Result<i64> {
    if path.is_empty() {
        return Ok(0);
    }
    path.parse()
        .ok()
        .filter(|d| *d >= 0)
        .ok_or_else(|| Error::config(format!("invalid database number {path:?}")))
}

/// Redlock's majority means nothing below three independent nodes.
pub(crate) fn check_redlock_nodes(redlock: bool, nodes: usize) -> Result<()> {
    if redlock && nodes < 3 {
        return Err(Error::config(
            "redlock:// needs at least 3 independent nodes (5 is usual)",
        ));
    }
    // Each node's wake-ups are a bit in one u64 per waiter.
    if redlock && nodes > 64 {
        return Err(Error::config(format!(
            "redlock:// takes at most 64 nodes, not {nodes} (5 is usual)"
        )));
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
        assert!(c.is_redlock());
        assert_eq!(c.nodes.len(), 5);
        for bad in [
            "redis://a:1,b:2",
            "redlock://a:1,b:2",
            "redis://h/x",
            "redis://h?prefix={x}",
            "redis://h?waiter_lease=1ms",
            "redis://h?waiter_lease=2h",
            "redlock://a:1,b:2,c:3/?waiter_lease=99999999999999s",
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
