//! One Redis server: its connection, its keys, its errors.

use std::time::Duration;

use omnilock_core::{Error, ErrorKind, HostPort, Result};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, RedisError};

use crate::config::{RedisConfig, RedisOptions};

/// Braces would change the hash tag and `%` is the escape itself; everything
/// else in a lock name is kept as is.
const KEY: &AsciiSet = &CONTROLS.add(b'{').add(b'}').add(b'%');

/// The prefix is written with `:` (which ends it in a key) and `%` escaped,
/// so that `(prefix, name)` maps one-to-one to keys: prefix `app` with name
/// `x:y` and prefix `app:x` with name `y` are different locks.
const PREFIX: &AsciiSet = &KEY.add(b':');

/// The keys of one lock, all in the hash slot of `{prefix:name}`.
pub(crate) struct Keys {
    pub lock: String,
    pub fence: String,
    pub queue: String,
    pub timeouts: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let base = format!(
            "{{{}:{}}}",
            utf8_percent_encode(prefix, PREFIX),
            utf8_percent_encode(name, KEY)
        );
        Keys {
            fence: format!("{base}:fence"),
            queue: format!("{base}:queue"),
            timeouts: format!("{base}:timeouts"),
            lock: base,
        }
    }
}

/// A connection (auto-reconnecting) to one node, and the client that opens
/// further ones (the wake-up subscription).
#[derive(Clone)]
pub(crate) struct Node {
    pub conn: ConnectionManager,
    pub client: redis::Client,
    pub address: String,
}

impl Node {
    /// The client that a URL's settings describe for `node`.
    pub(crate) fn client(config: &RedisConfig, node: &HostPort) -> Result<redis::Client> {
        let address = node.to_string();
        let (host, port) = (node.host.clone(), node.port.unwrap_or(6379));
        let addr = if config.tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let mut redis_info = RedisConnectionInfo::default().set_db(config.db);
        if let Some(username) = &config.username {
            redis_info = redis_info.set_username(username);
        }
        if let Some(password) = &config.password {
            redis_info = redis_info.set_password(password.expose());
        }
        let info = addr
            .into_connection_info()
            .map_err(|e| map_err(e, &address))?
            .set_redis_settings(redis_info);
        match &config.tls_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::config(format!("cannot read tls_ca {}: {e}", path.display()))
                })?;
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                redis::Client::build_with_tls(info, certificates)
            }
            None => redis::Client::open(info),
        }
        .map_err(|e| map_err(e, &address))
    }

    /// Opens omnilock's connection to the node `client` reaches, or adopts
    /// the application's `manager` (which must reach the same node), and
    /// checks that the node answers and accepts the credentials.
    pub(crate) async fn open(
        client: redis::Client,
        manager: Option<ConnectionManager>,
        options: &RedisOptions,
    ) -> Result<Self> {
        let address = address_of(&client);
        if matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::TcpTls { .. }
        ) {
            ensure_crypto_provider();
        }
        let mut conn = match manager {
            Some(manager) => manager,
            None => {
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(options.connect_timeout))
                    // Redlock's short per-node bound is applied per round by
                    // the caller; connecting and one-off commands get the
                    // longer one.
                    .set_response_timeout(Some(
                        options.response_timeout.max(options.connect_timeout),
                    ))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1));
                ConnectionManager::new_with_config(client.clone(), manager_config)
                    .await
                    .map_err(|e| map_err(e, &address))?
            }
        };
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| map_err(e, &address))?;
        Ok(Node {
            conn,
            client,
            address,
        })
    }

    pub(crate) fn err(&self, e: RedisError) -> Error {
        map_err(e, &self.address)
    }
}

/// Where `client` connects, for messages: `host:port` or the socket path,
/// never the credentials.
pub(crate) fn address_of(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

/// redis-rs 1.x builds its rustls configuration from the process-wide
/// crypto provider and panics when there is none. An application that chose
/// a provider has installed it by now and keeps it; otherwise omnilock
/// installs ring's (the one the etcd backend uses too), so that `rediss://`
/// works without set-up and never panics.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: any provider will do.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Classifies a Redis error; messages name the node, never the password.
pub(crate) fn map_err(e: RedisError, address: &str) -> Error {
    let code = e.code().unwrap_or("");
    let error = if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM")
    {
        Error::config(format!(
            "Redis at {address} refused the credentials (user name or password)"
        ))
    } else if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || matches!(code, "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN")
    {
        // The reason in the message too: Redlock joins several nodes'
        // messages into one line, without their causes.
        let why = if e.is_connection_refusal() {
            "connection refused"
        } else if e.is_timeout() {
            "timed out"
        } else if e.is_connection_dropped() {
            "connection dropped"
        } else if !code.is_empty() {
            code
        } else {
            "I/O error"
        };
        Error::unavailable(format!("cannot reach Redis at {address} ({why})"))
    } else {
        Error::new(
            ErrorKind::Backend,
            format!("Redis at {address} answered with an error"),
        )
    };
    error.with_cause(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_cannot_leave_their_hash_tag() {
        let keys = Keys::new("omnilock", "a}b{c%d");
        assert_eq!(keys.lock, "{omnilock:a%7Db%7Bc%25d}");
        assert_eq!(keys.queue, "{omnilock:a%7Db%7Bc%25d}:queue");
        // Distinct names stay distinct keys.
        assert_ne!(Keys::new("p", "a%7D").lock, Keys::new("p", "a}").lock);
    }

    #[test]
    fn abutting_prefixes_and_names_do_not_meet() {
        assert_ne!(Keys::new("app", "x:y").lock, Keys::new("app:x", "y").lock);
        assert_ne!(Keys::new("a%3Ab", "c").lock, Keys::new("a:b", "c").lock);
        assert_eq!(Keys::new("omnilock", "job").lock, "{omnilock:job}");
    }

    proptest! {
        /// Distinct (prefix, name) pairs never share a key.
        #[test]
        fn keys_are_one_to_one(
            a in ("[a-z:%{}]{1,6}", "[a-z:%{}/]{1,6}"),
            b in ("[a-z:%{}]{1,6}", "[a-z:%{}/]{1,6}"),
        ) {
            let (ka, kb) = (Keys::new(&a.0, &a.1), Keys::new(&b.0, &b.1));
            prop_assert_eq!(a == b, ka.lock == kb.lock);
            for key in [&ka.lock, &ka.fence, &ka.queue, &ka.timeouts] {
                for other in [&kb.lock, &kb.fence, &kb.queue, &kb.timeouts] {
                    if a != b {
                        prop_assert_ne!(key, other);
                    }
                }
            }
        }
    }
}
