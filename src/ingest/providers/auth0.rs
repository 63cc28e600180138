//! Auth0 Log Streams (custom webhook): a fixed `Authorization` value and batches of log
//! records in one of three content formats.
//!
//! Wire facts (Auth0 docs, "Custom log streams" and "Log event type codes"): the optional
//! Authorization Token is sent as-is in `Authorization`; there is no signature. The stream
//! is configured as JSON Lines, a JSON array, or one JSON object per request; each record is
//! `{log_id, data: {date, type, user_id, …}}` where `type` is a short code such as `s`
//! (login), `ss` (signup), `sdu` (user deleted) or `fdu` (deletion failed). Delivery is at
//! least once, so each record is deduplicated by `log_id`.

use serde_json::Value;

use super::{bad_request, bounded, optional_instant, push_subject};
use super::{Delivery, ProviderEvent, Rejection, MAX_BATCH};

pub use super::okta::authorize;

/// Reads an authorized body in whichever of the three formats it came.
pub fn parse(body: &[u8]) -> Result<Delivery, Rejection> {
    let text = std::str::from_utf8(body).map_err(|_| bad_request("body is not UTF-8"))?;
    let records = records(text)?;
    if records.len() > MAX_BATCH {
        return Err(bad_request(format!(
            "body has more than {MAX_BATCH} log records"
        )));
    }
    let mut delivery = Delivery::default();
    for (i, record) in records.iter().enumerate() {
        delivery.events.push(event(record, i)?);
    }
    Ok(delivery)
}

/// A JSON array or a single object parse as one document; anything else is read as JSON
/// Lines (one record per non-empty line).
fn records(text: &str) -> Result<Vec<Value>, Rejection> {
    if let Ok(document) = serde_json::from_str::<Value>(text) {
        return match document {
            Value::Array(items) => Ok(items),
            Value::Object(_) => Ok(vec![document]),
            _ => Err(bad_request(
                "body must be a log record, an array of them, or JSON Lines",
            )),
        };
    }
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line)
                .map_err(|e| bad_request(format!("line {} is not valid JSON: {e}", n + 1)))
        })
        .take(MAX_BATCH + 1)
        .collect()
}

fn event(record: &Value, i: usize) -> Result<ProviderEvent, Rejection> {
    let log_id = record
        .get("log_id")
        .and_then(Value::as_str)
        .and_then(bounded)
        .ok_or_else(|| {
            bad_request(format!(
                "record {i}: field `log_id` must be a non-empty string"
            ))
        })?;
    let data = record
        .get("data")
        .filter(|d| d.is_object())
        .ok_or_else(|| bad_request(format!("record {i}: field `data` must be an object")))?;
    let event_type = data
        .get("type")
        .and_then(Value::as_str)
        .and_then(bounded)
        .ok_or_else(|| {
            bad_request(format!(
                "record {i}: field `data.type` must be a non-empty string"
            ))
        })?;
    let event_time = optional_instant(data.get("date"), "data.date")?;
    let mut subject_ids = Vec::new();
    push_subject(&mut subject_ids, "user_id", data.get("user_id"));
    push_subject(&mut subject_ids, "client_id", data.get("client_id"));
    Ok(ProviderEvent {
        delivery_id: Some(log_id),
        event_type,
        event_time,
        subject_ids,
        feeds_clock: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_records_name_their_position() {
        let err = parse(format!("{DELETED}\n{{\"data\":{{}}}}").as_bytes()).unwrap_err();
        assert!(err.to_string().contains("record 1"), "{err}");
        let err = parse(format!("{DELETED}\nnot json").as_bytes()).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert_eq!(parse(b"42").unwrap_err().status(), 400);
        assert_eq!(parse(&[0xff, 0xfe]).unwrap_err().status(), 400);
    }
}
