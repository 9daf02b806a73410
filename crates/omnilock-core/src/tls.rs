//! The TLS options of the stores whose clients take PEM files (etcd): the
//! URL's `tls`, `tls_ca`, `tls_cert` and `tls_key`, read and checked once. With the `pem` feature, [`TlsFiles::read`] also checks
//! the files themselves before any I/O, so that a certificate and key that
//! do not belong together are a configuration error, not a handshake that
//! fails like a store that is down.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::url::StoreUrl;

/// Where a store's TLS material is: off, or on with an optional CA file
/// (else the system's roots) and an optional client certificate and key
/// (mutual TLS). Paths are absolute.
///
/// ```
/// use omnilock_core::{StoreUrl, TlsFiles};
/// let mut url = StoreUrl::parse("etcds://h?tls_ca=/etc/etcd/ca.pem").unwrap();
/// let tls = TlsFiles::take(&mut url, "etcds").unwrap();
/// assert!(tls.enabled);
/// assert_eq!(tls.ca.as_deref(), Some(std::path::Path::new("/etc/etcd/ca.pem")));
/// assert!(tls.identity.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsFiles {
    /// TLS to every endpoint (the secure scheme, or `?tls=true`).
    pub enabled: bool,
    /// `?tls_ca=`: a PEM file of CA certificates to trust instead of the
    /// system's.
    pub ca: Option<PathBuf>,
    /// `?tls_cert=` and `?tls_key=`: the client certificate and its key
    /// (PEM), for servers that want one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The PEM files of [`TlsFiles`], read.
#[derive(Clone)]
pub struct TlsPem {
    /// The CA certificates, if a CA file was given.
    pub ca: Option<Vec<u8>>,
    /// The client certificate and key, if given.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsPem {
    // The key is a secret: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPem")
            .field("ca", &self.ca.as_ref().map(Vec::len))
            .field("identity", &self.identity.as_ref().map(|_| "(not shown)"))
            .finish()
    }
}

impl TlsFiles {
    /// Reads `tls`, `tls_ca`, `tls_cert` and `tls_key` from `url`, whose
    /// scheme `secure_scheme` (`etcds`) means TLS without `tls=true`.
    /// A file option without TLS, a relative path, or a certificate
    /// without its key are `InvalidConfig`.
    pub fn take(url: &mut StoreUrl, secure_scheme: &str) -> Result<TlsFiles> {
        let enabled = url.scheme() == secure_scheme || url.take_bool("tls")?.unwrap_or(false);
        let mut path = |key: &str| -> Result<Option<PathBuf>> {
            match url.take(key).map(PathBuf::from) {
                Some(_) if !enabled => Err(Error::config(format!(
                    "option \"{key}\" needs {secure_scheme}:// or tls=true"
                ))),
                Some(p) if !p.is_absolute() => Err(Error::config(format!(
                    "option \"{key}\" must be an absolute path"
                ))),
                other => Ok(other),
            }
        };
        let ca = path("tls_ca")?;
        let identity = match (path("tls_cert")?, path("tls_key")?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(Error::config(
                    "options \"tls_cert\" and \"tls_key\" go together",
                ));
            }
        };
        Ok(TlsFiles {
            enabled,
            ca,
            identity,
        })
    }

    /// Reads the files. A file that cannot be read is `InvalidConfig`
    /// naming it. With the `pem` feature, also: a CA file without a
    /// certificate, a key file without a key, and a certificate and key
    /// that do not belong together (messages name the files, never their
    /// contents).
    pub fn read(&self) -> Result<TlsPem> {
        let ca = self.ca.as_deref().map(read).transpose()?;
        #[cfg(feature = "pem")]
        if let (Some(pem), Some(path)) = (&ca, &self.ca) {
            pem_check::certificates(pem, path)?;
        }
        let identity = match &self.identity {
            None => None,
            Some((cert, key)) => {
                let (cert_pem, key_pem) = (read(cert)?, read(key)?);
                #[cfg(feature = "pem")]
                pem_check::identity(&cert_pem, cert, &key_pem, key)?;
                Some((cert_pem, key_pem))
            }
        };
        Ok(TlsPem { ca, identity })
    }
}

/// Installs ring's rustls crypto provider as the process default, unless
/// one is installed already (an application's own choice stays).
///
/// rustls picks a provider by itself only when exactly one is built in. A
/// program that has two (zookeeper-client's TLS brings aws-lc beside ring)
/// panics at the first TLS connection of a library that builds its
/// configuration from the process default (sqlx, redis-rs,
/// zookeeper-client) unless a default is installed. The stores call this
/// before they connect.
///
/// ```
/// omnilock_core::ensure_crypto_provider();
/// assert!(rustls::crypto::CryptoProvider::get_default().is_some());
/// ```
#[cfg(feature = "pem")]
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: any provider will do.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::config(format!("cannot read {}: {e}", path.display())).with_cause(e))
}

#[cfg(feature = "pem")]
mod pem_check {
    use std::path::Path;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::error::{Error, Result};

    /// The certificates of the PEM file `path`; a configuration error if it
    /// holds none (a key, or not PEM at all).
    pub(super) fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::config(format!("{}: not a PEM certificate: {e}", path.display()))
            })?;
        if certs.is_empty() {
            return Err(Error::config(format!(
                "{}: no PEM certificate in it",
                path.display()
            )));
        }
        Ok(certs)
    }

    /// Checks that the client certificate and key read and belong
    /// together.
    pub(super) fn identity(cert_pem: &[u8], cert: &Path, key_pem: &[u8], key: &Path) -> Result<()> {
        let chain = certificates(cert_pem, cert)?;
        let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
            Error::config(format!(
                "{}: no PEM private key in it (tls_key)",
                key.display()
            ))
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(private)
            .map_err(|e| {
                Error::config(format!("{}: not a usable private key: {e}", key.display()))
            })?;
        match rustls::sign::CertifiedKey::new(chain, signing).keys_match() {
            // A key type whose public half rustls cannot derive: the
            // handshake will tell.
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
                Ok(())
            }
            Err(_) => Err(Error::config(format!(
                "the client certificate {} and key {} do not belong together (tls_cert, tls_key)",
                cert.display(),
                key.display()
            ))),
        }
    }
}
