//! `hushwatch silence add|list|expire`, `hushwatch ack` and `hushwatch
//! replay`: thin clients of the operator routes (`/v1/silences`,
//! `/v1/streams/NAME/acknowledge`, `/v1/streams/NAME/replay`).
//! The admin token is read from an environment variable, never an
//! argument (arguments show in `ps` and shell history).
//! Every call but a listing carries a fresh random `Idempotency-Key`
//! (issue #30), so a re-sent request is answered once.
//! Exit 0: done; 1: the server refused (its reason is printed);
//! 2: bad arguments, missing token, or the server could not be reached.

use super::status::base_url;
use bytes::Bytes;
use serde_json::{json, Value};
use std::path::Path;
use std::process::ExitCode;

/// Default of `--token-env`.
pub const TOKEN_ENV: &str = "HUSHWATCH_ADMIN_TOKEN";
/// 1,000 silences with long comments fit easily.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Where to send and how to authenticate.
pub struct Target<'a> {
    pub url: Option<&'a str>,
    pub config: Option<&'a Path>,
    pub token_env: &'a str,
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("hushwatch: {message}");
    ExitCode::from(crate::exit::EXIT_CONFIG)
}

/// Who did it when `--created-by` is not given: the login name.
pub fn default_author() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "cli".to_string())
}

/// Sends one request; prints the answer's JSON (2xx) or its reason.
fn call(target: &Target<'_>, method: hyper::Method, path: &str, body: Option<Value>) -> ExitCode {
    let base = match base_url(target.url, target.config) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let token = match std::env::var(target.token_env) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            return fail(format!(
                "set the admin token in ${} (or name another variable with --token-env)",
                target.token_env
            ))
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    // One key per invocation: a retry of this same call (by hushwatch or
    // by whoever re-sends it) is then answered once (issue #30).
    let key = if method == hyper::Method::GET {
        None
    } else {
        match idempotency_key() {
            Some(k) => Some(k),
            None => return fail("cannot read random bytes for the Idempotency-Key"),
        }
    };
    let url = format!("{base}{path}");
    match runtime.block_on(send(&url, method, &token, key.as_deref(), body)) {
        Ok((status, answer)) if status.is_success() => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Ok((status, answer)) => {
            let reason = answer["error"]
                .as_str()
                .map_or(answer.to_string(), str::to_string);
            eprintln!("hushwatch: {url} answered {status}: {reason}");
            ExitCode::from(crate::exit::EXIT_FAILURE)
        }
        Err(e) => fail(format!("{url}: {e}")),
    }
}

/// A fresh random 128-bit key, in hex. The randomness is ring's
/// `SystemRandom` (the OS generator) through the rustls provider already
/// linked for TLS (rustls `crypto/ring/mod.rs`: `secure_random` fills
/// from `ring::rand::SystemRandom`), so no new dependency.
fn idempotency_key() -> Option<String> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

async fn send(
    url: &str,
    method: hyper::Method,
    token: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> Result<(hyper::StatusCode, Value), String> {
    let mut headers = vec![
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".to_string()),
    ];
    if let Some(key) = key {
        headers.push(("idempotency-key", key.to_string()));
    }
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let (status, answer) =
        super::http_client::exchange(url, method, &headers, Bytes::from(bytes), MAX_BODY).await?;
    let answer = serde_json::from_slice(&answer)
        .unwrap_or_else(|_| json!({ "error": String::from_utf8_lossy(&answer) }));
    Ok((status, answer))
}

/// `silence add`: exactly one of `for_` (a duration) and `until` (RFC 3339).
pub struct AddArgs<'a> {
    pub streams: &'a [String],
    pub kinds: &'a [String],
    pub for_: Option<&'a str>,
    pub until: Option<&'a str>,
    pub comment: &'a str,
    pub created_by: Option<&'a str>,
}

pub fn add(target: &Target<'_>, args: &AddArgs<'_>) -> ExitCode {
    let mut body = json!({
        "streams": args.streams,
        "comment": args.comment,
        "created_by": args.created_by.map_or_else(default_author, str::to_string),
    });
    match (args.for_, args.until) {
        (Some(d), None) => body["duration"] = json!(d),
        (None, Some(t)) => body["ends_at"] = json!(t),
        _ => return fail("give exactly one of --for and --until"),
    }
    if !args.kinds.is_empty() {
        body["kinds"] = json!(args.kinds);
    }
    call(target, hyper::Method::POST, "/v1/silences", Some(body))
}

pub fn list(target: &Target<'_>) -> ExitCode {
    call(target, hyper::Method::GET, "/v1/silences", None)
}

pub fn expire(
    target: &Target<'_>,
    id: i64,
    created_by: Option<&str>,
    comment: Option<&str>,
) -> ExitCode {
    let by = created_by.map_or_else(default_author, str::to_string);
    let mut path = format!("/v1/silences/{id}?created_by={}", url_encode(&by));
    if let Some(comment) = comment {
        path.push_str(&format!("&comment={}", url_encode(comment)));
    }
    call(target, hyper::Method::DELETE, &path, None)
}

/// `hushwatch replay` (relay mode).
pub struct ReplayArgs<'a> {
    pub stream: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub types: &'a [String],
    pub dry_run: bool,
    pub created_by: Option<&'a str>,
}

pub fn replay(target: &Target<'_>, args: &ReplayArgs<'_>) -> ExitCode {
    let mut body = json!({
        "from": args.from,
        "to": args.to,
        "dry_run": args.dry_run,
        "created_by": args.created_by.map_or_else(default_author, str::to_string),
    });
    if !args.types.is_empty() {
        body["types"] = json!(args.types);
    }
    call(
        target,
        hyper::Method::POST,
        &format!("/v1/streams/{}/replay", url_encode(args.stream)),
        Some(body),
    )
}

pub fn ack(target: &Target<'_>, stream: &str, comment: &str, created_by: Option<&str>) -> ExitCode {
    let body = json!({
        "comment": comment,
        "created_by": created_by.map_or_else(default_author, str::to_string),
    });
    call(
        target,
        hyper::Method::POST,
        &format!("/v1/streams/{}/acknowledge", url_encode(stream)),
        Some(body),
    )
}

fn url_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}
