//! `hushwatch sign`: the three Standard Webhooks headers for a body, so a
//! signed webhook can be sent by hand (`curl -H @headers.txt`) to test an
//! ingest route. Uses the same signing code the verifier is tested against.
//! The secret comes from an environment variable, never from the command
//! line (where `ps` and shell history would keep it), and is never printed.

use crate::clock::{Clock, SystemClock};
use crate::exit::EXIT_CONFIG;
use crate::ingest::signature::{sign, SecretKey};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

pub struct SignArgs<'a> {
    /// Name of the environment variable holding the `whsec_…` secret.
    pub secret_env: &'a str,
    /// The body file; `-` reads standard input.
    pub body: &'a Path,
    /// `webhook-id`; default derived from the body and timestamp.
    pub id: Option<&'a str>,
    /// Unix seconds; default now.
    pub timestamp: Option<i64>,
}

pub fn run(args: &SignArgs) -> ExitCode {
    match headers(args) {
        Ok(lines) => {
            print!("{lines}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

fn headers(args: &SignArgs) -> Result<String, String> {
    let secret = std::env::var(args.secret_env).map_err(|_| {
        format!(
            "--secret-env: environment variable {} is not set (export it with the endpoint's whsec_... secret)",
            args.secret_env
        )
    })?;
    let key =
        SecretKey::parse(&secret).map_err(|e| format!("--secret-env {}: {e}", args.secret_env))?;
    let body = read_body(args.body)?;
    let timestamp = args
        .timestamp
        .unwrap_or_else(|| SystemClock.now().timestamp());
    Ok(signed_headers(&key, &body, args.id, timestamp))
}

/// `webhook-id`, `webhook-timestamp` and `webhook-signature` lines, in the
/// form `curl -H @FILE` reads.
fn signed_headers(key: &SecretKey, body: &[u8], id: Option<&str>, timestamp: i64) -> String {
    let id = match id {
        Some(id) => id.to_owned(),
        None => default_id(timestamp, body),
    };
    let signature = sign(key, &id, timestamp, body);
    format!("webhook-id: {id}\nwebhook-timestamp: {timestamp}\nwebhook-signature: {signature}\n")
}

fn read_body(path: &Path) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut body).map(|_| ())
    } else {
        std::fs::read(path).map(|b| body = b)
    };
    read.map_err(|e| format!("--body {}: {e}", path.display()))?;
    Ok(body)
}

/// A stable id for this body at this second: signing the same body twice
/// in one second gives the same id (the receiver stores it once), any other
/// body or second a new one.
fn default_id(timestamp: i64, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(timestamp.to_string().as_bytes());
    hash.update(b".");
    hash.update(body);
    let digest = hash.finalize();
    format!("msg_hw{}", crate::audit::chain::to_hex(&digest[..12]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::signature::{SignedHeaders, Verifier};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn lines(text: &str) -> Vec<(&str, &str)> {
        text.lines().map(|l| l.split_once(": ").unwrap()).collect()
    }

    #[test]
    fn the_printed_headers_verify_and_never_contain_the_secret() {
        let key = SecretKey::parse(SECRET).unwrap();
        let body = br#"{"type":"user.created"}"#;
        let text = signed_headers(&key, body, None, 1_764_000_000);
        assert!(!text.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{text}");
        let lines = lines(&text);
        let names: Vec<&str> = lines.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["webhook-id", "webhook-timestamp", "webhook-signature"]
        );
        assert_eq!(lines[1].1, "1764000000");
        let found =
            SignedHeaders::find(|name| lines.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
                .unwrap();
        let verifier = Verifier::new(vec![key]);
        assert!(verifier.verify(&found, body, 1_764_000_000).is_ok());
        // Another body does not verify under these headers.
        assert!(verifier.verify(&found, b"{}", 1_764_000_000).is_err());
    }

    #[test]
    fn ids_are_stable_per_body_and_second_and_a_given_id_is_kept() {
        let key = SecretKey::parse(SECRET).unwrap();
        let id = |body: &[u8], ts| lines(&signed_headers(&key, body, None, ts))[0].1.to_owned();
        assert_eq!(id(b"a", 1), id(b"a", 1));
        assert_ne!(id(b"a", 1), id(b"b", 1));
        assert_ne!(id(b"a", 1), id(b"a", 2));
        let text = signed_headers(&key, b"a", Some("msg_mine"), 1);
        assert_eq!(lines(&text)[0], ("webhook-id", "msg_mine"));
    }
}
