//! `hushwatch status`: fetches `/v1/status` and prints the overview as a
//! terminal table. Exit 0: all ok; 1: something that pages (a stream
//! firing, a relay or cross-check not ok, storage failing: `StatusDoc::all_ok`); 2: bad `--config` or arguments (as for every command); 3: the
//! server could not be reached or answered nonsense. A monitor of the
//! monitor (cron) must tell "my config is wrong" from "hushwatch is down".

use crate::status::model::StatusDoc;
use crate::status::terminal;
use bytes::Bytes;
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

/// Exit code when something is firing.
pub const EXIT_FIRING: u8 = 1;
/// Exit code when the server is unreachable or answers no status document.
pub const EXIT_UNREACHABLE: u8 = 3;
/// A status document of 10,000 streams is a few MiB.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// The server to ask: `--url`, else the admin listener of `--config`, else
/// its main listener, else the documented default.
pub fn base_url(url: Option<&str>, config: Option<&Path>) -> Result<String, ExitCode> {
    if let Some(u) = url {
        return Ok(u.trim_end_matches('/').to_string());
    }
    let Some(path) = config else {
        return Ok("http://127.0.0.1:9477".to_string());
    };
    // Only `[server]` is read: the secrets of other sections are not needed
    // to find the listener, and a cron job usually has none of them exported.
    let server = crate::config::load_server(path).map_err(|errors| {
        eprintln!("{}: invalid configuration:", path.display());
        for e in &errors.0 {
            eprintln!("  {e}");
        }
        ExitCode::from(crate::exit::EXIT_CONFIG)
    })?;
    let addr = server.admin_listen.unwrap_or(server.listen);
    // A wildcard bind is reached on loopback from the same host.
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    Ok(format!("http://{host}:{}", addr.port()))
}

pub fn run(url: Option<&str>, config: Option<&Path>) -> ExitCode {
    let base = match base_url(url, config) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let runtime = match super::runtime_or(EXIT_UNREACHABLE) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let doc = match runtime.block_on(fetch(&format!("{base}/v1/status"))) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hushwatch status: {base}: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    print!(
        "{}",
        terminal::render(&doc, std::io::stdout().is_terminal())
    );
    if doc.all_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FIRING)
    }
}

async fn fetch(url: &str) -> Result<StatusDoc, String> {
    let (status, body) =
        super::http_client::exchange(url, hyper::Method::GET, &[], Bytes::new(), MAX_BODY).await?;
    if status == hyper::StatusCode::SERVICE_UNAVAILABLE {
        // The server answers 503 when its store did not answer within
        // its 10 s bound (a stalled database), not for a wrong port.
        return Err(format!(
            "answered {status}: its storage did not answer in time (see /metrics, hushwatch_store_read_timeouts_total)"
        ));
    }
    if !status.is_success() {
        return Err(format!(
            "answered {status} (with admin_listen set, ask that port)"
        ));
    }
    serde_json::from_slice::<StatusDoc>(&body)
        .map_err(|e| format!("answer is not a hushwatch status document ({e})"))
}
