//! The body of `POST /v1/streams/{stream}/reconciliations`: one report of
//! the app's reconciliation job against the identity provider's API.
//! Pure: shape and bounds only; the route stores what this returns.

use crate::ingest::verified::Verified;
use chrono::{DateTime, Utc};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftItem {
    pub subject: String,
    pub kind: DriftKind,
    pub fixed: bool,
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub checked: u64,
    pub drift: Vec<DriftItem>,
}

/// Parses and bounds-checks a report; the error is the 400 answer's text.
///
/// The answer names the field (and drift index), never the value: serde's
/// own messages quote what they could not read (`unknown variant
/// `<!channel>``), and SECURITY.md promises errors that do not echo the
/// request. So the syntax is checked first without building anything
/// (`IgnoredAny`; syntax errors carry a position, not a value), then the
/// report is read field by field, each failure replaced by our own text.
pub fn parse(body: Verified<'_>) -> Result<Report, String> {
    let body = body.bytes();
    serde_json::from_slice::<IgnoredAny>(body)
        .map_err(|e| format!("invalid reconciliation report: not JSON ({e})"))?;
    let report = serde_json::from_slice::<Parsed>(body)
        .map_err(|e| format!("invalid reconciliation report: {e}"))?
        .0;
    check_id("id", &report.id)?;
    if report.finished_at < report.started_at {
        return Err("finished_at is before started_at".into());
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

/// Visitor methods for every JSON value that is not an object: each
/// answers `what` without the value (serde's defaults would quote it).
macro_rules! only_objects {
    ($what:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(E::custom($what(&self)))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(E::custom($what(&self)))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(E::custom($what(&self)))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom($what(&self)))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom($what(&self)))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom($what(&self)))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(de::Error::custom($what(&self)))
        }
    };
}

/// One field's value, or an error that names `field` and what it must be.
fn value<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    map: &mut A,
    field: &str,
    must: &str,
) -> Result<T, A::Error> {
    map.next_value::<T>()
        .map_err(|_| de::Error::custom(format!("{field} {must}")))
}

fn once<T, E: de::Error>(slot: &mut Option<T>, field: &str, v: T) -> Result<(), E> {
    if slot.replace(v).is_some() {
        return Err(E::custom(format!("{field} is given twice")));
    }
    Ok(())
}

fn required<T, E: de::Error>(slot: Option<T>, field: &str) -> Result<T, E> {
    slot.ok_or_else(|| E::custom(format!("{field} is required")))
}

const MUST_TIME: &str = "must be an RFC 3339 time";
const MUST_ID: &str = "must be a string";

struct Parsed(Report);

impl<'de> Deserialize<'de> for Parsed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ReportVisitor).map(Parsed)
    }
}

struct ReportVisitor;

impl<'de> Visitor<'de> for ReportVisitor {
    type Value = Report;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a reconciliation report object")
    }

    only_objects!(|_: &Self| "the report must be a JSON object");

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Report, A::Error> {
        let (mut id, mut started_at, mut finished_at, mut checked, mut drift) =
            (None, None, None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => once(&mut id, "id", value(&mut map, "id", MUST_ID)?)?,
                "started_at" => once(
                    &mut started_at,
                    "started_at",
                    value(&mut map, "started_at", MUST_TIME)?,
                )?,
                "finished_at" => once(
                    &mut finished_at,
                    "finished_at",
                    value(&mut map, "finished_at", MUST_TIME)?,
                )?,
                "checked" => once(
                    &mut checked,
                    "checked",
                    value(&mut map, "checked", "must be a whole number ≥ 0")?,
                )?,
                // The items' own errors already name their index and field.
                "drift" => once(&mut drift, "drift", map.next_value_seed(DriftSeed)?)?,
                // Unknown fields are ignored, as before (a newer job may
                // send more than this version reads).
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Report {
            id: required(id, "id")?,
            started_at: required(started_at, "started_at")?,
            finished_at: required(finished_at, "finished_at")?,
            checked: required(checked, "checked")?,
            drift: required(drift, "drift")?,
        })
    }
}

struct DriftSeed;

impl<'de> DeserializeSeed<'de> for DriftSeed {
    type Value = Vec<DriftItem>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DriftSeed {
    type Value = Vec<DriftItem>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of drift items")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(E::custom("drift must be a list"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Err(E::custom("drift must be a list"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(E::custom("drift must be a list"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(E::custom("drift must be a list"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(E::custom("drift must be a list"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Err(E::custom("drift must be a list"))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom("drift must be a list"))
    }

    /// Counted while reading: one item past the cap is refused before the
    /// rest is built.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element_seed(ItemVisitor { index: out.len() })? {
            if out.len() == MAX_DRIFT {
                return Err(de::Error::custom(format!(
                    "drift holds more than {MAX_DRIFT} items; at most {MAX_DRIFT} are accepted"
                )));
            }
            out.push(item);
        }
        Ok(out)
    }
}

struct ItemVisitor {
    index: usize,
}

impl<'de> DeserializeSeed<'de> for ItemVisitor {
    type Value = DriftItem;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = DriftItem;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a drift item object")
    }

    only_objects!(|v: &Self| format!("drift[{}] must be an object", v.index));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DriftItem, A::Error> {
        let i = self.index;
        let name = |f: &str| format!("drift[{i}].{f}");
        let (mut subject, mut kind, mut fixed, mut detail) = (None, None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "subject" => {
                    let v = value(&mut map, &name("subject"), MUST_ID)?;
                    once(&mut subject, &name("subject"), v)?
                }
                "kind" => {
                    let v = value(
                        &mut map,
                        &name("kind"),
                        "must be one of revoke_missed, grant_missed, other",
                    )?;
                    once(&mut kind, &name("kind"), v)?
                }
                "fixed" => {
                    let v = value(&mut map, &name("fixed"), "must be true or false")?;
                    once(&mut fixed, &name("fixed"), v)?
                }
                "detail" => {
                    let v: Option<String> =
                        value(&mut map, &name("detail"), "must be a string or null")?;
                    once(&mut detail, &name("detail"), v)?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(DriftItem {
            subject: required(subject, &name("subject"))?,
            kind: required(kind, &name("kind"))?,
            fixed: required(fixed, &name("fixed"))?,
            detail: detail.flatten(),
        })
    }
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

    /// The reader over a body the tests vouch for (the token is `bearer`'s concern).
    fn parse(body: &[u8]) -> Result<Report, String> {
        super::parse(Verified::proved(body))
    }

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

    /// Every 400 names the field (and index), never the value sent.
    #[test]
    fn errors_name_the_field_not_the_value() {
        let head = r#""started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":1"#;
        for (body, field) in [
            (format!(r#"{{"id":"r",{head},"drift":[{{"subject":"u","kind":"SECRETVALUE","fixed":true}}]}}"#), "drift[0].kind must be one of"),
            (format!(r#"{{"id":"r",{head},"drift":[{{"subject":"u","kind":"other","fixed":true}},{{"subject":"u","kind":"other","fixed":"SECRETVALUE"}}]}}"#), "drift[1].fixed must be true or false"),
            (format!(r#"{{"id":"r",{head},"drift":["SECRETVALUE"]}}"#), "drift[0] must be an object"),
            (format!(r#"{{"id":"r",{head},"drift":[{{"subject":["SECRETVALUE"],"kind":"other","fixed":true}}]}}"#), "drift[0].subject must be a string"),
            (format!(r#"{{"id":"r",{head},"drift":[{{"kind":"other","fixed":true}}]}}"#), "drift[0].subject is required"),
            (format!(r#"{{"id":"r",{head},"drift":"SECRETVALUE"}}"#), "drift must be a list"),
            (r#"{"id":"r","started_at":"SECRETVALUE","finished_at":"2026-12-01T00:01:00Z","checked":1,"drift":[]}"#.to_string(), "started_at must be an RFC 3339 time"),
            (r#"{"id":"r","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":"SECRETVALUE","drift":[]}"#.to_string(), "checked must be a whole number"),
            (r#"{"id":12345678,"started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:01:00Z","checked":1,"drift":[]}"#.to_string(), "id must be a string"),
            (r#""SECRETVALUE""#.to_string(), "the report must be a JSON object"),
            (r#"{"id":"SECRETVALUE"#.to_string(), "not JSON"),
        ] {
            let e = parse(body.as_bytes()).unwrap_err();
            assert!(e.contains(field), "{body}: {e}");
            assert!(!e.contains("SECRETVALUE") && !e.contains("12345678"), "{body}: {e}");
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
