//! `kind = "email"`: SMTP through lettre (tokio, rustls).
//!
//! `smtp_url`: `smtp://host[:port]` plain (port 25), `smtp://…?tls=required`
//! STARTTLS (port 587), `smtps://host[:port]` implicit TLS (port 465);
//! credentials in the URL (`smtp://user:pass@host`) or in
//! `username`/`password`. The `Message-ID` is the page key, so a re-sent
//! mail (after an ambiguous attempt) is recognisably the same message, and
//! every page of one alert episode references the same thread id.

use super::{payload, redact_url, Outcome, Page};
use crate::config::EmailConfig;
use lettre::message::{header::ContentType, Mailbox};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    None,
    StartTls,
    Implicit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpUrl {
    pub tls: TlsMode,
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
}

/// Parses `smtp_url`. Errors never echo the URL (it may hold a password).
pub fn parse_smtp_url(url: &str) -> Result<SmtpUrl, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("smtp_url must start with smtp:// or smtps://")?;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let mut tls = match scheme {
        "smtp" => TlsMode::None,
        "smtps" => TlsMode::Implicit,
        _ => return Err("smtp_url must start with smtp:// or smtps://".to_string()),
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("tls", "required")) if tls == TlsMode::None => tls = TlsMode::StartTls,
            Some(("tls", "required")) => {}
            Some(("tls", "none" | "opportunistic")) if tls == TlsMode::None => {}
            _ => return Err("smtp_url: the only query option is tls=required".to_string()),
        }
    }
    let default_port = match tls {
        TlsMode::None => 25,
        TlsMode::StartTls => 587,
        TlsMode::Implicit => 465,
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => (
            h,
            p.parse::<u16>()
                .map_err(|_| "smtp_url has an invalid port".to_string())?,
        ),
        _ => (hostport, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("smtp_url has no host".to_string());
    }
    let (username, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((n, p)) => (Some(percent_decode(n)), Some(percent_decode(p))),
            None => (Some(percent_decode(u)), None),
        },
        None => (None, None),
    };
    Ok(SmtpUrl {
        tls,
        host: host.to_string(),
        port,
        username,
        password,
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `Message-ID` of a page.
pub fn message_id(page: &Page) -> String {
    format!("<{}@hushwatch>", page.key)
}

/// The thread every page of one alert episode refers to.
pub fn thread_id(page: &Page) -> String {
    format!("<alert-{}@hushwatch>", page.alert_id)
}

/// Builds the message (pure apart from lettre's Date header).
pub fn build_message(config: &EmailConfig, page: &Page) -> Result<Message, String> {
    let from: Mailbox = config
        .from
        .parse()
        .map_err(|_| "from is not a valid address".to_string())?;
    let mut b = Message::builder()
        .from(from)
        .subject(payload::email_subject(page))
        .message_id(Some(message_id(page)))
        .references(thread_id(page))
        .in_reply_to(thread_id(page))
        .header(ContentType::TEXT_PLAIN);
    for (i, to) in config.to.iter().enumerate() {
        let mb: Mailbox = to
            .parse()
            .map_err(|_| format!("to[{i}] is not a valid address"))?;
        b = b.to(mb);
    }
    // lettre picks 7bit or quoted-printable (long lines) by itself.
    b.body(payload::email_body(page))
        .map_err(|e| format!("cannot build the message: {e}"))
}

fn transport(
    config: &EmailConfig,
    timeout: Duration,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let url = parse_smtp_url(config.smtp_url.expose())?;
    let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(url.host.clone())
        .port(url.port)
        .timeout(Some(timeout));
    if url.tls != TlsMode::None {
        let mut params = TlsParameters::builder(url.host.clone());
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
            let cert = Certificate::from_pem(&pem)
                .map_err(|_| format!("ca_file {} is not a PEM certificate", path.display()))?;
            params = params.add_root_certificate(cert);
        }
        let params = params
            .build()
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        b = b.tls(match url.tls {
            TlsMode::StartTls => Tls::Required(params),
            _ => Tls::Wrapper(params),
        });
    }
    let user = config.username.clone().or(url.username);
    let pass = config
        .password
        .as_ref()
        .map(|p| p.expose().to_string())
        .or(url.password);
    if let (Some(u), Some(p)) = (user, pass) {
        b = b.credentials(Credentials::new(u, p));
    }
    Ok(b.build())
}

pub async fn send(config: &EmailConfig, page: &Page, timeout: Duration) -> Outcome {
    let shown = redact_url(config.smtp_url.expose());
    let message = match build_message(config, page) {
        Ok(m) => m,
        Err(reason) => return Outcome::Permanent { reason },
    };
    let transport = match transport(config, timeout) {
        Ok(t) => t,
        Err(reason) => return Outcome::Permanent { reason },
    };
    match tokio::time::timeout(timeout.saturating_mul(3), transport.send(message)).await {
        Err(_) => Outcome::retry(
            format!("{shown} did not finish the SMTP exchange in time (retrying with the same Message-ID)"),
            true,
        ),
        Ok(Ok(_)) => Outcome::Delivered,
        Ok(Err(e)) if e.is_permanent() => Outcome::Permanent {
            reason: format!("{shown} refused the message: {e}"),
        },
        Ok(Err(e)) => Outcome::retry(format!("{shown}: {e}"), !e.is_transient()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls() {
        let u = parse_smtp_url("smtp://127.0.0.1:2525").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port),
            (TlsMode::None, "127.0.0.1", 2525)
        );
        let u = parse_smtp_url("smtp://me%40x.io:p%3Ass@mail.example?tls=required").unwrap();
        assert_eq!(u.tls, TlsMode::StartTls);
        assert_eq!(u.port, 587);
        assert_eq!(u.username.as_deref(), Some("me@x.io"));
        assert_eq!(u.password.as_deref(), Some("p:ss"));
        let u = parse_smtp_url("smtps://mail.example").unwrap();
        assert_eq!((u.tls, u.port), (TlsMode::Implicit, 465));
        assert!(parse_smtp_url("http://x").is_err());
        assert!(parse_smtp_url("smtp://x?foo=bar").is_err());
    }
}
