//! Okta Event Hooks: a fixed `Authorization` value, a one-time GET challenge, and batches
//! of System Log events.
//!
//! Wire facts (Okta developer docs, "Event hooks" concept page): Okta signs nothing; it
//! sends the header value configured with the hook on every request. Verification is a
//! `GET` with `X-Okta-Verification-Challenge: <v>`, answered `200 {"verification": "<v>"}`.
//! Deliveries are `POST {eventType: "com.okta.event_hook", eventId, eventTime,
//! data: {events: [LogEvent…]}}`; each LogEvent has `uuid`, `published`, `eventType`,
//! `target[]`. Okta waits 3 s and retries once, so the caller must answer fast; delivery is
//! at least once, so every LogEvent is deduplicated by its own `uuid` (the older docs' key,
//! stable across the batch-level `eventId` of a retry).

use super::lenient::{lenient_record, List, Scalar};
use super::{bad_request, matches_any, optional_instant, parse_json, push_subject, text};
use super::{unknown_record, Delivery, ProviderEvent, Rejection, MAX_BATCH};
use crate::ingest::verified::{HeadChecked, Verified};

/// The header carrying Okta's one-time verification challenge.
pub const CHALLENGE_HEADER: &str = "x-okta-verification-challenge";

/// Longest challenge echoed back; Okta's are short random strings.
const MAX_CHALLENGE_LEN: usize = 512;

/// Checks the `Authorization` header against the configured values (several allow
/// rotation; all are compared, see [`matches_any`]). Runs on the head alone, before any
/// body byte is read.
pub fn authorize(expected: &[impl AsRef<str>], got: Option<&str>) -> Result<(), Rejection> {
    let got = got.ok_or(Rejection::Unauthorized("missing Authorization header"))?;
    if matches_any(expected, got) {
        Ok(())
    } else {
        Err(Rejection::Unauthorized(
            "Authorization header does not match",
        ))
    }
}

/// The JSON body answering a verification GET (after [`authorize`] passed).
pub fn challenge_response(challenge: &str) -> Result<String, Rejection> {
    if challenge.is_empty()
        || challenge.len() > MAX_CHALLENGE_LEN
        || challenge.chars().any(char::is_control)
    {
        return Err(bad_request(
            "X-Okta-Verification-Challenge must be 1 to 512 printable characters",
        ));
    }
    Ok(serde_json::json!({ "verification": challenge }).to_string())
}

lenient_record!(Hook { "data" => data: HookData });
lenient_record!(HookData { "events" => events: List<LogEvent, MAX_BATCH> });
lenient_record!(LogEvent {
    "uuid" => uuid: Scalar,
    "eventType" => event_type: Scalar,
    "published" => published: Scalar,
    "target" => target: List<Target, MAX_TARGETS>,
});
lenient_record!(Target { "id" => id: Scalar, "type" => kind: Scalar });

/// Targets looked at per LogEvent; the subjects kept are capped lower still
/// (`MAX_SUBJECT_IDS`), so more would only cost reading.
const MAX_TARGETS: usize = 64;

/// Reads an authorized delivery: one event per element of `data.events`.
///
/// Whole-body problems (not JSON, no `data.events` array, more than [`MAX_BATCH`] events)
/// are errors: the HTTP layer refuses the batch. A LogEvent that cannot be read as an
/// event (no `uuid`, no `eventType`, an unreadable `published`, not an object) is recorded
/// as its own `unknown` event keeping its `uuid` when it has one, so every other event of
/// the batch, revocations included, is recorded normally.
pub fn parse(body: Verified<'_>) -> Result<Delivery, Rejection> {
    let root: Hook = parse_json(body.bytes())?;
    let events = &root.data.events;
    if !events.is_array {
        return Err(bad_request("field `data.events` must be an array"));
    }
    if events.overflow {
        return Err(bad_request(format!(
            "field `data.events` has more than {MAX_BATCH} events"
        )));
    }
    Ok(Delivery {
        events: events.items.iter().map(log_event).collect(),
        ..Delivery::default()
    })
}

/// Relay mode: one request body per element of `data.events`, in the order [`parse`]
/// returns them, so each forwarded event is its own queue entry under its own `uuid`
/// (ordered per subject, retried and replayed alone) and the app never receives a batch
/// once per event it holds. Each body is the delivery's own envelope (every top-level
/// field and every other `data` field byte for byte) with `data.events` holding just that
/// LogEvent byte for byte; an app that reads Okta's batches reads a batch of one. `None`
/// (forward the body as it came) for a batch of one, or a body [`parse`] would refuse.
pub fn relay_bodies(body: Verified<'_>) -> Option<Vec<Vec<u8>>> {
    type Fields = std::collections::BTreeMap<String, Box<serde_json::value::RawValue>>;
    let mut top: Fields = serde_json::from_slice(body.bytes()).ok()?;
    let mut data: Fields = serde_json::from_str(top.get("data")?.get()).ok()?;
    let events: Vec<Box<serde_json::value::RawValue>> =
        serde_json::from_str(data.get("events")?.get()).ok()?;
    if events.len() <= 1 || events.len() > MAX_BATCH {
        return None;
    }
    let mut bodies = Vec::with_capacity(events.len());
    for event in events {
        let one = serde_json::value::RawValue::from_string(format!("[{}]", event.get())).ok()?;
        data.insert("events".to_owned(), one);
        let data_text = serde_json::to_string(&data).ok()?;
        top.insert(
            "data".to_owned(),
            serde_json::value::RawValue::from_string(data_text).ok()?,
        );
        bodies.push(serde_json::to_vec(&top).ok()?);
    }
    Some(bodies)
}

fn log_event(event: &LogEvent) -> ProviderEvent {
    let mut subject_ids = Vec::new();
    for target in &event.target.items {
        let kind = match target.kind.as_str() {
            Some("User") => "user_id",
            Some("UserGroup") => "group_id",
            Some("AppInstance") => "app_id",
            _ => continue,
        };
        push_subject(&mut subject_ids, kind, &target.id);
    }
    let uuid = text(&event.uuid);
    let (Some(delivery_id), Some(event_type), Ok(event_time)) = (
        uuid.clone(),
        text(&event.event_type),
        optional_instant(&event.published, "published"),
    ) else {
        return unknown_record(uuid, subject_ids);
    };
    ProviderEvent {
        delivery_id: Some(delivery_id),
        event_type,
        event_time,
        subject_ids,
        feeds_clock: true,
    }
}

/// `provider = "okta"`: the `Authorization` value(s) Okta sends.
pub const SPEC: super::Spec = super::Spec {
    name: "okta",
    keys: &["authorization"],
    credential_key: "authorization",
    expiry_warning: None,
    intake: |authorization| (std::sync::Arc::new(Okta { authorization }), Vec::new()),
};

/// An Okta stream's configured `Authorization` values.
pub struct Okta {
    pub authorization: Vec<String>,
}

impl super::Provider for Okta {
    fn spec(&self) -> &'static super::Spec {
        &SPEC
    }

    fn has_credentials(&self) -> bool {
        !self.authorization.is_empty()
    }

    /// Okta's one-time verification `GET`: the credential first, then the challenge.
    fn verification(&self, head: &dyn super::RequestHead) -> Option<Result<String, Rejection>> {
        Some(
            authorize(&self.authorization, head.header("authorization")).and_then(|()| {
                let challenge = head
                    .header(CHALLENGE_HEADER)
                    .ok_or_else(|| bad_request("missing X-Okta-Verification-Challenge header"))?;
                challenge_response(challenge)
            }),
        )
    }

    fn check_head(
        &self,
        head: &dyn super::RequestHead,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> Result<HeadChecked, Rejection> {
        authorize(&self.authorization, head.header("authorization")).map(|()| HeadChecked::passed())
    }

    /// Okta signs nothing: the `Authorization` header checked on the head vouches for the
    /// body that came with it.
    fn check_body<'b>(
        &self,
        checked: HeadChecked,
        _head: &dyn super::RequestHead,
        _now: chrono::DateTime<chrono::Utc>,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Rejection> {
        Ok(Verified::by_head(checked, body))
    }

    fn parse(
        &self,
        _head: &dyn super::RequestHead,
        body: Verified<'_>,
    ) -> Result<Delivery, Rejection> {
        parse(body)
    }

    fn relay_bodies(&self, body: Verified<'_>) -> Option<Vec<Vec<u8>>> {
        relay_bodies(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader over a body the tests vouch for (the credential checks have their own
    /// tests).
    fn parse(body: &[u8]) -> Result<Delivery, Rejection> {
        super::parse(Verified::proved(body))
    }

    fn relay_bodies(body: &[u8]) -> Option<Vec<Vec<u8>>> {
        super::relay_bodies(Verified::proved(body))
    }

    /// Shaped like the example delivery on Okta's event hooks page (ids invented).
    const BATCH: &str = r#"{
      "eventType": "com.okta.event_hook",
      "eventTypeVersion": "1.0",
      "cloudEventsVersion": "0.1",
      "source": "https://example.okta.com/api/v1/eventHooks/whoabcdefg",
      "eventId": "b5a188b9-5ece-4636-b041-482ffda96311",
      "eventTime": "2026-12-01T10:00:01.000Z",
      "contentType": "application/json",
      "data": {"events": [
        {"uuid": "7d4f4bd2-0000-11ef-8000-000000000001",
         "published": "2026-12-01T10:00:00.000Z",
         "eventType": "user.lifecycle.deactivate",
         "displayMessage": "Deactivate Okta user",
         "outcome": {"result": "SUCCESS"},
         "target": [{"id": "00u1abcd", "type": "User", "alternateId": "someone@example.com"}]},
        {"uuid": "7d4f4bd2-0000-11ef-8000-000000000002",
         "published": "2026-12-01T10:00:00.500Z",
         "eventType": "group.user_membership.remove",
         "target": [{"id": "00u1abcd", "type": "User"}, {"id": "00g1grp", "type": "UserGroup"}]}
      ]}
    }"#;

    #[test]
    fn every_log_event_is_its_own_event() {
        let delivery = parse(BATCH.as_bytes()).unwrap();
        assert_eq!(delivery.events.len(), 2);
        let first = &delivery.events[0];
        assert_eq!(
            first.delivery_id.as_deref(),
            Some("7d4f4bd2-0000-11ef-8000-000000000001")
        );
        assert_eq!(first.event_type, "user.lifecycle.deactivate");
        assert_eq!(
            first.event_time.unwrap().to_rfc3339(),
            "2026-12-01T10:00:00+00:00"
        );
        assert_eq!(
            first.subject_ids,
            vec![("user_id".to_owned(), "00u1abcd".to_owned())]
        );
        assert_eq!(
            delivery.events[1].subject_ids,
            vec![
                ("user_id".to_owned(), "00u1abcd".to_owned()),
                ("group_id".to_owned(), "00g1grp".to_owned()),
            ]
        );
    }

    #[test]
    fn authorization_must_match_exactly() {
        authorize(&["Bearer s3cret"], Some("Bearer s3cret")).unwrap();
        authorize(&["old", "Bearer s3cret"], Some("Bearer s3cret")).unwrap();
        assert_eq!(
            authorize(&["Bearer s3cret"], Some("Bearer s3cre"))
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(
            authorize(&["Bearer s3cret"], None).unwrap_err().status(),
            401
        );
    }

    #[test]
    fn challenge_is_echoed_as_json() {
        assert_eq!(
            challenge_response("abc-123").unwrap(),
            r#"{"verification":"abc-123"}"#
        );
        assert!(challenge_response("").is_err());
        assert!(challenge_response(&"x".repeat(513)).is_err());
    }

    #[test]
    fn malformed_batches_are_bad_requests() {
        for body in [r#"{"data":{}}"#, r#"{"data":{"events":{}}}"#, "[", "42"] {
            assert_eq!(parse(body.as_bytes()).unwrap_err().status(), 400, "{body}");
        }
        let many = format!(
            r#"{{"data":{{"events":[{}]}}}}"#,
            vec![r#"{"uuid":"u","eventType":"x"}"#; MAX_BATCH + 1].join(",")
        );
        assert!(parse(many.as_bytes()).is_err());
    }

    #[test]
    fn an_unreadable_log_event_is_its_own_unknown_event() {
        let body = r#"{"data":{"events":[
            {"uuid":"u1","eventType":"user.lifecycle.deactivate","target":[{"id":"00u1","type":"User"}]},
            {"eventType":"x"},
            {"uuid":"u3","eventType":"x","published":12},
            7,
            {"uuid":"u5","eventType":"user.lifecycle.deactivate","published":"2026-12-01T10:00:00Z"}
        ]}}"#;
        let delivery = parse(body.as_bytes()).unwrap();
        let got: Vec<(Option<&str>, &str)> = delivery
            .events
            .iter()
            .map(|e| (e.delivery_id.as_deref(), e.event_type.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("u1"), "user.lifecycle.deactivate"),
                (None, "unknown"),
                (Some("u3"), "unknown"),
                (None, "unknown"),
                (Some("u5"), "user.lifecycle.deactivate"),
            ]
        );
        assert_eq!(delivery.events[0].subject_ids[0].1, "00u1");
    }

    #[test]
    fn relay_splits_a_batch_into_one_envelope_per_log_event_keeping_every_byte_of_it() {
        let bodies = relay_bodies(BATCH.as_bytes()).unwrap();
        assert_eq!(bodies.len(), 2);
        for (body, uuid) in bodies.iter().zip(["…0001", "…0002"]) {
            let uuid = uuid.replace('…', "7d4f4bd2-0000-11ef-8000-00000000");
            let delivery = parse(body).unwrap();
            assert_eq!(delivery.events.len(), 1);
            assert_eq!(delivery.events[0].delivery_id.as_deref(), Some(&*uuid));
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            assert_eq!(v["eventType"], "com.okta.event_hook");
            assert_eq!(v["eventId"], "b5a188b9-5ece-4636-b041-482ffda96311");
            assert_eq!(
                v["source"],
                "https://example.okta.com/api/v1/eventHooks/whoabcdefg"
            );
        }
        // The LogEvent's own bytes (spacing included) are kept.
        let first = std::str::from_utf8(&bodies[0]).unwrap();
        assert!(
            first.contains(r#""outcome": {"result": "SUCCESS"}"#),
            "{first}"
        );
        // One event per element, unreadable ones included, as `parse` counts them.
        let odd = r#"{"data":{"events":[{"uuid":"u1","eventType":"x"},7,{"eventType":"y"}]}}"#;
        assert_eq!(relay_bodies(odd.as_bytes()).unwrap().len(), 3);
        // A batch of one, or a body `parse` refuses, is forwarded as it came.
        let one = r#"{"eventId":"e","data":{"events":[{"uuid":"u1","eventType":"x"}]}}"#;
        assert_eq!(relay_bodies(one.as_bytes()), None);
        assert_eq!(relay_bodies(b"[1,2]"), None);
        assert_eq!(relay_bodies(br#"{"data":{"events":{}}}"#), None);
    }
}
