//! `[store] url`: a `postgres://` URL parsed into a connection config and a
//! TLS setup. `hushwatch check` and `serve` both call [`parse`], so check
//! rejects exactly what the backend would.
//!
//! The password lives only inside `tokio_postgres::Config` (whose `Debug`
//! redacts it) and is never part of an error: errors name the problem,
//! never the URL. `Settings::redacted` is the form that may be logged.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How long a new connection may take (TCP + TLS + authentication) before
/// the attempt fails, so a dead server answers 503 quickly.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// TLS policy, named as libpq names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it, certificate not verified.
    Prefer,
    /// TLS always, certificate not verified (encryption only).
    Require,
    /// TLS always; the chain must lead to a Mozilla root (webpki-roots) or
    /// to `sslrootcert`, and the certificate must name the host.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A parsed `[store] url`.
#[derive(Clone)]
pub struct Settings {
    pub config: tokio_postgres::Config,
    pub ssl_mode: SslMode,
    /// Built at parse time (a bad `sslrootcert` is a config error); `None`
    /// for `disable`.
    pub tls: Option<Arc<ClientConfig>>,
    /// The URL with the password replaced, for logs and status.
    pub redacted: String,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("url", &self.redacted)
            .field("ssl_mode", &self.ssl_mode)
            .finish_non_exhaustive()
    }
}

/// Parses a `postgres://` (or `postgresql://`) URL. `sslmode` (default
/// `prefer`, as libpq) and `sslrootcert` (a PEM file, relative to
/// `base_dir`) are read here; every other parameter is tokio-postgres's
/// own (`connect_timeout`, `application_name`, …). Errors never contain
/// the URL.
pub fn parse(text: &str, base_dir: &Path) -> Result<Settings, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return Err("must be a postgres:// URL".to_owned());
    }
    let mut ssl_mode = SslMode::Prefer;
    let mut root_cert = None;
    let mut rest = url.clone();
    let mut kept = Vec::new();
    for (key, value) in url.query_pairs() {
        match &*key {
            "sslmode" => {
                ssl_mode = match &*value {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-full" => SslMode::VerifyFull,
                    _ => {
                        return Err(
                            "sslmode must be disable, prefer, require or verify-full".to_owned()
                        )
                    }
                }
            }
            "sslrootcert" => root_cert = Some(base_dir.join(&*value)),
            _ => kept.push((key.into_owned(), value.into_owned())),
        }
    }
    rest.set_query(None);
    if !kept.is_empty() {
        rest.query_pairs_mut().extend_pairs(kept);
    }
    let mut config = tokio_postgres::Config::from_str(rest.as_str())
        .map_err(|e| format!("not a valid PostgreSQL URL ({e})"))?;
    if config.get_hosts().is_empty() {
        return Err("names no host".to_owned());
    }
    if config.get_user().is_none() {
        return Err("names no user".to_owned());
    }
    if config.get_dbname().is_none() {
        return Err("names no database".to_owned());
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.ssl_mode(match ssl_mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
    });
    if config.get_application_name().is_none() {
        config.application_name("hushwatch");
    }
    if root_cert.is_some() && ssl_mode != SslMode::VerifyFull {
        return Err("sslrootcert needs sslmode=verify-full".to_owned());
    }
    let tls = match ssl_mode {
        SslMode::Disable => None,
        SslMode::Prefer | SslMode::Require => Some(Arc::new(unverified_tls()?)),
        SslMode::VerifyFull => Some(Arc::new(verified_tls(root_cert.as_deref())?)),
    };
    let mut redacted = url;
    if redacted.password().is_some() {
        // Only fails for URLs that cannot have a password, which this has.
        let _ = redacted.set_password(Some("***"));
    }
    // libpq's URL form also takes the password as a `password=` query
    // parameter, which tokio-postgres accepts: mask it there too, since
    // the redacted URL is what logs name.
    if redacted.query_pairs().any(|(k, _)| k == "password") {
        let pairs: Vec<(String, String)> = redacted
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "password" { "***".into() } else { v };
                (k.into_owned(), v.into_owned())
            })
            .collect();
        redacted.set_query(None);
        redacted.query_pairs_mut().extend_pairs(pairs);
    }
    Ok(Settings {
        config,
        ssl_mode,
        tls,
        redacted: redacted.to_string(),
    })
}

/// The crypto provider the rest of hushwatch uses (lettre, hyper-rustls).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, String> {
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed ({e})"))
}

fn verified_tls(root_cert: Option<&Path>) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = root_cert {
        let pem = std::fs::read(path)
            .map_err(|e| format!("sslrootcert {} cannot be read ({e})", path.display()))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| {
                format!(
                    "sslrootcert {} is not PEM certificates ({e})",
                    path.display()
                )
            })?;
            roots
                .add(cert)
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!(
                "sslrootcert {} holds no certificate",
                path.display()
            ));
        }
    }
    Ok(builder()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// `prefer`/`require`: encrypted, but any certificate is accepted, as with
/// libpq. The handshake signature is still checked, so the session is bound
/// to the key in the (unverified) certificate.
fn unverified_tls() -> Result<ClientConfig, String> {
    Ok(builder()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth())
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t-Pa55";

    fn parse_ok(url: &str) -> Settings {
        parse(url, Path::new(".")).expect("valid URL")
    }

    #[test]
    fn sslmodes_parse_and_default_to_prefer() {
        let base = "postgres://hw:pw@db.example:5432/hw";
        assert_eq!(parse_ok(base).ssl_mode, SslMode::Prefer);
        for mode in ["disable", "prefer", "require", "verify-full"] {
            let s = parse_ok(&format!("{base}?sslmode={mode}"));
            assert_eq!(s.ssl_mode.as_str(), mode);
            assert_eq!(s.tls.is_none(), mode == "disable");
        }
        let s = parse_ok(&format!("{base}?sslmode=require&application_name=x"));
        assert_eq!(s.config.get_application_name(), Some("x"));
        assert_eq!(s.config.get_dbname(), Some("hw"));
        assert_eq!(s.config.get_ports(), [5432]);
    }

    #[test]
    fn the_password_never_appears_in_debug_redacted_form_or_errors() {
        let url = format!("postgres://hw:{SECRET}@db.example:5432/hw?sslmode=require");
        let s = parse_ok(&url);
        assert_eq!(s.config.get_password(), Some(SECRET.as_bytes()));
        assert!(!format!("{s:?}").contains(SECRET));
        assert!(!s.redacted.contains(SECRET));
        assert!(s.redacted.contains("hw:***@db.example"), "{}", s.redacted);
        // libpq's other spelling: the password as a query parameter.
        let url = format!("postgres://hw@db.example:5432/hw?password={SECRET}&sslmode=disable");
        let s = parse_ok(&url);
        assert_eq!(s.config.get_password(), Some(SECRET.as_bytes()));
        assert!(!format!("{s:?}").contains(SECRET));
        assert!(!s.redacted.contains(SECRET), "{}", s.redacted);
        assert!(s.redacted.contains("password=***"), "{}", s.redacted);
        for bad in [
            format!("postgres://hw:{SECRET}@db.example:99999/hw"),
            format!("postgres://hw:{SECRET}@db.example/hw?sslmode=verify-ca"),
            format!("postgres://hw:{SECRET}@db.example/hw?nonsense=1"),
            format!("postgres://hw:{SECRET}@db.example:5432"),
            format!("mysql://hw:{SECRET}@db.example/hw"),
            format!(
                "postgres://hw:{SECRET}@db.example/hw?sslmode=verify-full&sslrootcert=missing.pem"
            ),
            format!("postgres://hw:{SECRET}@db.example/hw?sslrootcert=x.pem"),
            format!("hw:{SECRET}@db.example/hw"),
        ] {
            let err = parse(&bad, Path::new(".")).expect_err(&bad);
            assert!(!err.contains(SECRET), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let err = |u: &str| parse(u, Path::new(".")).unwrap_err();
        assert!(err("postgres://h/db?sslmode=verify-ca").contains("sslmode must be"));
        assert!(err("mysql://u@h/db").contains("postgres://"));
        assert!(err("postgres://u@h").contains("no database"));
        assert!(
            err("postgres://u@h/db?sslmode=verify-full&sslrootcert=nope.pem")
                .contains("cannot be read")
        );
    }

    #[test]
    fn sslrootcert_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty.pem"), "not a cert\n").unwrap();
        let e = parse(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=empty.pem",
            dir.path(),
        )
        .unwrap_err();
        assert!(e.contains("no certificate"), "{e}");
    }
}
