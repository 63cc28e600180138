//! `kind = "log"`: one JSON line per page on standard output (logs go to
//! stderr, so stdout carries only pages).

use super::{Outcome, Page};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;
use std::io::Write;

pub fn line(page: &Page, now: DateTime<Utc>) -> String {
    json!({
        "page": page.key,
        "alert_id": page.alert_id,
        "status": if page.firing { "firing" } else { "resolved" },
        "kind": page.kind.as_str(),
        "stream": page.stream,
        "at": page.at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "sent_at": now.to_rfc3339_opts(SecondsFormat::Millis, true),
        "summary": page.summary,
        "test": page.test,
    })
    .to_string()
}

pub fn send(page: &Page, now: DateTime<Utc>) -> Outcome {
    let text = line(page, now);
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Outcome::Delivered,
        Err(e) => Outcome::retry(format!("cannot write to stdout: {e}"), false),
    }
}
