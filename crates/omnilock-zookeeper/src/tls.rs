//! TLS to ZooKeeper (`zks://`): the client's TLS options from the URL's
//! files, and a diagnosis of a handshake that fails.
//!
//! zookeeper-client tries the servers again and again when a TLS handshake
//! fails, and reports only that no server answered in time. A wrong CA or a
//! refused client certificate would then look like an outage, retried for
//! ever. So while the client connects, [`diagnose`] makes one handshake of
//! its own to each server, with the same files: a certificate one side
//! refuses is a `Tls` error at once, and a server that does not speak TLS
//! adds a hint to the timeout's message.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use omnilock_core::{Error, ErrorKind, Result, TlsFiles, TlsPem};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The TLS settings of a URL, read and checked.
pub(crate) struct Setup {
    /// For zookeeper-client.
    pub(crate) options: zookeeper_client::TlsOptions,
    /// The CA certificates trusted, as PEM text.
    pub(crate) ca: String,
    /// The files' contents.
    pub(crate) pem: TlsPem,
}

impl Setup {
    /// Reads the files (`None` without TLS). Errors are `InvalidConfig`
    /// naming the file: unreadable, no certificate, no key, or a
    /// certificate and key that do not belong together.
    pub(crate) fn read(files: &TlsFiles) -> Result<Option<Setup>> {
        if !files.enabled {
            return Ok(None);
        }
        crate::ensure_crypto_provider();
        let pem = files.read()?;
        let ca = ca_pem(&pem)?;
        let refused = |what: &'static str| {
            move |e: zookeeper_client::Error| Error::config(format!("the {what}: {e}"))
        };
        let mut options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&ca)
            .map_err(refused("CA certificates (tls_ca)"))?;
        if let Some((cert, key)) = &pem.identity {
            let text = |bytes: &[u8], option: &str| {
                String::from_utf8(bytes.to_vec())
                    .map_err(|_| Error::config(format!("the {option} file is not PEM text")))
            };
            options = options
                .with_pem_identity(&text(cert, "tls_cert")?, &text(key, "tls_key")?)
                .map_err(refused("client certificate and key (tls_cert, tls_key)"))?;
        }
        Ok(Some(Setup { options, ca, pem }))
    }
}

/// The CA certificates to trust as PEM text: the URL's `tls_ca`, else the
/// system's (zookeeper-client has no roots of its own).
fn ca_pem(pem: &TlsPem) -> Result<String> {
    if let Some(ca) = &pem.ca {
        return String::from_utf8(ca.clone())
            .map_err(|_| Error::config("the tls_ca file is not PEM text"));
    }
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        return Err(Error::config(
            "no system CA certificates found for TLS to ZooKeeper; name the CA with tls_ca=",
        ));
    }
    let mut text = String::new();
    for cert in found.certs {
        let encoded = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        text.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            text.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            text.push('\n');
        }
        text.push_str("-----END CERTIFICATE-----\n");
    }
    Ok(text)
}

/// What one handshake of our own tells about a connect that is slow.
pub(crate) enum Diagnosis {
    /// A certificate was refused, by us or by the server: waiting longer
    /// cannot help.
    Refused(Error),
    /// No server finished a handshake, and this says why, for the timeout's
    /// message.
    Hint(String),
    /// A handshake went through: the trouble is elsewhere.
    Fine,
}

/// One TLS handshake to each of `hosts` (`h1:p1,h2:p2`) at once, each
/// bounded by `budget`: `Fine` if any went through, `Refused` if none did
/// and a server refused a certificate (or had one refused).
pub(crate) async fn diagnose(hosts: &str, ca: &str, pem: &TlsPem, budget: Duration) -> Diagnosis {
    let config = match client_config(ca, pem) {
        Ok(config) => config,
        Err(e) => return Diagnosis::Refused(e),
    };
    // Every server at once, each within the budget: the client connects
    // if any one lets it, so one refusal means nothing while another
    // server takes the handshake.
    let tries = hosts.split(',').map(|host| {
        let config = config.clone();
        async move {
            let outcome = tokio::time::timeout(budget, handshake(host, config)).await;
            (host, outcome.unwrap_or(Err(Failure::Io)))
        }
    });
    let outcomes = futures_util::future::join_all(tries).await;
    if outcomes.iter().any(|(_, outcome)| outcome.is_ok()) {
        return Diagnosis::Fine;
    }
    for (host, outcome) in &outcomes {
        if let Err(Failure::Certificate(why)) = outcome {
            return Diagnosis::Refused(Error::new(
                ErrorKind::Tls,
                format!(
                    "TLS to ZooKeeper at {host}: {why}; check tls_ca, and tls_cert and \
                     tls_key if the server asks for a client certificate"
                ),
            ));
        }
    }
    let not_tls = outcomes
        .iter()
        .find(|(_, outcome)| matches!(outcome, Err(Failure::NotTls)));
    match not_tls {
        Some((host, _)) => Diagnosis::Hint(format!(
            "{host} does not speak TLS: is it a plain-text port (zk://), not the server's \
             secureClientPort?"
        )),
        None => Diagnosis::Fine,
    }
}

enum Failure {
    Certificate(String),
    NotTls,
    Io,
}

async fn handshake(host: &str, config: Arc<ClientConfig>) -> std::result::Result<(), Failure> {
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let server = ServerName::try_from(name.to_string()).map_err(|_| Failure::Io)?;
    let tcp = TcpStream::connect(host).await.map_err(|_| Failure::Io)?;
    let mut tls = TlsConnector::from(config)
        .connect(server, tcp)
        .await
        .map_err(|e| failure(&e))?;
    // Under TLS 1.3 the server checks the client certificate after the
    // client's side of the handshake is done: its refusal comes as the
    // first thing read. A server that accepts waits for ZooKeeper's own
    // request, so a short read that times out means accepted.
    let mut byte = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(200), tls.read(&mut byte)).await {
        Ok(Err(e)) => match failure(&e) {
            Failure::Certificate(why) => Err(Failure::Certificate(why)),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Sorts a handshake error: a certificate refused (ours by the server, or
/// the server's by us), a peer that is not TLS, or plain I/O trouble.
fn failure(e: &std::io::Error) -> Failure {
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                Failure::NotTls
            }
            _ => Failure::Io,
        };
    };
    match tls {
        rustls::Error::InvalidCertificate(why) => {
            Failure::Certificate(format!("the server's certificate was refused: {why:?}"))
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied
            | AlertDescription::HandshakeFailure),
        ) => Failure::Certificate(format!("the server refused the handshake ({alert:?})")),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            Failure::NotTls
        }
        _ => Failure::Io,
    }
}

/// A rustls configuration with the same trust and identity as the
/// client's.
fn client_config(ca: &str, pem: &TlsPem) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()).flatten() {
        // A certificate rustls cannot use is left out, as the client does.
        let _ = roots.add(cert);
    }
    // The provider the client uses: the process's (omnilock installs
    // ring's when the application installed none).
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(format!("TLS to ZooKeeper: {e}")))?
        .with_root_certificates(roots);
    let config = match &pem.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::config(format!("the tls_cert file: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| Error::config(format!("the tls_key file: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::config(format!("the client certificate and key: {e}")))?
        }
    };
    Ok(Arc::new(config))
}
