//! Store URLs: `scheme://[user[:password]@]host[:port][,host[:port]...][/path][?key=value&...]`.
//!
//! One parser for every backend, because the standard URL grammar has no room
//! for the comma-separated host lists that ZooKeeper, etcd and Redlock need.
//! Backends read their options with [`StoreUrl::take`] and friends, then call
//! [`StoreUrl::finish`] so that a misspelt option is an error, not a silent default.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::error::{Error, Result};
use crate::sync::lock_unpoisoned;

/// A password or other credential. Its `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for handing to a client library. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// One `host[:port]` of a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// A host name or IP address (IPv6 without brackets).
    pub host: String,
    /// The port, when given.
    pub port: Option<u16>,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// A parsed store URL. `Debug` and `Display` show it with the password redacted.
///
/// ```
/// use omnilock_core::StoreUrl;
/// use std::time::Duration;
///
/// let mut url = StoreUrl::parse("zk://app:s3cret@h1:2181,h2:2181/locks?ttl=10s").unwrap();
/// assert_eq!(url.scheme(), "zk");
/// assert_eq!(url.hosts().len(), 2);
/// assert_eq!(url.path(), "locks");
/// assert_eq!(url.password().unwrap().expose(), "s3cret");
/// assert_eq!(url.take_duration("ttl").unwrap(), Some(Duration::from_secs(10)));
/// url.finish().unwrap();
/// assert_eq!(url.to_string(), "zk://app:***@h1:2181,h2:2181/locks?ttl=10s");
/// ```
#[derive(Clone)]
pub struct StoreUrl {
    scheme: String,
    username: Option<String>,
    password: Option<Secret>,
    hosts: Vec<HostPort>,
    path: String,
    query: Vec<(String, String)>,
    unread: Vec<String>,
    /// Every option name asked for, given or not: what the readers understand.
    /// Shared by clones, since backends read options from a copy.
    consulted: Arc<Mutex<Vec<String>>>,
}

impl StoreUrl {
    /// Parses a store URL. Errors are [`crate::ErrorKind::InvalidConfig`] and
    /// never quote the password.
    pub fn parse(input: &str) -> Result<Self> {
        let input = input.trim();
        let (scheme, rest) = input.split_once("://").ok_or_else(|| {
            Error::config("a store URL looks like scheme://host:port/...; no \"://\" found")
        })?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            // Not quoted: a URL mangled before its "://" may carry a password there.
            return Err(Error::config(
                "invalid URL scheme: use letters, digits, '+', '-' and '.' before \"://\"",
            ));
        }
        let scheme = scheme.to_ascii_lowercase();
        let (before_query, query_str) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.split_once('/') {
            Some((a, p)) => (a, p),
            None => (before_query, ""),
        };
        // An '@' after the host list almost always means a password with an
        // unencoded '/', '?' or '#' split the URL early: the rest of the
        // password would become host, port, path or option text, and any
        // message quoting those would leak it. Say so without quoting anything.
        if !authority.is_empty() && rest[authority.len()..].contains('@') {
            return Err(Error::config(
                "an '@' after the host part of the URL: percent-encode '/', '?', '#' and \
                 '@' in a user name or password (%2F, %3F, %23, %40), and '@' in a path \
                 or option (%40)",
            ));
        }
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, pass) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                let user = decode(user, "user name")?;
                let pass = pass
                    .map(|p| {
                        decode(p, "password").map_err(|_| {
                            Error::config("the password in the URL is not valid percent-encoding")
                        })
                    })
                    .transpose()?;
                ((!user.is_empty()).then_some(user), pass.map(Secret))
            }
        };
        let mut hosts = Vec::new();
        if !hostlist.is_empty() {
            for part in hostlist.split(',') {
                hosts.push(parse_host(part)?);
            }
        }
        let mut query = Vec::new();
        if let Some(q) = query_str {
            for pair in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let k = decode(k, "option name")?;
                let v = decode(v, "option value")?;
                if query.iter().any(|(key, _)| *key == k) {
                    return Err(Error::config(format!("option {k:?} is given twice")));
                }
                query.push((k, v));
            }
        }
        let unread = query.iter().map(|(k, _)| k.clone()).collect();
        Ok(StoreUrl {
            scheme,
            username,
            password,
            hosts,
            path: decode(path, "path")?,
            query,
            unread,
            consulted: Arc::default(),
        })
    }

    /// The scheme, lower-cased (`redis`, `etcd`, ...).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user name, if any.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// The password, if any.
    pub fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    /// The hosts, in the order given.
    pub fn hosts(&self) -> &[HostPort] {
        &self.hosts
    }

    /// The path after the authority, without the leading `/`, percent-decoded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Reads option `key` and marks it as understood.
    pub fn take(&mut self, key: &str) -> Option<String> {
        self.unread.retain(|k| k != key);
        let mut consulted = lock_unpoisoned(&self.consulted);
        if !consulted.iter().any(|k| k == key) {
            consulted.push(key.to_string());
        }
        drop(consulted);
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    /// Reads option `key` as a duration such as `500ms`, `15s` or `2m`.
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>> {
        self.take(key)
            .map(|v| parse_duration(&v).map_err(|e| prefix(e, key)))
            .transpose()
    }

    /// Reads the two deadlines every networked store takes from its URL,
    /// `?connect_timeout=` into `connect` and `?timeout=` (one request)
    /// into `request`, leaving each as it is when the URL has no value.
    /// [`check_timeouts`] then applies the rule to URL and builder alike.
    ///
    /// ```
    /// use std::time::Duration;
    /// use omnilock_core::StoreUrl;
    /// let mut url = StoreUrl::parse("etcd://h:2379?timeout=750ms").unwrap();
    /// let (mut connect, mut request) = (Duration::from_secs(3), Duration::from_secs(5));
    /// url.take_timeouts(&mut connect, &mut request).unwrap();
    /// assert_eq!((connect, request), (Duration::from_secs(3), Duration::from_millis(750)));
    /// ```
    pub fn take_timeouts(&mut self, connect: &mut Duration, request: &mut Duration) -> Result<()> {
        if let Some(timeout) = self.take_duration("connect_timeout")? {
            *connect = timeout;
        }
        if let Some(timeout) = self.take_duration("timeout")? {
            *request = timeout;
        }
        Ok(())
    }

    /// Reads option `key` as a boolean (`true`/`false`/`1`/`0`/`yes`/`no`).
    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>> {
        self.take(key)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" | "" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(Error::config(format!(
                    "option {key:?}: expected true or false, got {v:?}"
                ))),
            })
            .transpose()
    }

    /// Reads option `key` as a number.
    pub fn take_u64(&mut self, key: &str) -> Result<Option<u64>> {
        self.take(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    Error::config(format!("option {key:?}: expected a number, got {v:?}"))
                })
            })
            .transpose()
    }

    /// Every option name read so far, whether the URL gave it or not, in the
    /// order first asked for, by this URL or any clone of it. After a store's
    /// `from_url` this is the list of options that store understands (the
    /// docs check compares it with each backend's page).
    ///
    /// ```
    /// use omnilock_core::StoreUrl;
    /// let mut url = StoreUrl::parse("mem://?ttl=5s").unwrap();
    /// url.take("ttl");
    /// url.take("pool");
    /// assert_eq!(url.consulted_options(), ["ttl", "pool"]);
    /// ```
    pub fn consulted_options(&self) -> Vec<String> {
        lock_unpoisoned(&self.consulted).clone()
    }

    /// Fails if an option was given that nobody read: a misspelt option must
    /// not silently fall back to a default.
    pub fn finish(&self) -> Result<()> {
        if self.unread.is_empty() {
            return Ok(());
        }
        // An unencoded '&' in a password option splits the password into
        // more "options": their names would be pieces of it.
        if self.query.iter().any(|(k, _)| k.contains("password")) {
            return Err(Error::config(format!(
                "unknown option(s) for {}:// (not shown: the URL has a password option; \
                 percent-encode '&', '=' and '#' in it as %26, %3D and %23)",
                self.scheme
            )));
        }
        Err(Error::config(format!(
            "unknown option(s) for {}://: {}",
            self.scheme,
            self.unread.join(", ")
        )))
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if self.username.is_some() || self.password.is_some() {
            f.write_str(self.username.as_deref().unwrap_or(""))?;
            if self.password.is_some() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        let hosts: Vec<String> = self.hosts.iter().map(|h| h.to_string()).collect();
        f.write_str(&hosts.join(","))?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        for (i, (k, v)) in self.query.iter().enumerate() {
            // An option that carries a password (`sentinel_password=`) is
            // redacted like the URL's own, and so is what follows it: an
            // unencoded '&' in the password makes its rest look like more
            // options.
            if k.contains("password") {
                write!(f, "{}{k}=***", if i == 0 { '?' } else { '&' })?;
                if i + 1 < self.query.len() {
                    f.write_str("&…")?;
                }
                break;
            }
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

/// The rule for the deadlines of [`StoreUrl::take_timeouts`]: both above
/// zero, since zero would make connecting or every request time out at
/// once. The error names the URL option.
///
/// ```
/// use std::time::Duration;
/// use omnilock_core::check_timeouts;
/// assert!(check_timeouts(Duration::from_secs(3), Duration::from_secs(5)).is_ok());
/// let err = check_timeouts(Duration::ZERO, Duration::from_secs(5)).unwrap_err();
/// assert!(err.to_string().contains("connect_timeout"));
/// ```
pub fn check_timeouts(connect: Duration, request: Duration) -> Result<()> {
    if connect.is_zero() {
        return Err(Error::config(
            "option \"connect_timeout\" must be above zero",
        ));
    }
    if request.is_zero() {
        return Err(Error::config("option \"timeout\" must be above zero"));
    }
    Ok(())
}

/// Parses a human duration (`500ms`, `15s`, `2m`, `1h 30m`).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(omnilock_core::parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
/// assert!(omnilock_core::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        Error::config(format!(
            "invalid duration {text:?}: {e} (try 500ms, 15s, 2m)"
        ))
    })
}

fn prefix(err: Error, key: &str) -> Error {
    Error::config(format!("option {key:?}: {}", err.message()))
}

fn decode(text: &str, what: &str) -> Result<String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| Error::config(format!("the {what} in the URL is not valid UTF-8")))
}

fn parse_host(part: &str) -> Result<HostPort> {
    let (host, port) = if let Some(rest) = part.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| Error::config(format!("unclosed '[' in host {part:?}")))?;
        match after {
            "" => (host, None),
            p if p.starts_with(':') => (host, Some(&p[1..])),
            _ => return Err(Error::config(format!("invalid host {part:?}"))),
        }
    } else {
        match part.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (part, None),
        }
    };
    if host.is_empty() {
        return Err(Error::config(format!("empty host in {part:?}")));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(Error::config(format!("invalid host {host:?}")));
    }
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| Error::config(format!("invalid port {p:?} for host {host}")))
        })
        .transpose()?;
    Ok(HostPort {
        host: host.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn shapes() {
        let url = StoreUrl::parse("mem://").unwrap();
        assert_eq!(url.scheme(), "mem");
        assert!(url.hosts().is_empty());

        let url = StoreUrl::parse("sqlite:///var/lib/x.db?table=t").unwrap();
        assert_eq!(url.path(), "var/lib/x.db");

        let url = StoreUrl::parse("redis://:pw@127.0.0.1:6379/2").unwrap();
        assert_eq!(url.username(), None);
        assert_eq!(url.password().unwrap().expose(), "pw");
        assert_eq!(url.hosts()[0].port, Some(6379));
        assert_eq!(url.path(), "2");

        let url = StoreUrl::parse("etcd://[::1]:2379,[::1]:2380/p").unwrap();
        assert_eq!(url.hosts()[1].host, "::1");
        assert_eq!(url.to_string(), "etcd://[::1]:2379,[::1]:2380/p");

        let url = StoreUrl::parse("mysql://u:p%40ss%3Aw@db:3306/app").unwrap();
        assert_eq!(url.password().unwrap().expose(), "p@ss:w");
        assert_eq!(url.username(), Some("u"));
    }

    #[test]
    fn passwords_never_shown() {
        let url = StoreUrl::parse("postgres://admin:hunter2@db/app").unwrap();
        assert!(!format!("{url} {url:?}").contains("hunter2"));
        let err = StoreUrl::parse("postgres://admin:hunter2@db:99999/app").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("hunter2"));
        let err = StoreUrl::parse("postgres://admin:hun%FFter2@db/app").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("hun"));
        let url = StoreUrl::parse("redis+sentinel://s1/m?sentinel_password=hunter3").unwrap();
        assert!(!format!("{url} {url:?}").contains("hunter3"));
        // An unencoded '&' splits the password: neither piece is shown.
        let mut url =
            StoreUrl::parse("redis+sentinel://s1/m?ttl=2s&sentinel_password=hun&ter4=x").unwrap();
        assert!(!format!("{url} {url:?}").contains("ter4"));
        url.take("ttl");
        url.take("sentinel_password");
        let err = url.finish().unwrap_err();
        assert!(!format!("{err} {err:?}").contains("ter4"), "{err}");
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for bad in [
            "",
            "redis",
            "://x",
            "re dis://x",
            "redis://h:notaport",
            "redis://h:0",
            "redis://h1,,h2",
            "redis://[::1",
            "redis://h?ttl=1s&ttl=2s",
        ] {
            let err = StoreUrl::parse(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}");
        }
    }

    #[test]
    fn options_must_be_understood() {
        let mut url = StoreUrl::parse("mem://?ttl=2s&tll=3s").unwrap();
        assert_eq!(
            url.take_duration("ttl").unwrap(),
            Some(Duration::from_secs(2))
        );
        let err = url.finish().unwrap_err();
        assert!(err.message().contains("tll"), "{err}");
        let mut url = StoreUrl::parse("mem://?ttl=forever").unwrap();
        assert_eq!(
            url.take_duration("ttl").unwrap_err().kind(),
            ErrorKind::InvalidConfig
        );
    }
}
