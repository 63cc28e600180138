//! `kind = "log"`: one JSON line per page on standard output (logs go to
//! stderr, so stdout carries only pages).

use super::{Outcome, Page};
use chrono::{DateTime, Utc};
use std::io::Write;

pub fn line(page: &Page, now: DateTime<Utc>) -> String {
    super::payload::log_line(page, now).to_string()
}

pub fn send(page: &Page, now: DateTime<Utc>) -> Outcome {
    let text = line(page, now);
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Outcome::Delivered,
        Err(e) => Outcome::retry(format!("cannot write to stdout: {e}"), false),
    }
}
