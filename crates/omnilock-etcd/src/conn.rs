//! The connection to one etcd cluster: connecting, per-request deadlines,
//! error classification and the key layout both modes share.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use omnilock_core::{Backoff, Error, ErrorKind, Result, retry_when};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

use crate::config::{EtcdConfig, EtcdOptions};

/// `/` would nest one lock's keys inside another's range and `%` is the
/// escape itself; everything else in a prefix, name or owner is kept as is.
const SEGMENT: &AsciiSet = &CONTROLS.add(b'/').add(b'%');

/// `text` as one key segment: no `/` left in it, and distinct texts stay
/// distinct.
fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// The text a key [`segment`] encodes; `None` if it is no segment of ours
/// (not UTF-8 once decoded).
pub(crate) fn unsegment(segment: &str) -> Option<String> {
    percent_decode_str(segment)
        .decode_utf8()
        .ok()
        .map(|text| text.into_owned())
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
    /// The endpoints as `host:port,host:port`, for messages (no scheme,
    /// user, path or options).
    pub shown: String,
}

impl Etcd {
    /// Connects and proves the cluster answers (and accepts the
    /// credentials) within the connect timeout.
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Self> {
        let deadline = tokio::time::Instant::now() + config.options.connect_timeout;
        let shown = endpoint_list(&config.endpoints);
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.options.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
            .with_keep_alive_while_idle(true);
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            options = options.with_user(user.clone(), password.expose().to_string());
        }
        if config.tls.enabled {
            options = options.with_tls(tls_options(config)?);
        }
        // The client spreads requests over the endpoints, and the first
        // (its authentication, the probe) may go to a member that is down:
        // with several endpoints, a retryable failure is tried again (once
        // per endpoint at most), on whichever member the client picks
        // next. With one endpoint there is no other to try.
        retry_when(
            Backoff::new(Duration::from_millis(50), Duration::from_millis(500)),
            deadline,
            tries_left(config.endpoints.len()),
            || async {
                let connecting = Client::connect(config.endpoints.clone(), Some(options.clone()));
                match tokio::time::timeout_at(deadline, connecting).await {
                    Ok(Ok(client)) => {
                        let probes = config.endpoints.len();
                        Self::open(client, &config.options, shown.clone(), deadline, probes).await
                    }
                    Ok(Err(e)) => Err(classify(e, &shown)),
                    Err(_) => Err(no_answer(&shown, config.options.connect_timeout)),
                }
            },
        )
        .await
        .map_err(|err| misfit(err, config))
    }

    /// The one way a connection is made ready, from a URL or from the
    /// application's client: proves the cluster answers (and accepts the
    /// client's credentials) by `deadline`, in at most `tries` reads (one
    /// per endpoint: a member that is down refuses one, the next may go to
    /// another).
    pub(crate) async fn open(
        client: Client,
        options: &EtcdOptions,
        shown: String,
        deadline: tokio::time::Instant,
        tries: usize,
    ) -> Result<Self> {
        // The channel connects lazily: one cheap read of omnilock's own
        // range proves the cluster is there and that the client may read
        // it: an application's client that never authenticated is refused
        // here, not at its first lock. Serializable: any member answers,
        // without a quorum.
        let prefix = segment(&options.prefix);
        let probe = client.clone();
        let range = format!("{prefix}/");
        let read = GetOptions::new()
            .with_prefix()
            .with_count_only()
            .with_serializable();
        // A member that is down refuses a read; the next may go to another.
        retry_when(
            Backoff::new(Duration::from_millis(20), Duration::from_millis(200)),
            deadline,
            tries_left(tries),
            || {
                let (mut probe, range, read) = (probe.clone(), range.clone(), read.clone());
                let shown = &shown;
                async move {
                    match tokio::time::timeout_at(deadline, probe.get(range, Some(read))).await {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => Err(classify(e, shown)),
                        Err(_) => Err(no_answer(shown, options.connect_timeout)),
                    }
                }
            },
        )
        .await?;
        Ok(Etcd {
            client,
            prefix,
            request_timeout: options.request_timeout,
            shown,
        })
    }

    /// Runs one request under the request deadline, classifying its error.
    ///
    /// A member that is down refuses the connection: the request never
    /// reached etcd, so sending it again is safe whatever it does, and the
    /// client sends it to whichever member it picks next (a few times at
    /// most, within the deadline). Without that, one member of three down
    /// failed about half of the first requests after a connect.
    pub(crate) async fn call<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        retry_when(
            Backoff::new(Duration::from_millis(10), Duration::from_millis(100)),
            deadline,
            refused_again(REFUSALS),
            || async {
                match tokio::time::timeout_at(deadline, op(self.client.clone())).await {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(e)) => Err(classify(e, &self.shown)),
                    Err(_) => Err(Error::unavailable(format!(
                        "etcd {}: no answer within {:?}",
                        self.shown, self.request_timeout
                    ))),
                }
            },
        )
        .await
    }

    /// `<prefix>/<name>/`, each one encoded key segment: the range holding
    /// one lock's queue. Two segments exactly, so (prefix, name) pairs and
    /// ranges correspond one to one and no range holds another's keys.
    pub(crate) fn lock_prefix(&self, name: &str) -> String {
        format!("{}/{}/", self.prefix, segment(name))
    }

    /// `<prefix>/%<family>/<name>/`: the range of the semaphore (`sem`) or
    /// read-write lock (`rw`) `name`. A raw `%` never starts a name segment
    /// (names have theirs encoded), so no mutex range holds these keys, nor
    /// these ranges a mutex's.
    pub(crate) fn counted_prefix(&self, family: &str, name: &str) -> String {
        format!("{}/%{family}/{}/", self.prefix, segment(name))
    }

    /// `<prefix>/%rec/`: the range of the records
    /// ([`write_record`](omnilock_core::Backend::write_record)). Like the
    /// `%sem` and `%rw` ranges, no lock's range holds it: an encoded name
    /// segment has every `%` followed by two hexadecimal digits, and `r`
    /// is none.
    pub(crate) fn records_prefix(&self) -> String {
        format!("{}/%rec/", self.prefix)
    }

    /// `<prefix>/%rec/<name>`: the key of the record `name`.
    pub(crate) fn record_key(&self, name: &str) -> String {
        format!("{}{}", self.records_prefix(), segment(name))
    }

    /// The queue key of `owner` for the lock whose range is `lock_prefix`.
    /// The `o:` keeps it apart from the hexadecimal lease IDs that etcd's
    /// Lock RPC uses in the same range.
    pub(crate) fn owner_key(lock_prefix: &str, owner: &str) -> String {
        format!("{lock_prefix}o:{}", segment(owner))
    }
}

/// A connect whose last try the server hung up on, in the TLS handshake or
/// right after it, may have met a TLS setting that does not fit the server
/// (a plain-text endpoint, a server that wants a client certificate the URL
/// did not give, or TLS to a server that has none) or an outage (a member
/// restarting, a balancer with no member behind it). The hang-up reaches
/// the client as an early end of the handshake, a reset, a broken pipe or a
/// closed connection, varying from run to run, and cannot tell the two
/// apart: the error stays `Unavailable` (retryable), and its message says
/// which settings to check. A certificate the client rejects, or one the
/// server rejects with an alert, is already `Tls`.
fn misfit(err: Error, config: &EtcdConfig) -> Error {
    let text = err.message().to_ascii_lowercase();
    let hung_up = [
        "tls handshake eof",
        "connection reset",
        "broken pipe",
        "connection closed",
        "corrupt message",
    ]
    .iter()
    .any(|symptom| text.contains(symptom));
    if !hung_up || err.kind() != ErrorKind::Unavailable {
        return err;
    }
    let hint = match (config.tls.enabled, config.tls.identity.is_some()) {
        (false, _) => "if the endpoint serves TLS, the URL needs etcds://",
        (true, true) => {
            "if every member answers so: is the endpoint plain text (etcd://), or does it \
             refuse the client certificate?"
        }
        (true, false) => {
            "if every member answers so: is the endpoint plain text (etcd://), or does it \
             want a client certificate (tls_cert and tls_key)?"
        }
    };
    Error::unavailable(format!("{} ({hint})", err.message())).with_cause(err)
}

/// How many refused connections one request meets before it fails: one
/// more than the members a three-member cluster can lose.
const REFUSALS: usize = 3;

/// For [`retry_when`] in [`Etcd::call`]: a refused connection is tried
/// again until `tries` attempts in all have been refused.
fn refused_again(tries: usize) -> impl Fn(&Error) -> bool {
    let refused = tries_left(tries);
    move |err| err.kind() == ErrorKind::Unavailable && is_refusal(err) && refused(err)
}

/// Whether `err` is a refused connection: an I/O error of that kind among
/// its causes, or, where a layer in between (gRPC's status) kept only the
/// text, its words.
fn is_refusal(err: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    err.message()
        .to_ascii_lowercase()
        .contains("connection refused")
}

/// For [`retry_when`]: a retryable error is tried again until `tries`
/// attempts in all have failed.
fn tries_left(tries: usize) -> impl Fn(&Error) -> bool {
    let failed = std::sync::atomic::AtomicUsize::new(0);
    move |err| {
        let failed = failed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        failed < tries && err.is_retryable()
    }
}

fn no_answer(shown: &str, timeout: Duration) -> Error {
    Error::unavailable(format!(
        "etcd {shown}: no endpoint answered within {timeout:?}"
    ))
}

fn tls_options(config: &EtcdConfig) -> Result<TlsOptions> {
    // Read and checked before any I/O (core's `pem` feature).
    let pem = config.tls.read()?;
    let mut tls = TlsOptions::new();
    tls = match pem.ca {
        Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
        None => tls.with_enabled_roots(),
    };
    if let Some((cert, key)) = pem.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(tls)
}

/// `http://a:1`, `https://b:2` → `a:1,b:2`.
fn endpoint_list(endpoints: &[String]) -> String {
    endpoints
        .iter()
        .map(|e| e.split_once("://").map_or(e.as_str(), |(_, rest)| rest))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `err` says etcd no longer knows the lease a request used (a
/// put on a revoked or expired lease).
pub(crate) fn lease_gone(err: &Error) -> bool {
    err.to_string().contains("requested lease not found")
}

/// Maps an etcd client error to a portable one whose message is one short
/// line: which endpoints and what went wrong ("etcd 127.0.0.1:1 (backend
/// etcd): connection refused"). The client's own error, a multi-line-long
/// debug dump of the gRPC status, stays reachable as the cause's source.
/// Messages name the endpoints, never the password.
pub(crate) fn classify(e: etcd_client::Error, shown: &str) -> Error {
    use etcd_client::Error as E;
    use tonic::Code;
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let (kind, message) = match &e {
        _ if lower.contains("authentication failed")
            || lower.contains("invalid auth token")
            || lower.contains("user name is empty")
            || lower.contains("user name not found") =>
        {
            (
                ErrorKind::Auth,
                format!("etcd {shown} refused the credentials (user name or password)"),
            )
        }
        E::GRpcStatus(status) => match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Aborted
            | Code::ResourceExhausted => (ErrorKind::Unavailable, format!("etcd {shown}")),
            Code::Unknown if lower.contains("transport") || lower.contains("connect") => {
                (ErrorKind::Unavailable, format!("etcd {shown}"))
            }
            Code::PermissionDenied | Code::Unauthenticated => {
                (ErrorKind::Auth, format!("etcd {shown} denied the request"))
            }
            _ if lower.contains("leader changed") || lower.contains("no leader") => {
                (ErrorKind::Unavailable, format!("etcd {shown}"))
            }
            _ => (ErrorKind::Backend, format!("etcd {shown}")),
        },
        E::TransportError(_) | E::IoError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => {
            (ErrorKind::Unavailable, format!("etcd {shown}"))
        }
        E::InvalidUri(_) | E::InvalidArgs(_) | E::EndpointError(_) => {
            (ErrorKind::InvalidConfig, format!("etcd {shown}"))
        }
        _ => (ErrorKind::Backend, format!("etcd {shown}")),
    };
    let reason = reason(&e);
    // A certificate that does not verify stays so however often one
    // retries; it is wrapped in a transport error like a refused connection.
    let kind =
        if kind == ErrorKind::Unavailable && reason.to_ascii_lowercase().contains("certificate") {
            ErrorKind::Tls
        } else {
            kind
        };
    // The reason in the message; the client's own error (the whole gRPC
    // status) is the cause, for `{:#}` and `source()`.
    Error::new(kind, format!("{message}: {reason}")).with_cause(e)
}

/// The longest reason worth a line; the full error is one `source()` away.
const REASON_MAX: usize = 160;

/// Why an etcd request failed, in a few words: the innermost error under the
/// gRPC status (an I/O or TLS error says the most: "connection refused",
/// "invalid peer certificate: UnknownIssuer"), else etcd's own message
/// without its `etcdserver: ` tag, else the status code.
fn reason(e: &etcd_client::Error) -> String {
    use etcd_client::Error as E;
    let mut innermost: Option<&(dyn std::error::Error + 'static)> = match e {
        E::GRpcStatus(status) => std::error::Error::source(status),
        E::TransportError(err) => Some(err),
        E::IoError(err) => Some(err),
        _ => None,
    };
    let mut why = None;
    while let Some(err) = innermost {
        why = Some(match err.downcast_ref::<std::io::Error>() {
            Some(io) => io_reason(io),
            None => err.to_string(),
        });
        innermost = err.source();
    }
    let why = why.unwrap_or_else(|| match e {
        E::GRpcStatus(status) if !status.message().is_empty() => status
            .message()
            .trim_start_matches("etcdserver: ")
            .to_string(),
        E::GRpcStatus(status) => code_reason(status.code()),
        E::WatchError(m) | E::LeaseKeepAliveError(m) | E::InvalidArgs(m) => m.clone(),
        other => other.to_string(),
    });
    one_line(&why)
}

fn io_reason(io: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match io.kind() {
        K::ConnectionRefused => "connection refused".to_string(),
        K::ConnectionReset => "connection reset".to_string(),
        K::ConnectionAborted => "connection aborted".to_string(),
        K::TimedOut => "connection timed out".to_string(),
        K::AddrNotAvailable => "address not available".to_string(),
        _ => match io.get_ref() {
            // A TLS or framing error wrapped in an I/O error: its own words.
            Some(inner) => inner.to_string(),
            None => io.to_string(),
        },
    }
}

fn code_reason(code: tonic::Code) -> String {
    use tonic::Code;
    match code {
        Code::DeadlineExceeded => "deadline exceeded".to_string(),
        Code::Unavailable => "unavailable".to_string(),
        Code::Cancelled => "cancelled".to_string(),
        other => format!("gRPC status {other:?}"),
    }
}

/// `text` on one line and at most [`REASON_MAX`] characters.
fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(REASON_MAX) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_segment_is_a_family_range() {
        for name in ["%rec", "%sem", "%rw", "%", "%re"] {
            let encoded = segment(name);
            assert!(encoded.starts_with("%25"), "{encoded}");
        }
    }

    #[test]
    fn a_refusal_is_found_among_the_causes_or_in_the_words() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "os error 111");
        assert!(is_refusal(
            &Error::unavailable("acquire failed").with_cause(io)
        ));
        assert!(is_refusal(&Error::unavailable(
            "etcd a:1: transport error: Connection refused"
        )));
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!is_refusal(
            &Error::unavailable("acquire failed").with_cause(reset)
        ));
    }

    #[test]
    fn endpoints_are_host_port() {
        assert_eq!(
            endpoint_list(&["http://a:1".to_string(), "https://b:2".to_string()]),
            "a:1,b:2"
        );
    }

    #[test]
    fn reasons_are_short_and_keep_the_client_error() {
        let status = tonic::Status::invalid_argument(
            "etcdserver: authentication failed, invalid user ID or password",
        );
        let err = classify(etcd_client::Error::GRpcStatus(status), "h:1");
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert_eq!(
            err.to_string(),
            "access refused: etcd h:1 refused the credentials (user name or password): \
             authentication failed, invalid user ID or password"
        );
        let cause = std::error::Error::source(&err).expect("cause");
        assert!(
            cause.downcast_ref::<etcd_client::Error>().is_some(),
            "the client's error is kept"
        );

        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let status = tonic::Status::from_error(Box::new(refused));
        let err = classify(etcd_client::Error::GRpcStatus(status), "h:1,h:2");
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(
            err.to_string(),
            "store unavailable: etcd h:1,h:2: connection refused"
        );

        let err = classify(
            etcd_client::Error::GRpcStatus(tonic::Status::deadline_exceeded("")),
            "h:1",
        );
        assert_eq!(
            err.to_string(),
            "store unavailable: etcd h:1: deadline exceeded"
        );
        assert_eq!(one_line(&"x\n".repeat(200)).chars().count(), REASON_MAX + 1);
    }
}
