//! TLS to PostgreSQL and MySQL/MariaDB: the URL options libpq and the MySQL
//! clients use, checked once, applied to sqlx's connect options. sqlx speaks
//! TLS with rustls (and webpki's public roots unless `sslrootcert` names a
//! CA), so no OpenSSL is built or loaded.
//!
//! | option | values | MySQL also reads |
//! |---|---|---|
//! | `sslmode` | `disable`, `prefer`, `require`, `verify-ca`, `verify-full` | `ssl-mode` (`DISABLED`, `PREFERRED`, `REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY`) |
//! | `sslrootcert` | PEM file of the CA(s) to trust | `ssl-ca` |
//! | `sslcert` | PEM client certificate | `ssl-cert` |
//! | `sslkey` | PEM key of the client certificate | `ssl-key` |
//!
//! Without `sslmode`, the driver's default applies: `prefer` (TLS if the
//! server offers it, unverified), and on PostgreSQL the `PGSSLMODE`
//! environment variable first. As in libpq, `require` with `sslrootcert`
//! verifies the chain (it becomes `verify-ca`).

use std::path::{Path, PathBuf};

use omnilock_core::{Error, Result, StoreUrl};

use crate::config::Dialect;

/// How a client uses TLS, in libpq's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server offers it, without verifying its certificate.
    Prefer,
    /// TLS or no connection; the certificate is not verified.
    Require,
    /// TLS, with a certificate signed by a trusted CA.
    VerifyCa,
    /// TLS, with a trusted certificate issued for the host in the URL
    /// (MySQL's `VERIFY_IDENTITY`).
    VerifyFull,
}

impl SslMode {
    const LIBPQ: [(&'static str, SslMode); 5] = [
        ("disable", SslMode::Disable),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ];
    const MYSQL: [(&'static str, SslMode); 5] = [
        ("DISABLED", SslMode::Disable),
        ("PREFERRED", SslMode::Prefer),
        ("REQUIRED", SslMode::Require),
        ("VERIFY_CA", SslMode::VerifyCa),
        ("VERIFY_IDENTITY", SslMode::VerifyFull),
    ];

    /// Whether the server's certificate is checked against a CA.
    pub fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// The TLS settings of one SQL store (all unset: the driver's defaults).
///
/// Read from the store URL, or `Default` with fields set one by one; never a
/// struct literal (`#[non_exhaustive]`), so adding a setting breaks no caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsOptions {
    /// `sslmode` / `ssl-mode`.
    pub mode: Option<SslMode>,
    /// `sslrootcert` / `ssl-ca`: CA certificates to trust (PEM).
    pub root_cert: Option<PathBuf>,
    /// `sslcert` / `ssl-cert`: the client certificate (PEM).
    pub cert: Option<PathBuf>,
    /// `sslkey` / `ssl-key`: the client certificate's key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsOptions {
    /// Takes the TLS options out of `url` (a server dialect's).
    pub(crate) fn take(url: &mut StoreUrl, dialect: Dialect) -> Result<Self> {
        let mysql = dialect == Dialect::MySql;
        let mut mode = match url.take("sslmode") {
            Some(value) => Some(parse_mode(&value, "sslmode", &SslMode::LIBPQ)?),
            None => None,
        };
        if mysql && let Some(value) = url.take("ssl-mode") {
            if mode.is_some() {
                return Err(Error::config(
                    "give one of the options \"sslmode\" and \"ssl-mode\", not both",
                ));
            }
            mode = Some(parse_mode(&value, "ssl-mode", &SslMode::MYSQL)?);
        }
        let mut path = |libpq: &str, mysql_name: &str| -> Result<Option<PathBuf>> {
            let given = url.take(libpq);
            let alias = if mysql { url.take(mysql_name) } else { None };
            match (given, alias) {
                (Some(_), Some(_)) => Err(Error::config(format!(
                    "give one of the options {libpq:?} and {mysql_name:?}, not both"
                ))),
                (Some(p), None) | (None, Some(p)) if p.is_empty() => {
                    Err(Error::config(format!("option {libpq:?} needs a file path")))
                }
                (Some(p), None) | (None, Some(p)) => Ok(Some(PathBuf::from(p))),
                (None, None) => Ok(None),
            }
        };
        let root_cert = path("sslrootcert", "ssl-ca")?;
        let cert = path("sslcert", "ssl-cert")?;
        let key = path("sslkey", "ssl-key")?;
        if cert.is_some() != key.is_some() {
            return Err(Error::config(
                "options \"sslcert\" and \"sslkey\" go together: a client certificate needs its key",
            ));
        }
        let uses_tls = mode != Some(SslMode::Disable);
        if !uses_tls && (root_cert.is_some() || cert.is_some()) {
            return Err(Error::config(
                "sslmode=disable turns TLS off; the certificate options would be ignored",
            ));
        }
        // libpq: with a root certificate, `require` verifies the chain.
        if mode == Some(SslMode::Require) && root_cert.is_some() {
            mode = Some(SslMode::VerifyCa);
        }
        Ok(TlsOptions {
            mode,
            root_cert,
            cert,
            key,
        })
    }

    /// Checks that every file named can be read, so that a wrong path is
    /// reported by option name now, not as a failed TLS handshake.
    pub(crate) fn check_files(&self) -> Result<()> {
        let files = [
            ("sslrootcert", &self.root_cert),
            ("sslcert", &self.cert),
            ("sslkey", &self.key),
        ];
        for (option, path) in files {
            if let Some(path) = path {
                readable(option, path)?;
            }
        }
        Ok(())
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn apply_postgres(
        &self,
        mut options: sqlx::postgres::PgConnectOptions,
    ) -> sqlx::postgres::PgConnectOptions {
        use sqlx::postgres::PgSslMode;
        if let Some(mode) = self.mode {
            options = options.ssl_mode(match mode {
                SslMode::Disable => PgSslMode::Disable,
                SslMode::Prefer => PgSslMode::Prefer,
                SslMode::Require => PgSslMode::Require,
                SslMode::VerifyCa => PgSslMode::VerifyCa,
                SslMode::VerifyFull => PgSslMode::VerifyFull,
            });
        }
        if let Some(path) = &self.root_cert {
            options = options.ssl_root_cert(path);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            options = options.ssl_client_cert(cert).ssl_client_key(key);
        }
        options
    }

    #[cfg(feature = "mysql")]
    pub(crate) fn apply_mysql(
        &self,
        mut options: sqlx::mysql::MySqlConnectOptions,
    ) -> sqlx::mysql::MySqlConnectOptions {
        use sqlx::mysql::MySqlSslMode;
        if let Some(mode) = self.mode {
            options = options.ssl_mode(match mode {
                SslMode::Disable => MySqlSslMode::Disabled,
                SslMode::Prefer => MySqlSslMode::Preferred,
                SslMode::Require => MySqlSslMode::Required,
                SslMode::VerifyCa => MySqlSslMode::VerifyCa,
                SslMode::VerifyFull => MySqlSslMode::VerifyIdentity,
            });
        }
        if let Some(path) = &self.root_cert {
            options = options.ssl_ca(path);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            options = options.ssl_client_cert(cert).ssl_client_key(key);
        }
        options
    }
}

fn parse_mode(value: &str, option: &str, names: &[(&str, SslMode)]) -> Result<SslMode> {
    names
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(value))
        .map(|(_, mode)| *mode)
        .ok_or_else(|| {
            let known: Vec<&str> = names.iter().map(|(name, _)| *name).collect();
            Error::config(format!(
                "option {option:?}: {:?} is not one of {}",
                value.chars().take(40).collect::<String>(),
                known.join(", ")
            ))
        })
}

fn readable(option: &str, path: &Path) -> Result<()> {
    match std::fs::File::open(path) {
        Ok(_) if path.is_dir() => Err(Error::config(format!(
            "option {option:?}: {} is a directory, not a PEM file",
            path.display()
        ))),
        Ok(_) => Ok(()),
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_string(),
                std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                _ => e.to_string(),
            };
            Err(Error::config(format!(
                "option {option:?}: cannot read {}: {why}",
                path.display()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnilock_core::ErrorKind;

    fn take(url: &str) -> Result<TlsOptions> {
        let mut url = StoreUrl::parse(url)?;
        let dialect = if url.scheme() == "mysql" {
            Dialect::MySql
        } else {
            Dialect::Postgres
        };
        let tls = TlsOptions::take(&mut url, dialect)?;
        url.finish()?;
        Ok(tls)
    }

    #[test]
    fn libpq_and_mysql_names() {
        let tls = take("postgres://h/db?sslmode=verify-full&sslrootcert=/ca.pem").unwrap();
        assert_eq!(tls.mode, Some(SslMode::VerifyFull));
        assert_eq!(tls.root_cert, Some(PathBuf::from("/ca.pem")));
        let tls = take("mysql://h/db?ssl-mode=verify_identity&ssl-ca=/ca.pem").unwrap();
        assert_eq!(tls.mode, Some(SslMode::VerifyFull));
        assert_eq!(tls.root_cert, Some(PathBuf::from("/ca.pem")));
        let tls = take("mysql://h/db?sslmode=require&sslcert=/c&sslkey=/k").unwrap();
        assert_eq!(tls.mode, Some(SslMode::Require));
        assert_eq!(tls.cert, Some(PathBuf::from("/c")));
        assert_eq!(take("postgres://h/db").unwrap(), TlsOptions::default());
        // libpq: require with a CA verifies the chain.
        let tls = take("postgres://h/db?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert_eq!(tls.mode, Some(SslMode::VerifyCa));
    }

    #[test]
    fn bad_tls_options_are_config_errors() {
        for bad in [
            "postgres://h/db?sslmode=on",
            "postgres://h/db?sslmode=",
            "postgres://h/db?ssl-mode=REQUIRED",
            "postgres://h/db?ssl-ca=/ca.pem",
            "mysql://h/db?sslmode=require&ssl-mode=REQUIRED",
            "mysql://h/db?sslrootcert=/a&ssl-ca=/b",
            "mysql://h/db?sslcert=/c",
            "postgres://h/db?sslkey=/k",
            "postgres://h/db?sslrootcert=",
            "postgres://h/db?sslmode=disable&sslrootcert=/ca.pem",
        ] {
            let err = take(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}: {err}");
        }
        let err = take("postgres://h/db?sslmode=verify_full").unwrap_err();
        assert!(err.to_string().contains("verify-full"), "{err}");
    }

    #[test]
    fn missing_files_are_named() {
        let tls = take("postgres://h/db?sslmode=verify-ca&sslrootcert=/no/such/ca.pem").unwrap();
        let err = tls.check_files().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("sslrootcert"), "{err}");
        assert!(err.to_string().contains("/no/such/ca.pem"), "{err}");
        let tls = take("postgres://h/db?sslmode=verify-ca&sslrootcert=/tmp").unwrap();
        assert!(
            tls.check_files()
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
    }
}
