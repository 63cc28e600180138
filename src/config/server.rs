//! `[server]`: listeners, data directory, the request body deadline and
//! the acknowledge links in pages (`public_url`, `ack_link_ttl`) and the
//! runbook every page links to (`runbook_base_url`).
//! (`max_streams` and `admin_token` are read by `config::templates`.)

use super::reader::Reader;
use chrono::TimeDelta;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toml::Table;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// `admin_listen`: when set, the status page, `/v1/status`, `/metrics`
    /// and admin routes are served only on this second listener.
    pub admin_listen: Option<SocketAddr>,
    /// Absolute, or relative to the process's working directory: already
    /// resolved against the config file's folder.
    pub data_dir: PathBuf,
    /// `body_timeout`: the whole request body must arrive within this time
    /// of the end of the head, else 408 and the connection is closed.
    pub body_timeout: std::time::Duration,
    /// `public_url`: where people reach this sidecar's `/ack/{code}`; when
    /// set, every firing stream page carries an acknowledge link.
    pub public_url: Option<PublicUrl>,
    /// `ack_link_ttl`: how long an acknowledge link works (default 24h).
    pub ack_link_ttl: TimeDelta,
    /// `runbook_base_url`: the runbook page; every page and alert rule
    /// links to its kind's section there (`RunbookUrl::section`).
    pub runbook_base_url: RunbookUrl,
}

/// The runbook address pages carry when `[server] runbook_base_url` does
/// not say (docs/src/operating/runbooks.md). The project publishes no book
/// at an address of its own, and a link to a domain nobody here controls
/// could be registered by anyone and sent to on-call in every page, so the
/// default is under the reserved `.invalid` name (RFC 2606): it never
/// resolves, and the anchor still names the section. A deployment sets the
/// key to where it hosts the book (or its own runbooks); the shipped alert
/// rules carry this same placeholder until the chart's values override it.
pub const DEFAULT_RUNBOOK_BASE_URL: &str =
    "https://runbooks.hushwatch.invalid/operating/runbooks.html";

/// `[server] runbook_base_url`, parsed: an absolute `http(s)` URL without
/// credentials, query or fragment (each page adds `#` and its kind).
/// `check` and the pages use this one parser and [`RunbookUrl::section`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunbookUrl(String);

impl Default for RunbookUrl {
    fn default() -> Self {
        RunbookUrl(DEFAULT_RUNBOOK_BASE_URL.to_string())
    }
}

impl RunbookUrl {
    pub fn parse(text: &str) -> Result<RunbookUrl, String> {
        let url = link_base(text, DEFAULT_RUNBOOK_BASE_URL, "RUNBOOK_BASE_URL#KIND")?;
        Ok(RunbookUrl(url.as_str().to_string()))
    }

    /// The runbook section of a page kind: the page's `alert_kind` is the
    /// section's heading, so its anchor (docs/src/operating/runbooks.md).
    pub fn section(&self, alert_kind: &str) -> String {
        format!("{}#{alert_kind}", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The default `ack_link_ttl`: a day covers a page read the next morning.
pub const ACK_LINK_TTL: TimeDelta = TimeDelta::hours(24);

/// The longest accepted `public_url`, in bytes: a link must fit every
/// receiver's field (a Slack button's `url` takes 3,000 characters).
pub const PUBLIC_URL_MAX: usize = 1024;

/// The base of links that pages carry (`public_url`, `runbook_base_url`):
/// an absolute `http(s)` URL with a host, at most [`PUBLIC_URL_MAX`]
/// bytes, without credentials (a password would travel in every page),
/// query or fragment (each link appends its own `shape`). The value is
/// never quoted back in an error: it might carry a password.
fn link_base(text: &str, example: &str, shape: &str) -> Result<url::Url, String> {
    if text.len() > PUBLIC_URL_MAX {
        return Err(format!("must be at most {PUBLIC_URL_MAX} bytes"));
    }
    let url = url::Url::parse(text)
        .map_err(|e| format!("is not an absolute URL ({e}); use e.g. \"{example}\""))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http:// or https:// URL".to_string());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host".to_string());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password".to_string());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "must not have a query or fragment: links are {shape}"
        ));
    }
    Ok(url)
}

/// `[server] public_url`, parsed: an absolute `http(s)` URL without
/// credentials, query or fragment, kept without its trailing `/`. `check`
/// and the links in pages use this one parser ([`PublicUrl::parse`]) and
/// this one way to build a link ([`PublicUrl::ack_link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    pub fn parse(text: &str) -> Result<PublicUrl, String> {
        let url = link_base(text, "https://hushwatch.example.com", "PUBLIC_URL/ack/CODE")?;
        Ok(PublicUrl(url.as_str().trim_end_matches('/').to_string()))
    }

    /// The link that opens `code`'s confirmation page.
    pub fn ack_link(&self, code: &str) -> String {
        format!("{}/ack/{code}", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub(super) fn read_server(r: &mut Reader<'_>, root: &Table, base_dir: &Path) -> ServerConfig {
    let empty = Table::new();
    let t = r.sub_table("", root, "server").unwrap_or(&empty);
    r.reject_unknown(
        "server",
        t,
        &[
            "listen",
            "admin_listen",
            "data_dir",
            "body_timeout",
            "max_streams",
            "admin_token",
            "public_url",
            "ack_link_ttl",
            "runbook_base_url",
            super::watchdog::SERVER_KEYS[0],
            super::watchdog::SERVER_KEYS[1],
        ],
    );
    let listen_text = r
        .opt_string("server", t, "listen")
        .unwrap_or_else(|| "127.0.0.1:9477".to_string());
    let listen = listen_text.parse().unwrap_or_else(|_| {
        r.error(
            "server.listen",
            format!("{listen_text:?} is not an address (use HOST:PORT, e.g. \"127.0.0.1:9477\")"),
        );
        SocketAddr::from(([127, 0, 0, 1], 9477))
    });
    let data_dir = r
        .opt_string("server", t, "data_dir")
        .unwrap_or_else(|| "data".to_string());
    if data_dir.is_empty() {
        r.error("server.data_dir", "must not be empty");
    }
    let admin_listen = read_admin_listen(r, t, listen);
    let body_timeout = read_body_timeout(r, t);
    let public_url =
        r.opt_string("server", t, "public_url")
            .and_then(|text| match PublicUrl::parse(&text) {
                Ok(url) => Some(url),
                Err(reason) => {
                    r.error("server.public_url", reason);
                    None
                }
            });
    let ack_link_ttl = read_ack_link_ttl(r, t);
    let runbook_base_url =
        r.opt_string("server", t, "runbook_base_url")
            .map_or_else(RunbookUrl::default, |text| {
                RunbookUrl::parse(&text).unwrap_or_else(|reason| {
                    r.error("server.runbook_base_url", reason);
                    RunbookUrl::default()
                })
            });
    ServerConfig {
        listen,
        admin_listen,
        data_dir: base_dir.join(data_dir),
        body_timeout,
        public_url,
        ack_link_ttl,
        runbook_base_url,
    }
}

/// `[server] ack_link_ttl`: default 24h; at least 1s, at most 7d (a link
/// in an old mail should not outlive a week).
fn read_ack_link_ttl(r: &mut Reader<'_>, t: &Table) -> TimeDelta {
    let Some(d) = r.opt_duration("server", t, "ack_link_ttl") else {
        return ACK_LINK_TTL;
    };
    if d < TimeDelta::seconds(1) || d > TimeDelta::days(7) {
        r.error(
            "server.ack_link_ttl",
            "must be between 1s and 7d (e.g. \"24h\")",
        );
        return ACK_LINK_TTL;
    }
    d
}

/// `[server] admin_listen`: optional, and never the same socket as `listen`
/// (both would fail to bind at start, or one port would serve both sets).
fn read_admin_listen(r: &mut Reader<'_>, t: &Table, listen: SocketAddr) -> Option<SocketAddr> {
    let text = r.opt_string("server", t, "admin_listen")?;
    let Ok(addr) = text.parse::<SocketAddr>() else {
        r.error(
            "server.admin_listen",
            format!("{text:?} is not an address (use HOST:PORT, e.g. \"127.0.0.1:9478\")"),
        );
        return None;
    };
    if addr == listen && addr.port() != 0 {
        r.error(
            "server.admin_listen",
            format!("{addr} is also server.listen; use a different port"),
        );
    }
    Some(addr)
}

/// `[server] body_timeout`: default 10 s; at least 1 s (a webhook body
/// needs no less) and at most 10 min (longer would let stalled bodies hold
/// connection slots for that long).
fn read_body_timeout(r: &mut Reader<'_>, t: &Table) -> std::time::Duration {
    const DEFAULT: std::time::Duration = std::time::Duration::from_secs(10);
    let Some(d) = r.opt_duration("server", t, "body_timeout") else {
        return DEFAULT;
    };
    if d < TimeDelta::seconds(1) || d > TimeDelta::minutes(10) {
        r.error(
            "server.body_timeout",
            "must be between 1s and 10m (e.g. \"10s\")",
        );
        return DEFAULT;
    }
    d.to_std().unwrap_or(DEFAULT)
}
