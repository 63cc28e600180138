//! `[[streams.X.maintenance]]`: planned maintenance windows, known in
//! advance. Each has the effect of an operator silence on the stream (see
//! `store::silences`); `check` refuses what runtime would refuse.

use super::reader::{join, Reader};
use chrono::{DateTime, TimeDelta, Utc};
use toml::{Table, Value};

/// Longest window accepted: a longer one is more likely a typo than a plan.
pub const MAX_WINDOW: TimeDelta = TimeDelta::days(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceWindow {
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub comment: String,
}

/// An RFC 3339 time, written as a TOML string or a TOML offset date-time.
fn time(r: &mut Reader<'_>, path: &str, t: &Table, key: &str) -> Option<DateTime<Utc>> {
    let key_path = join(path, key);
    let text = match t.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Datetime(d)) => d.to_string(),
        Some(_) => {
            r.error(&key_path, "expected an RFC 3339 time");
            return None;
        }
        None => {
            r.error(
                &key_path,
                "is required (RFC 3339, e.g. 2026-12-01T22:00:00Z)",
            );
            return None;
        }
    };
    match DateTime::parse_from_rfc3339(&text) {
        Ok(t) => Some(t.with_timezone(&Utc)),
        Err(_) => {
            r.error(
                &key_path,
                "expected an RFC 3339 time with an offset, e.g. 2026-12-01T22:00:00Z",
            );
            None
        }
    }
}

/// Reads the stream's `maintenance` list (absent: none).
pub(super) fn read(r: &mut Reader<'_>, path: &str, t: &Table) -> Vec<MaintenanceWindow> {
    let key_path = join(path, "maintenance");
    let Some(value) = t.get("maintenance") else {
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        r.error(
            &key_path,
            "expected [[streams.NAME.maintenance]] tables with from, until and comment",
        );
        return Vec::new();
    };
    let mut windows = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{key_path}[{i}]");
        let Some(w) = r.table(&item_path, item) else {
            continue;
        };
        r.reject_unknown(&item_path, w, &["from", "until", "comment"]);
        let from = time(r, &item_path, w, "from");
        let until = time(r, &item_path, w, "until");
        let comment = r
            .opt_string(&item_path, w, "comment")
            .unwrap_or_else(|| "planned maintenance".to_string());
        let (Some(from), Some(until)) = (from, until) else {
            continue;
        };
        if until <= from {
            r.error(&join(&item_path, "until"), "must be after from");
        } else if until - from > MAX_WINDOW {
            r.error(
                &join(&item_path, "until"),
                "the window may last at most 30 days",
            );
        } else {
            windows.push(MaintenanceWindow {
                from,
                until,
                comment,
            });
        }
    }
    windows
}
