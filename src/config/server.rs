//! `[server]`: listeners, data directory and the request body deadline.
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
    ServerConfig {
        listen,
        admin_listen,
        data_dir: base_dir.join(data_dir),
        body_timeout,
    }
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
