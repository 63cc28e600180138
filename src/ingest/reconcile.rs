//! The body of `POST /v1/streams/{stream}/reconciliations`: one report of
//! the app's reconciliation job against the identity provider's API.
//! Pure: shape and bounds only; the route stores what this returns.

use chrono::{DateTime, Utc};
use serde::Deserialize;

/// Drift items accepted in one report.
pub const MAX_DRIFT: usize = 10_000;
/// Report ids and subject ids are identifiers, not payloads.
pub const MAX_ID_LEN: usize = 200;
/// `detail` is a short note for people.
pub const MAX_DETAIL_LEN: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftKind {
    RevokeMissed,
    GrantMissed,
    Other,
}

impl DriftKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::RevokeMissed => "revoke_missed",
            DriftKind::GrantMissed => "grant_missed",
            DriftKind::Other => "other",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DriftItem {
    pub subject: String,
    pub kind: DriftKind,
    pub fixed: bool,
    #[serde(default)]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Report {
    pub id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub checked: u64,
    pub drift: Vec<DriftItem>,
}

/// Parses and bounds-checks a report; the error is the 400 answer's text.
pub fn parse(body: &[u8]) -> Result<Report, String> {
    let report: Report =
        serde_json::from_slice(body).map_err(|e| format!("invalid reconciliation report: {e}"))?;
    check_id("id", &report.id)?;
    if report.finished_at < report.started_at {
        return Err("finished_at is before started_at".into());
    }
    if report.drift.len() > MAX_DRIFT {
        return Err(format!(
            "drift holds {} items; at most {MAX_DRIFT} are accepted",
            report.drift.len()
        ));
    }
    for (i, d) in report.drift.iter().enumerate() {
        check_id(&format!("drift[{i}].subject"), &d.subject)?;
        if d.detail.as_ref().is_some_and(|t| t.len() > MAX_DETAIL_LEN) {
            return Err(format!(
                "drift[{i}].detail is longer than {MAX_DETAIL_LEN} bytes"
            ));
        }
    }
    Ok(report)
}

fn check_id(field: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(format!("{field} is longer than {MAX_ID_LEN} bytes"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_report_parses() {
        let r = parse(br#"{"id":"r1","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":12,"drift":[{"subject":"user_1","kind":"revoke_missed","fixed":true,"detail":"x"}]}"#).unwrap();
        assert_eq!(r.drift[0].kind, DriftKind::RevokeMissed);
        assert_eq!(r.checked, 12);
    }

    #[test]
    fn bad_shapes_are_refused() {
        for body in [
            &br#"{"id":"r1"}"#[..],
            br#"{"id":"","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":1,"drift":[]}"#,
            br#"{"id":"r","started_at":"2026-12-01T00:02:00Z","finished_at":"2026-12-01T00:01:00Z","checked":1,"drift":[]}"#,
            br#"{"id":"r","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":1,"drift":[{"subject":"u","kind":"nope","fixed":true}]}"#,
            br#"{"id":"r","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":-1,"drift":[]}"#,
        ] {
            assert!(parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn more_than_the_drift_cap_is_refused() {
        let item = r#"{"subject":"u","kind":"other","fixed":false}"#;
        let items = vec![item; MAX_DRIFT + 1].join(",");
        let body = format!(
            r#"{{"id":"r","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":1,"drift":[{items}]}}"#
        );
        assert!(parse(body.as_bytes()).unwrap_err().contains("at most"));
    }
}
