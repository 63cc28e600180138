//! Auth0 Log Streams (custom webhook): a fixed `Authorization` value and batches of log
//! records in one of three content formats.
//!
//! Wire facts (Auth0 docs, "Custom log streams" and "Log event type codes"): the optional
//! Authorization Token is sent as-is in `Authorization`; there is no signature. The stream
//! is configured as JSON Lines, a JSON array, or one JSON object per request; each record is
//! `{log_id, data: {date, type, user_id, …}}` where `type` is a short code such as `s`
//! (login), `ss` (signup), `sdu` (user deleted) or `fdu` (deletion failed). Delivery is at
//! least once, so each record is deduplicated by `log_id`.

use super::lenient::{lenient_record, List, Scalar};
use super::{bad_request, optional_instant, parse_json, push_subject, text};
use super::{unknown_record, Delivery, ProviderEvent, Rejection, MAX_BATCH};
use crate::ingest::verified::{HeadChecked, Verified};

pub use super::okta::authorize;

lenient_record!(Record { "log_id" => log_id: Scalar, "data" => data: LogData });
lenient_record!(LogData {
    "date" => date: Scalar,
    "type" => kind: Scalar,
    "user_id" => user_id: Scalar,
    "client_id" => client_id: Scalar,
});

/// Reads an authorized body in whichever of the three formats it came.
///
/// Whole-body problems are errors, so the HTTP layer refuses the batch: not UTF-8, an
/// array that is not valid JSON, a document that is neither a record nor an array, more
/// than [`MAX_BATCH`] records. A record that cannot be read as an event (no `log_id`, no
/// `data.type`, a `data.date` that is not an RFC 3339 string, a JSON Lines line that is
/// not JSON) is recorded as its own `unknown` event keeping its `log_id` when it has one,
/// so every other record of the batch, revocations included, is recorded normally.
pub fn parse(body: Verified<'_>) -> Result<Delivery, Rejection> {
    let body = body.bytes();
    let text = std::str::from_utf8(body).map_err(|_| bad_request("body is not UTF-8"))?;
    let too_many = || bad_request(format!("body has more than {MAX_BATCH} log records"));
    let records: Vec<Option<Record>> = if text.trim_start().starts_with('[') {
        let list: List<Record, MAX_BATCH> = parse_json(body)?;
        if list.overflow {
            return Err(too_many());
        }
        list.items.into_iter().map(Some).collect()
    } else if let Ok(record) = serde_json::from_str::<Record>(text) {
        if !record.is_object {
            return Err(bad_request(
                "body must be a log record, an array of them, or JSON Lines",
            ));
        }
        vec![Some(record)]
    } else {
        // JSON Lines: each line is read on its own, so one bad line costs only itself.
        let mut lines = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if lines.len() == MAX_BATCH {
                return Err(too_many());
            }
            lines.push(
                serde_json::from_str::<Record>(line)
                    .ok()
                    .filter(|r| r.is_object),
            );
        }
        lines
    };
    Ok(Delivery {
        events: records.iter().map(|r| event(r.as_ref())).collect(),
        ..Delivery::default()
    })
}

/// Relay mode: one request body per record, in [`parse`]'s order, in the format the body
/// came in (a JSON array of one, or one JSON Lines line), each record byte for byte, so
/// each forwarded record is its own queue entry under its own `log_id` and the app never
/// receives a batch once per record. `None` (forward the body as it came) for one record,
/// or a body [`parse`] would refuse.
pub fn relay_bodies(body: Verified<'_>) -> Option<Vec<Vec<u8>>> {
    let text = std::str::from_utf8(body.bytes()).ok()?;
    let bodies: Vec<Vec<u8>> = if text.trim_start().starts_with('[') {
        let records: Vec<Box<serde_json::value::RawValue>> = serde_json::from_str(text).ok()?;
        records
            .iter()
            .map(|r| format!("[{}]", r.get()).into_bytes())
            .collect()
    } else if serde_json::from_str::<Record>(text).is_ok_and(|r| r.is_object) {
        return None;
    } else {
        // The lines `parse` reads, each as a JSON Lines body of one line.
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n").into_bytes())
            .collect()
    };
    (bodies.len() > 1 && bodies.len() <= MAX_BATCH).then_some(bodies)
}

fn event(record: Option<&Record>) -> ProviderEvent {
    let Some(record) = record else {
        return unknown_record(None, Vec::new());
    };
    let data = &record.data;
    let mut subject_ids = Vec::new();
    push_subject(&mut subject_ids, "user_id", &data.user_id);
    push_subject(&mut subject_ids, "client_id", &data.client_id);
    let log_id = text(&record.log_id);
    let (Some(delivery_id), Some(event_type), Ok(event_time)) = (
        log_id.clone(),
        text(&data.kind).filter(|_| data.is_object),
        optional_instant(&data.date, "data.date"),
    ) else {
        return unknown_record(log_id, subject_ids);
    };
    ProviderEvent {
        delivery_id: Some(delivery_id),
        event_type,
        event_time,
        subject_ids,
        feeds_clock: true,
    }
}

/// `provider = "auth0"`: the Authorization Token the log stream sends.
pub const SPEC: super::Spec = super::Spec {
    name: "auth0",
    keys: &["authorization"],
    credential_key: "authorization",
    expiry_warning: None,
    intake: |authorization| (std::sync::Arc::new(Auth0 { authorization }), Vec::new()),
};

/// An Auth0 stream's configured `Authorization` values.
pub struct Auth0 {
    pub authorization: Vec<String>,
}

impl super::Provider for Auth0 {
    fn spec(&self) -> &'static super::Spec {
        &SPEC
    }

    fn has_credentials(&self) -> bool {
        !self.authorization.is_empty()
    }

    /// The same fixed-header check as Okta's.
    fn check_head(
        &self,
        head: &dyn super::RequestHead,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> Result<HeadChecked, Rejection> {
        super::okta::authorize(&self.authorization, head.header("authorization"))
            .map(|()| HeadChecked::passed())
    }

    /// Auth0 signs nothing: the `Authorization` header checked on the head vouches for the
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

    const DELETED: &str = r#"{"log_id":"90020261201100000000000000000000000000000000000001","data":{"date":"2026-12-01T10:00:00.000Z","type":"sdu","description":"User deleted","client_id":"cli_1","user_id":"auth0|u1"}}"#;
    const LOGIN: &str = r#"{"log_id":"90020261201100000000000000000000000000000000000002","data":{"date":"2026-12-01T10:00:01.000Z","type":"s","user_id":"auth0|u2"}}"#;

    fn ids(delivery: &Delivery) -> Vec<&str> {
        delivery
            .events
            .iter()
            .filter_map(|e| e.delivery_id.as_deref())
            .collect()
    }

    #[test]
    fn all_three_content_formats_read_the_same() {
        let array = format!("[{DELETED},{LOGIN}]");
        let lines = format!("{DELETED}\n{LOGIN}\n");
        let a = parse(array.as_bytes()).unwrap();
        let b = parse(lines.as_bytes()).unwrap();
        assert_eq!(a, b);
        assert_eq!(ids(&a).len(), 2);
        let single = parse(DELETED.as_bytes()).unwrap();
        assert_eq!(single.events[0].event_type, "sdu");
        assert_eq!(
            single.events[0].subject_ids,
            vec![
                ("user_id".to_owned(), "auth0|u1".to_owned()),
                ("client_id".to_owned(), "cli_1".to_owned()),
            ]
        );
        assert_eq!(
            single.events[0].event_time.unwrap().to_rfc3339(),
            "2026-12-01T10:00:00+00:00"
        );
    }

    #[test]
    fn a_bad_record_is_its_own_unknown_event_and_the_rest_are_kept() {
        let numeric_date =
            r#"{"log_id":"bad1","data":{"date":1764583200000,"type":"sdu","user_id":"auth0|u3"}}"#;
        let no_id = r#"{"data":{"date":"2026-12-01T10:00:00.000Z","type":"sdu"}}"#;
        for body in [
            format!("[{DELETED},{numeric_date},{no_id},{LOGIN}]"),
            format!("{DELETED}\n{numeric_date}\n{no_id}\nnot json\n{LOGIN}\n"),
        ] {
            let delivery = parse(body.as_bytes()).unwrap();
            let got: Vec<(Option<&str>, &str)> = delivery
                .events
                .iter()
                .map(|e| (e.delivery_id.as_deref(), e.event_type.as_str()))
                .collect();
            assert_eq!(got[0].1, "sdu");
            assert_eq!(got[1], (Some("bad1"), "unknown"));
            assert_eq!(got[2], (None, "unknown"));
            assert_eq!(got.last().unwrap().1, "s");
            assert_eq!(
                delivery.events[1].subject_ids[0],
                ("user_id".to_owned(), "auth0|u3".to_owned())
            );
        }
    }

    #[test]
    fn whole_body_problems_are_bad_requests() {
        assert_eq!(parse(b"42").unwrap_err().status(), 400);
        assert_eq!(parse(&[0xff, 0xfe]).unwrap_err().status(), 400);
        assert_eq!(parse(b"[{\"log_id\":").unwrap_err().status(), 400);
        let many = format!("[{}]", vec![LOGIN; MAX_BATCH + 1].join(","));
        assert!(parse(many.as_bytes()).is_err());
        let lines = vec![LOGIN; MAX_BATCH + 1].join("\n");
        assert!(parse(lines.as_bytes()).is_err());
    }

    #[test]
    fn relay_splits_a_batch_into_one_body_per_record_in_the_format_it_came() {
        let array = format!("[{DELETED}, {LOGIN}]");
        let lines = format!("{DELETED}\n\n{LOGIN}\n");
        for body in [array, lines] {
            let bodies = relay_bodies(body.as_bytes()).unwrap();
            let batch = parse(body.as_bytes()).unwrap();
            assert_eq!(bodies.len(), batch.events.len());
            for (one, event) in bodies.iter().zip(&batch.events) {
                let single = parse(one).unwrap();
                assert_eq!(single.events, vec![event.clone()]);
                assert!(std::str::from_utf8(one)
                    .unwrap()
                    .contains(&*event.delivery_id.clone().unwrap()));
            }
        }
        assert_eq!(relay_bodies(DELETED.as_bytes()), None);
        assert_eq!(relay_bodies(format!("[{DELETED}]").as_bytes()), None);
        assert_eq!(relay_bodies(b"[{\"log_id\":"), None);
    }
}
