//! `hushwatch silence add|list|expire`, `hushwatch ack` and `hushwatch
//! replay`: thin clients of the operator routes (`/v1/silences`,
//! `/v1/streams/NAME/acknowledge`, `/v1/streams/NAME/replay`); the shared
//! exchange [`request`] also serves `hushwatch forward` (`commands::forward`).
//! A replay prints a table (`--format json`: the answer as is).
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

pub(super) fn fail(message: impl std::fmt::Display) -> ExitCode {
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
    match request(target, method, path, body, DEADLINE) {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// How long a call waits for its whole answer (a replay: [`REPLAY_DEADLINE`]).
pub(super) const DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
/// A replay answers when its last chunk committed.
pub(super) const REPLAY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// Sends one request: the answer's JSON (2xx), or the exit code after
/// printing why not (1: the server refused; 2: it could not be asked).
pub(super) fn request(
    target: &Target<'_>,
    method: hyper::Method,
    path: &str,
    body: Option<Value>,
    deadline: std::time::Duration,
) -> Result<Value, ExitCode> {
    let base = base_url(target.url, target.config)?;
    let token = match std::env::var(target.token_env) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            return Err(fail(format!(
                "set the admin token in ${} (or name another variable with --token-env)",
                target.token_env
            )))
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Err(fail(format!("cannot start the runtime: {e}"))),
    };
    // One key per invocation: a retry of this same call (by hushwatch or
    // by whoever re-sends it) is then answered once (issue #30).
    let key = if method == hyper::Method::GET {
        None
    } else {
        match idempotency_key() {
            Some(k) => Some(k),
            None => return Err(fail("cannot read random bytes for the Idempotency-Key")),
        }
    };
    let url = format!("{base}{path}");
    match runtime.block_on(send(&url, method, &token, key.as_deref(), body, deadline)) {
        Ok((status, answer)) if status.is_success() => Ok(answer),
        Ok((status, answer)) => {
            let reason = answer["error"]
                .as_str()
                .map_or(answer.to_string(), str::to_string);
            eprintln!("hushwatch: {url} answered {status}: {reason}");
            Err(ExitCode::from(crate::exit::EXIT_FAILURE))
        }
        Err(e) => Err(fail(format!("{url}: {e}"))),
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
    deadline: std::time::Duration,
) -> Result<(hyper::StatusCode, Value), String> {
    let mut headers = vec![
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".to_string()),
    ];
    if let Some(key) = key {
        headers.push(("idempotency-key", key.to_string()));
    }
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let (status, answer) = super::http_client::exchange_within(
        deadline,
        url,
        method,
        &headers,
        Bytes::from(bytes),
        MAX_BODY,
    )
    .await?;
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

/// `hushwatch replay` (relay mode): a window (`from` and `to`) or every
/// dead letter (`dead_letters`), exactly one of the two (clap enforces it;
/// checked again here for callers that are not clap).
pub struct ReplayArgs<'a> {
    pub stream: &'a str,
    pub from: Option<&'a str>,
    pub to: Option<&'a str>,
    pub dead_letters: bool,
    pub types: &'a [String],
    pub dry_run: bool,
    pub created_by: Option<&'a str>,
    pub json: bool,
}

pub fn replay(target: &Target<'_>, args: &ReplayArgs<'_>) -> ExitCode {
    let mut body = json!({
        "dry_run": args.dry_run,
        "created_by": args.created_by.map_or_else(default_author, str::to_string),
    });
    match (args.from, args.to, args.dead_letters) {
        (Some(from), Some(to), false) => {
            body["from"] = json!(from);
            body["to"] = json!(to);
        }
        (None, None, true) => body["dead_letters"] = json!(true),
        _ => return fail("give either --from and --to, or --dead-letters"),
    }
    if !args.types.is_empty() {
        body["types"] = json!(args.types);
    }
    let path = format!("/v1/streams/{}/replay", url_encode(args.stream));
    match request(
        target,
        hyper::Method::POST,
        &path,
        Some(body),
        REPLAY_DEADLINE,
    ) {
        Ok(answer) if args.json => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Ok(answer) => {
            print!("{}", super::forward::replay_table(&answer));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
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

pub(super) fn url_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}
