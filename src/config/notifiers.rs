//! Parsers for notifier settings, shared by config loading (`check`,
//! `serve`, SIGHUP) and by sending: whatever would make every page fail
//! permanently for a reason visible in the config is rejected at load by
//! the very code that later sends.
//!
//! Errors never echo a URL: it may carry a password or a token.

use super::EmailConfig;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, Tokio1Executor};
use url::Url;

/// An HTTP notifier URL split for the client: the URL without userinfo,
/// and the userinfo as a Basic `Authorization` value (e.g. an
/// Alertmanager behind a proxy with basic auth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub url: String,
    pub basic_auth: Option<String>,
}

/// Parses an http(s) URL with the `url` crate (WHATWG URL rules). The
/// userinfo is percent-decoded before it becomes Basic credentials
/// (RFC 7617: `user-id ":" password`), so `p%40ss` authenticates as
/// `p@ss`.
pub fn http_target(text: &str) -> Result<HttpTarget, String> {
    let mut url = Url::parse(text).map_err(|e| format!("is not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must start with http:// or https://".to_string());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host".to_string());
    }
    let basic_auth = if url.username().is_empty() && url.password().is_none() {
        None
    } else {
        let user = decode(url.username(), "the user name")?;
        let password = decode(url.password().unwrap_or(""), "the password")?;
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        // Cannot fail on a URL that has a host (checked above).
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Some(format!("Basic {token}"))
    };
    // The client sends through hyper: its URI parser must accept it too.
    if url.as_str().parse::<hyper::Uri>().is_err() {
        return Err("is not a URL the HTTP client can send to".to_string());
    }
    Ok(HttpTarget {
        url: url.into(),
        basic_auth,
    })
}

/// `url` leaves userinfo percent-encoded; decode it as lettre does for
/// `smtp_url`.
fn decode(part: &str, what: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| format!("{what} in the URL is not UTF-8 once percent-decoded"))
}

/// What the SMTP transport is built from.
pub struct SmtpSettings<'a> {
    pub smtp_url: &'a str,
    /// `username`/`password` (they go together); else any in the URL.
    pub credentials: Option<(&'a str, &'a str)>,
    pub ca_pem: Option<&'a [u8]>,
}

impl EmailConfig {
    pub fn smtp_settings(&self) -> SmtpSettings<'_> {
        SmtpSettings {
            smtp_url: self.smtp_url.expose(),
            credentials: self
                .username
                .as_deref()
                .zip(self.password.as_ref().map(|p| p.expose())),
            ca_pem: self.ca_pem.as_deref(),
        }
    }
}

/// The SMTP transport for an email notifier, as used for every send:
/// lettre's own `smtp_url` handling (`AsyncSmtpTransport::from_url`), then
/// `username`/`password` and the private CA from `ca_file`.
pub fn smtp_transport(
    config: &SmtpSettings<'_>,
    timeout: std::time::Duration,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let raw = config.smtp_url;
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(raw).map_err(|_| {
        "is not an SMTP URL lettre accepts: smtp://host[:port] (optionally \
         ?tls=required or ?tls=opportunistic for STARTTLS) or smtps://host[:port]"
            .to_string()
    })?;
    builder = builder.timeout(Some(timeout));
    if let Some(pem) = config.ca_pem {
        // from_url already chose the TLS mode; only the trusted roots
        // change, so rebuild the same mode with the extra root.
        let url = Url::parse(raw).map_err(|_| "is not a valid URL".to_string())?;
        let host = url.host_str().unwrap_or_default().to_string();
        let cert = Certificate::from_pem(pem).map_err(|_| "ca_file is not PEM".to_string())?;
        let params = TlsParameters::builder(host)
            .add_root_certificate(cert)
            .build()
            .map_err(|_| "ca_file holds no certificate rustls accepts".to_string())?;
        let tls_query = url
            .query_pairs()
            .find(|(k, _)| k == "tls")
            .map(|(_, v)| v.into_owned());
        builder = builder.tls(match (url.scheme(), tls_query.as_deref()) {
            ("smtps", _) => Tls::Wrapper(params),
            (_, Some("required")) => Tls::Required(params),
            (_, Some("opportunistic")) => Tls::Opportunistic(params),
            // Plain SMTP: a CA has nothing to verify.
            _ => Tls::None,
        });
    }
    if let Some((user, password)) = config.credentials {
        builder = builder.credentials(Credentials::new(user.to_string(), password.to_string()));
    }
    Ok(builder.build())
}

/// Reads a PEM file of trusted roots, rejecting one without any
/// certificate (rustls would silently add nothing).
pub fn read_ca_pem(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&pem);
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    let cert =
        Certificate::from_pem(&pem).map_err(|_| format!("{} is not valid PEM", path.display()))?;
    TlsParameters::builder("localhost".to_string())
        .add_root_certificate(cert)
        .build()
        .map_err(|_| {
            format!(
                "{} holds a certificate that cannot be used as a trusted root",
                path.display()
            )
        })?;
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_becomes_percent_decoded_basic_auth() {
        let t = http_target("http://am:s3cret@am-0:9093/x?y").unwrap();
        assert_eq!(t.url, "http://am-0:9093/x?y");
        assert_eq!(t.basic_auth.as_deref(), Some("Basic YW06czNjcmV0"));
        // "p%40ss" is the password "p@ss": base64("am:p@ss").
        let t = http_target("http://am:p%40ss@am-0:9093/").unwrap();
        assert_eq!(t.basic_auth.as_deref(), Some("Basic YW06cEBzcw=="));
        assert_eq!(t.url, "http://am-0:9093/");
        let t = http_target("https://h/p").unwrap();
        assert_eq!((t.url.as_str(), t.basic_auth), ("https://h/p", None));
    }

    #[test]
    fn non_http_urls_are_rejected_without_echoing_them() {
        for bad in ["ftp://h/x", "http://", "not a url", "mailto:a@b"] {
            let e = http_target(bad).unwrap_err();
            assert!(!e.contains(bad) || bad.len() < 5, "{e}");
        }
        assert!(http_target("http://u:tok3n@").is_err());
    }
}
