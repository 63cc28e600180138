//! Facts pulled out of request bodies after their signature has been checked.
//!
//! Two shapes arrive: provider webhooks (Clerk, Standard Webhooks senders, Svix operational
//! webhooks, WorkOS), from which we want the event name, the event's own time and a few
//! subject ids for auditing; and the application's own reports of events it saw.
//!
//! Both parsers read into small typed shapes (`ingest::providers::lenient`), never into a
//! `serde_json::Value`: a tree can be two orders of magnitude larger than its text (a
//! 1 MiB body of nested empty objects grew ~124×), while these keep a few strings and skip
//! the rest without building it; arrays keep at most their limit of items. Every problem is
//! still reported against the field it concerns. Body size is the HTTP layer's job.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::ingest::providers::lenient::{lenient_record, List, Scalar};
use crate::ingest::verified::Verified;

/// Most subject-id pairs reported for one webhook.
pub const MAX_SUBJECT_IDS: usize = 16;

/// Most events accepted in one app report request.
pub const MAX_APP_REPORTS: usize = 1000;

/// Subject ids longer than this are skipped: real provider ids are short, and anything
/// longer would only bloat the audit trail.
const MAX_SUBJECT_ID_LEN: usize = 256;

/// Why a body could not be read. `Display` names the field and what is wrong with it,
/// without repeating the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadError {
    /// The body is not UTF-8 JSON; holds the parser's description (position, not content).
    NotJson(String),
    NotObject,
    Field {
        field: String,
        reason: String,
    },
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadError::NotJson(detail) => write!(f, "body is not valid JSON: {detail}"),
            PayloadError::NotObject => f.write_str("body must be a JSON object"),
            PayloadError::Field { field, reason } => write!(f, "field `{field}` {reason}"),
        }
    }
}

impl std::error::Error for PayloadError {}

fn field_error(field: impl Into<String>, reason: impl Into<String>) -> PayloadError {
    PayloadError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Facts from a provider webhook body (already signature-verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookFacts {
    pub event_type: Option<String>,
    /// When the event happened according to the provider. Differs from delivery time on
    /// retries and replays, which is why silence detection tracks it separately.
    pub event_time: Option<DateTime<Utc>>,
    /// Best-effort `(kind, id)` pairs such as `("user_id", "user_2…")`, for auditing.
    pub subject_ids: Vec<(String, String)>,
}

lenient_record!(WebhookBody {
    "type" => kind: Scalar,
    "event" => event: Scalar,
    "timestamp" => timestamp: Scalar,
    "created_at" => created_at: Scalar,
    "data" => data: WebhookData,
});
lenient_record!(WebhookData {
    "object" => object: Scalar,
    "id" => id: Scalar,
    "user_id" => user_id: Scalar,
    "public_user_data" => public_user_data: UserRef,
    "organization" => organization: IdRef,
    "organization_id" => organization_id: Scalar,
});
lenient_record!(UserRef { "user_id" => user_id: Scalar });
lenient_record!(IdRef { "id" => id: Scalar });

/// Reads a provider webhook body, which must be a JSON object.
///
/// - `event_type`: `type` (Clerk, Standard Webhooks, Svix operational), else `event`
///   (WorkOS).
/// - `event_time`: `timestamp` as an integer of Unix **milliseconds** (Clerk) or an RFC 3339
///   string (Standard Webhooks), else `created_at` as an RFC 3339 string (WorkOS).
///
/// Absent or `null` fields give `None`, because providers use `null` for "not set"; a field
/// that is present with the wrong type or an unparseable value is an error.
pub fn webhook_facts(body: Verified<'_>) -> Result<WebhookFacts, PayloadError> {
    let root: WebhookBody = parse_json(body.bytes())?;
    if !root.is_object {
        return Err(PayloadError::NotObject);
    }

    let event_type = match optional_str(&root.kind, "type", "")? {
        Some(event_type) => Some(event_type),
        None => optional_str(&root.event, "event", "")?,
    };

    let event_time = if root.timestamp.is_unset() {
        optional_rfc3339(&root.created_at, "created_at", "")?
    } else {
        Some(parse_timestamp_field(&root.timestamp)?)
    };

    Ok(WebhookFacts {
        event_type: event_type.map(str::to_owned),
        event_time,
        subject_ids: collect_subject_ids(subject_candidates(&root.data)),
    })
}

/// Where subject ids sit in a webhook body, in order. Field names follow Clerk's payloads;
/// WorkOS uses the same names for these resources. A bare `data.id` means a user, a session
/// or an organization depending on `data.object`, so it counts only when that says which.
fn subject_candidates(data: &WebhookData) -> Vec<(&'static str, &Scalar)> {
    let id_kind = match data.object.as_str() {
        Some("user") => Some("user_id"),
        Some("session") => Some("session_id"),
        Some("organization") => Some("organization_id"),
        Some("organization_membership") => Some("organization_membership_id"),
        _ => None,
    };
    let mut candidates = Vec::with_capacity(5);
    if let Some(kind) = id_kind {
        candidates.push((kind, &data.id));
    }
    candidates.push(("user_id", &data.user_id));
    candidates.push(("user_id", &data.public_user_data.user_id));
    candidates.push(("organization_id", &data.organization.id));
    candidates.push(("organization_id", &data.organization_id));
    candidates
}

/// Keeps candidates in order, skipping values that are missing, not strings, empty or
/// over-long, and pairs already found; never fails, since these ids are only for auditing.
fn collect_subject_ids(candidates: Vec<(&'static str, &Scalar)>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (kind, value) in candidates {
        if pairs.len() == MAX_SUBJECT_IDS {
            break;
        }
        let Some(id) = value.as_str() else {
            continue;
        };
        if id.is_empty() || id.len() > MAX_SUBJECT_ID_LEN {
            continue;
        }
        let pair = (kind.to_owned(), id.to_owned());
        if !pairs.contains(&pair) {
            pairs.push(pair);
        }
    }
    pairs
}

/// Clerk sends Unix milliseconds; Standard Webhooks suggests an RFC 3339 string.
fn parse_timestamp_field(timestamp: &Scalar) -> Result<DateTime<Utc>, PayloadError> {
    const FIELD: &str = "timestamp";
    match timestamp {
        Scalar::Int(millis) => DateTime::from_timestamp_millis(*millis)
            .ok_or_else(|| field_error(FIELD, "is out of range for Unix milliseconds")),
        Scalar::Number => Err(field_error(
            FIELD,
            "must be a whole number of Unix milliseconds",
        )),
        Scalar::Str(text) => parse_rfc3339(text, FIELD),
        _ => Err(field_error(
            FIELD,
            "must be an integer of Unix milliseconds or an RFC 3339 string",
        )),
    }
}

/// A report from the application itself about an identity event it handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppReport {
    pub event_type: String,
    pub id: Option<String>,
    pub occurred_at: Option<DateTime<Utc>>,
}

lenient_record!(ReportItem {
    "type" => kind: Scalar,
    "id" => id: Scalar,
    "occurred_at" => occurred_at: Scalar,
});

/// One report object, or an array of them (at most [`MAX_APP_REPORTS`] kept; the rest are
/// skipped and counted), or neither.
enum Reports {
    One(ReportItem),
    Many(List<ReportItem, MAX_APP_REPORTS>),
    Neither,
}

impl<'de> serde::Deserialize<'de> for Reports {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        use serde::de::{Error, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Reports;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object or an array of objects")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Reports, A::Error> {
                serde::Deserialize::deserialize(MapAccessDeserializer::new(map)).map(Reports::One)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Reports, A::Error> {
                serde::Deserialize::deserialize(SeqAccessDeserializer::new(seq)).map(Reports::Many)
            }
            fn visit_str<E: Error>(self, _: &str) -> Result<Reports, E> {
                Ok(Reports::Neither)
            }
            fn visit_unit<E: Error>(self) -> Result<Reports, E> {
                Ok(Reports::Neither)
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<Reports, E> {
                Ok(Reports::Neither)
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<Reports, E> {
                Ok(Reports::Neither)
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<Reports, E> {
                Ok(Reports::Neither)
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<Reports, E> {
                Ok(Reports::Neither)
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads the app's report: ONE object or an ARRAY of 1 to [`MAX_APP_REPORTS`] objects,
/// each `{"type": "...", "id": "...", "occurred_at": "RFC 3339"}`. `type` is required and
/// must not be blank; `id` and `occurred_at` are optional (`null` counts as absent);
/// unknown fields are ignored so the app can send more than we read. Errors inside an
/// array name the item, e.g. `[3].occurred_at`.
pub fn app_reports(body: Verified<'_>) -> Result<Vec<AppReport>, PayloadError> {
    match parse_json(body.bytes())? {
        Reports::One(item) => Ok(vec![app_report(&item, "")?]),
        Reports::Many(list) => {
            if list.items.is_empty() {
                return Err(field_error("body", "must contain at least one event"));
            }
            if list.overflow {
                return Err(field_error(
                    "body",
                    format!(
                        "holds more than {MAX_APP_REPORTS} events; at most {MAX_APP_REPORTS} are accepted per request"
                    ),
                ));
            }
            list.items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    if item.is_object {
                        app_report(item, &format!("[{index}]."))
                    } else {
                        Err(field_error(format!("[{index}]"), "must be a JSON object"))
                    }
                })
                .collect()
        }
        Reports::Neither => Err(field_error(
            "body",
            "must be a JSON object or an array of objects",
        )),
    }
}

/// `prefix` locates the object in error messages: `""` for a single object, `"[3]."` for
/// an array item.
fn app_report(item: &ReportItem, prefix: &str) -> Result<AppReport, PayloadError> {
    let event_type = optional_str(&item.kind, "type", prefix)?
        .ok_or_else(|| field_error(format!("{prefix}type"), "is required"))?;
    if event_type.trim().is_empty() {
        return Err(field_error(format!("{prefix}type"), "must not be empty"));
    }
    Ok(AppReport {
        event_type: event_type.to_owned(),
        id: optional_str(&item.id, "id", prefix)?.map(str::to_owned),
        occurred_at: optional_rfc3339(&item.occurred_at, "occurred_at", prefix)?,
    })
}

/// JSON text is UTF-8 by definition (RFC 8259); checking first gives a clearer message
/// than the parser's. serde_json's recursion limit turns deep nesting into an error.
fn parse_json<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, PayloadError> {
    let text = std::str::from_utf8(body).map_err(|err| {
        PayloadError::NotJson(format!(
            "body is not UTF-8 (invalid byte at offset {})",
            err.valid_up_to()
        ))
    })?;
    serde_json::from_str(text).map_err(|err| PayloadError::NotJson(err.to_string()))
}

fn optional_str<'v>(
    value: &'v Scalar,
    key: &str,
    prefix: &str,
) -> Result<Option<&'v str>, PayloadError> {
    match value {
        Scalar::Absent | Scalar::Null => Ok(None),
        Scalar::Str(text) => Ok(Some(text)),
        _ => Err(field_error(format!("{prefix}{key}"), "must be a string")),
    }
}

fn optional_rfc3339(
    value: &Scalar,
    key: &str,
    prefix: &str,
) -> Result<Option<DateTime<Utc>>, PayloadError> {
    let field = format!("{prefix}{key}");
    match value {
        Scalar::Absent | Scalar::Null => Ok(None),
        Scalar::Str(text) => parse_rfc3339(text, &field).map(Some),
        _ => Err(field_error(field, "must be an RFC 3339 date-time string")),
    }
}

fn parse_rfc3339(text: &str, field: &str) -> Result<DateTime<Utc>, PayloadError> {
    DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&Utc))
        .map_err(|_| {
            field_error(
                field,
                "is not an RFC 3339 date-time (expected e.g. 2025-03-03T09:12:44Z)",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader over a body the tests vouch for (a signature is `signature`'s concern).
    fn webhook_facts(body: &[u8]) -> Result<WebhookFacts, PayloadError> {
        super::webhook_facts(Verified::proved(body))
    }

    /// The same for the app's reports (the token is `bearer`'s concern).
    fn app_reports(body: &[u8]) -> Result<Vec<AppReport>, PayloadError> {
        super::app_reports(Verified::proved(body))
    }

    fn instant(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(kind, id)| (kind.to_string(), id.to_string()))
            .collect()
    }

    fn field_of(err: PayloadError) -> String {
        match err {
            PayloadError::Field { field, .. } => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn clerk_user_deleted_with_millisecond_timestamp() {
        // Envelope per section 4.1 of the wire-format reference; deleted-object data.
        let body = br#"{
            "type": "user.deleted",
            "object": "event",
            "timestamp": 1741000000123,
            "instance_id": "ins_2exampleInstanceId000000000",
            "event_attributes": {"http_request": {"client_ip": "203.0.113.7", "user_agent": "Mozilla/5.0"}},
            "data": {"object": "user", "id": "user_2exampleUser0000000000000", "deleted": true}
        }"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(facts.event_type.as_deref(), Some("user.deleted"));
        assert_eq!(facts.event_time, Some(instant("2025-03-03T11:06:40.123Z")));
        assert_eq!(
            facts.subject_ids,
            pairs(&[("user_id", "user_2exampleUser0000000000000")])
        );
    }

    #[test]
    fn clerk_session_revoked_names_session_and_user() {
        // The trimmed example from section 4.1 of the wire-format reference. Its inner
        // integer `created_at` must not be mistaken for the top-level one.
        let body = br#"{
            "type": "session.revoked",
            "object": "event",
            "timestamp": 1741000000000,
            "instance_id": "ins_2exampleInstanceId000000000",
            "data": {
                "object": "session",
                "id": "sess_2exampleSession00000000000",
                "user_id": "user_2exampleUser0000000000000",
                "client_id": "client_2exampleClient000000000",
                "status": "revoked",
                "created_at": 1740990000000,
                "user": null
            }
        }"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(facts.event_time, Some(instant("2025-03-03T11:06:40Z")));
        assert_eq!(
            facts.subject_ids,
            pairs(&[
                ("session_id", "sess_2exampleSession00000000000"),
                ("user_id", "user_2exampleUser0000000000000"),
            ])
        );
    }

    #[test]
    fn clerk_membership_names_membership_user_and_organization() {
        let body = br#"{
            "type": "organizationMembership.deleted",
            "timestamp": 1741000000000,
            "data": {
                "object": "organization_membership",
                "id": "orgmem_2example",
                "organization": {"object": "organization", "id": "org_2example"},
                "public_user_data": {"user_id": "user_2example"}
            }
        }"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(
            facts.subject_ids,
            pairs(&[
                ("organization_membership_id", "orgmem_2example"),
                ("user_id", "user_2example"),
                ("organization_id", "org_2example"),
            ])
        );
    }

    #[test]
    fn standard_webhooks_body_with_rfc3339_timestamp() {
        // Shaped like the example payload in the Standard Webhooks spec.
        let body = br#"{
            "type": "contact.created",
            "timestamp": "2022-11-03T20:26:10.344522Z",
            "data": {"id": "1f81eb52-5198-4599-803e-771906343485", "type": "contact"}
        }"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(facts.event_type.as_deref(), Some("contact.created"));
        assert_eq!(
            facts.event_time,
            Some(instant("2022-11-03T20:26:10.344522Z"))
        );
        assert!(facts.subject_ids.is_empty());
    }

    #[test]
    fn rfc3339_offsets_are_converted_to_utc() {
        let body = br#"{"type": "x", "timestamp": "2025-03-03T11:06:40+02:00"}"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(facts.event_time, Some(instant("2025-03-03T09:06:40Z")));
    }

    #[test]
    fn workos_body_uses_event_and_created_at() {
        // Example from section 5.1 of the wire-format reference.
        let body = br#"{"id":"event_01EXAMPLE","event":"organization_membership.deleted","data":{"object":"organization_membership","id":"om_01EXAMPLE","user_id":"user_01EXAMPLE","organization_id":"org_01EXAMPLE","status":"inactive"},"created_at":"2023-11-14T22:13:20.000Z"}"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(
            facts.event_type.as_deref(),
            Some("organization_membership.deleted")
        );
        assert_eq!(facts.event_time, Some(instant("2023-11-14T22:13:20Z")));
        assert_eq!(
            facts.event_time.map(|time| time.timestamp()),
            Some(1_700_000_000)
        );
        assert_eq!(
            facts.subject_ids,
            pairs(&[
                ("organization_membership_id", "om_01EXAMPLE"),
                ("user_id", "user_01EXAMPLE"),
                ("organization_id", "org_01EXAMPLE"),
            ])
        );
    }

    #[test]
    fn svix_operational_body_has_type_only() {
        // `endpoint.disabled` example from section 2.4 of the wire-format reference. The
        // `failSince` inside `data` is not the event time: operational bodies carry none.
        let body = br#"{
            "type": "endpoint.disabled",
            "data": {
                "appId": "app_u8jzPde0IgxLd6GncfBAepfJBd0",
                "appUid": "acme-prod",
                "endpointId": "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0",
                "endpointUid": "identity-sidecar",
                "failSince": "2025-03-03T09:12:44Z",
                "trigger": "automatic"
            }
        }"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(
            facts,
            WebhookFacts {
                event_type: Some("endpoint.disabled".to_owned()),
                event_time: None,
                subject_ids: Vec::new(),
            }
        );
    }

    #[test]
    fn absent_and_null_fields_give_none() {
        for body in [
            &br#"{}"#[..],
            br#"{"type": null, "event": null, "timestamp": null, "created_at": null}"#,
            br#"{"data": [1, 2, 3]}"#,
        ] {
            let facts = webhook_facts(body).unwrap();
            assert_eq!(facts.event_type, None);
            assert_eq!(facts.event_time, None);
            assert!(facts.subject_ids.is_empty());
        }
    }

    #[test]
    fn type_wins_over_event_and_timestamp_over_created_at() {
        let body = br#"{"type": "a", "event": "b", "timestamp": 0, "created_at": "not a date"}"#;
        let facts = webhook_facts(body).unwrap();
        assert_eq!(facts.event_type.as_deref(), Some("a"));
        assert_eq!(facts.event_time, Some(instant("1970-01-01T00:00:00Z")));
    }

    #[test]
    fn wrong_field_types_name_the_field() {
        let cases: [(&[u8], &str); 10] = [
            (br#"{"type": 5}"#, "type"),
            (br#"{"type": ["user.created"]}"#, "type"),
            (br#"{"event": {"name": "x"}}"#, "event"),
            (br#"{"timestamp": true}"#, "timestamp"),
            (br#"{"timestamp": 1741000000000.5}"#, "timestamp"),
            (br#"{"timestamp": 18446744073709551615}"#, "timestamp"),
            (br#"{"timestamp": 9223372036854775807}"#, "timestamp"),
            (br#"{"timestamp": "yesterday"}"#, "timestamp"),
            (br#"{"created_at": 1700000000000}"#, "created_at"),
            (br#"{"created_at": "2023-11-14 22:13"}"#, "created_at"),
        ];
        for (body, field) in cases {
            let err = webhook_facts(body).unwrap_err();
            assert!(err.to_string().contains(field), "{err}");
            assert_eq!(field_of(err), field);
        }
    }

    #[test]
    fn subject_ids_are_best_effort() {
        let too_long = "u".repeat(MAX_SUBJECT_ID_LEN + 1);
        let body = format!(
            r#"{{"type": "x", "data": {{"object": "user", "id": 42, "user_id": "{too_long}", "organization_id": ""}}}}"#
        );
        let facts = webhook_facts(body.as_bytes()).unwrap();
        assert!(facts.subject_ids.is_empty());

        // `data.id` is only a subject when `data.object` says what it is.
        let body = br#"{"data": {"object": "email", "id": "ema_1"}}"#;
        assert!(webhook_facts(body).unwrap().subject_ids.is_empty());
    }

    #[test]
    fn subject_ids_are_deduplicated_and_capped() {
        let body = br#"{"data": {"organization": {"id": "org_1"}, "organization_id": "org_1"}}"#;
        assert_eq!(
            webhook_facts(body).unwrap().subject_ids,
            pairs(&[("organization_id", "org_1")])
        );

        // The built-in list is shorter than the cap, so exercise it with a longer one.
        let values: Vec<Scalar> = (0..18).map(|i| Scalar::Str(format!("{i}"))).collect();
        let kinds = [
            "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q",
            "r",
        ];
        let found = collect_subject_ids(kinds.iter().copied().zip(values.iter()).collect());
        assert_eq!(found.len(), MAX_SUBJECT_IDS);
        assert_eq!(found.last().unwrap().0, "p");
    }

    #[test]
    fn non_objects_and_non_json_are_errors() {
        assert_eq!(webhook_facts(b"[]").unwrap_err(), PayloadError::NotObject);
        assert_eq!(webhook_facts(b"null").unwrap_err(), PayloadError::NotObject);
        assert_eq!(
            webhook_facts(b"\"x\"").unwrap_err(),
            PayloadError::NotObject
        );
        for body in [&b""[..], b"{", b"{\"type\": }", b"type=user.created"] {
            assert!(matches!(webhook_facts(body), Err(PayloadError::NotJson(_))));
        }
    }

    #[test]
    fn non_utf8_bodies_are_errors() {
        for body in [&b"\xff\xfe{}"[..], b"{\"type\": \"\xc3\x28\"}"] {
            assert!(matches!(webhook_facts(body), Err(PayloadError::NotJson(_))));
            assert!(matches!(app_reports(body), Err(PayloadError::NotJson(_))));
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let arrays = "[".repeat(100_000);
        let objects = r#"{"a":"#.repeat(100_000);
        for body in [arrays, objects] {
            assert!(matches!(
                webhook_facts(body.as_bytes()),
                Err(PayloadError::NotJson(_))
            ));
            assert!(matches!(
                app_reports(body.as_bytes()),
                Err(PayloadError::NotJson(_))
            ));
        }
    }

    #[test]
    fn app_report_single_object() {
        let body = br#"{"type": "user.deleted", "id": "evt_1", "occurred_at": "2025-03-03T09:12:44Z", "extra": {"ok": true}}"#;
        assert_eq!(
            app_reports(body).unwrap(),
            vec![AppReport {
                event_type: "user.deleted".to_owned(),
                id: Some("evt_1".to_owned()),
                occurred_at: Some(instant("2025-03-03T09:12:44Z")),
            }]
        );
    }

    #[test]
    fn app_report_array_with_optional_fields() {
        let body = br#"[
            {"type": "session.revoked"},
            {"type": "user.created", "id": null, "occurred_at": null, "source": "admin"},
            {"type": "user.deleted", "id": "evt_3", "occurred_at": "2025-03-03T10:12:44+01:00"}
        ]"#;
        let reports = app_reports(body).unwrap();
        assert_eq!(reports.len(), 3);
        assert_eq!(reports[0].event_type, "session.revoked");
        assert_eq!(reports[0].id, None);
        assert_eq!(reports[1].occurred_at, None);
        assert_eq!(reports[2].id.as_deref(), Some("evt_3"));
        assert_eq!(
            reports[2].occurred_at,
            Some(instant("2025-03-03T09:12:44Z"))
        );
    }

    #[test]
    fn app_report_errors_name_the_field() {
        let cases: [(&[u8], &str, &str); 11] = [
            (b"[]", "body", "at least one event"),
            (b"42", "body", "object"),
            (br#"{}"#, "type", "required"),
            (br#"{"type": null}"#, "type", "required"),
            (br#"{"type": ""}"#, "type", "empty"),
            (br#"{"type": "   "}"#, "type", "empty"),
            (br#"{"type": 7}"#, "type", "string"),
            (br#"{"type": "x", "id": 12}"#, "id", "string"),
            (
                br#"{"type": "x", "occurred_at": "last tuesday"}"#,
                "occurred_at",
                "RFC 3339",
            ),
            (
                br#"[{"type": "x"}, {"type": "y", "occurred_at": 1741000000}]"#,
                "[1].occurred_at",
                "RFC 3339",
            ),
            (br#"[{"type": "x"}, "y"]"#, "[1]", "object"),
        ];
        for (body, field, reason_part) in cases {
            let err = app_reports(body).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(field), "{message}");
            assert!(message.contains(reason_part), "{message}");
            assert_eq!(field_of(err), field);
        }
    }

    #[test]
    fn app_report_item_limit() {
        let item = r#"{"type":"user.created"}"#;
        let at_limit = format!("[{}]", vec![item; MAX_APP_REPORTS].join(","));
        assert_eq!(
            app_reports(at_limit.as_bytes()).unwrap().len(),
            MAX_APP_REPORTS
        );

        let over_limit = format!("[{}]", vec![item; MAX_APP_REPORTS + 1].join(","));
        let err = app_reports(over_limit.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("1000"), "{err}");
        assert_eq!(field_of(err), "body");
    }

    #[test]
    fn error_messages_do_not_echo_values() {
        let err =
            app_reports(br#"{"type": "x", "occurred_at": "secret-looking-value"}"#).unwrap_err();
        assert!(!err.to_string().contains("secret-looking-value"));
    }
}
