//! The connection to one etcd cluster: connecting, per-request deadlines,
//! error classification and the key layout both modes share.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use omnilock_core::{Error, ErrorKind, Result};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

use crate::config::EtcdConfig;

/// `/` would nest one lock's keys inside another's range and `%` is the
/// escape itself; everything else in a prefix, name or owner is kept as is.
const SEGMENT: &AsciiSet = &CONTROLS.add(b'/').add(b'%');

/// `text` as one key segment: no `/` left in it, and distinct texts stay
/// distinct.
fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A connected client plus the settings every call needs.
#[derive(Clone)]
pub(crate) struct Etcd {
    pub client: Client,
    /// The configured key prefix as one key segment (`/` and `%`
    /// percent-encoded), so that every lock's range is exactly
    /// `<prefix segment>/<name segment>/` and none contains another's.
    pub prefix: String,
    pub request_timeout: Duration,
    /// The endpoints, for messages.
    pub shown: String,
    /// `host:port` of each endpoint whose metrics can be read over plain
    /// HTTP (none with TLS).
    pub metrics: Vec<String>,
}

impl Etcd {
    /// Connects and proves the cluster answers (and accepts the
    /// credentials) within the connect timeout.
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Self> {
        let shown = config.shown.clone();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
            .with_keep_alive_while_idle(true);
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            options = options.with_user(user.clone(), password.expose().to_string());
        }
        if config.tls {
            options = options.with_tls(tls_options(config)?);
        }
        let endpoints = config.endpoints.clone();
        let connecting = async move {
            let mut client = Client::connect(endpoints, Some(options)).await?;
            // The channel connects lazily: one cheap read proves the cluster
            // is there and the credentials (if any) work.
            client.status().await?;
            Ok::<_, etcd_client::Error>(client)
        };
        let client = match tokio::time::timeout(config.connect_timeout, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(classify(e, &shown)),
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "no etcd endpoint of {shown} answered within {:?}",
                    config.connect_timeout
                )))
            }
        };
        let metrics = if config.tls {
            Vec::new()
        } else {
            config
                .endpoints
                .iter()
                .map(|e| e.trim_start_matches("http://").to_string())
                .collect()
        };
        Ok(Etcd {
            client,
            prefix: segment(&config.prefix),
            request_timeout: config.request_timeout,
            shown,
            metrics,
        })
    }

    /// Runs one request under the request deadline, classifying its error.
    pub(crate) async fn call<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        match tokio::time::timeout(self.request_timeout, op(self.client.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(classify(e, &self.shown)),
            Err(_) => Err(Error::unavailable(format!(
                "etcd at {} did not answer within {:?}",
                self.shown, self.request_timeout
            ))),
        }
    }

    /// `<prefix>/<name>/`, each one encoded key segment: the range holding
    /// one lock's queue. Two segments exactly, so (prefix, name) pairs and
    /// ranges correspond one to one and no range holds another's keys.
    pub(crate) fn lock_prefix(&self, name: &str) -> String {
        format!("{}/{}/", self.prefix, segment(name))
    }

    /// The queue key of `owner` for the lock whose range is `lock_prefix`.
    /// The `o:` keeps it apart from the hexadecimal lease IDs that etcd's
    /// Lock RPC uses in the same range.
    pub(crate) fn owner_key(lock_prefix: &str, owner: &str) -> String {
        format!("{lock_prefix}o:{}", segment(owner))
    }
}

fn tls_options(config: &EtcdConfig) -> Result<TlsOptions> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            Error::config(format!("cannot read {}: {e}", path.display())).with_cause(e)
        })
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &config.tls_ca {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    } else {
        tls = tls.with_enabled_roots();
    }
    if let Some((cert, key)) = &config.tls_identity {
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(tls)
}

/// Maps an etcd client error to a portable one. Messages name the endpoints,
/// never the password.
pub(crate) fn classify(e: etcd_client::Error, shown: &str) -> Error {
    use etcd_client::Error as E;
    use tonic::Code;
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let kind = match &e {
        _ if lower.contains("authentication failed")
            || lower.contains("invalid auth token")
            || lower.contains("user name is empty")
            || lower.contains("user name not found") =>
        {
            return Error::config(format!(
                "etcd at {shown} refused the credentials (user name or password)"
            ))
            .with_cause(e)
        }
        E::GRpcStatus(status) => match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Aborted
            | Code::ResourceExhausted => ErrorKind::Unavailable,
            Code::Unknown if lower.contains("transport") || lower.contains("connect") => {
                ErrorKind::Unavailable
            }
            Code::PermissionDenied | Code::Unauthenticated => {
                return Error::config(format!(
                    "etcd at {shown} denied the request: {}",
                    status.message()
                ))
                .with_cause(e)
            }
            _ if lower.contains("leader changed") || lower.contains("no leader") => {
                ErrorKind::Unavailable
            }
            _ => ErrorKind::Backend,
        },
        E::TransportError(_) | E::IoError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => {
            ErrorKind::Unavailable
        }
        E::InvalidUri(_) | E::InvalidArgs(_) | E::EndpointError(_) => ErrorKind::InvalidConfig,
        _ => ErrorKind::Backend,
    };
    Error::new(kind, format!("etcd at {shown}: {text}")).with_cause(e)
}
