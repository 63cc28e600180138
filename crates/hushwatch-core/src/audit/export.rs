//! One audit record per line, for auditors' tools: JSON Lines or CSV.

use super::chain::{to_hex, Entry};
use super::classify::Access;
use chrono::{DateTime, SecondsFormat};
use serde_json::json;

pub const CSV_HEADER: &str = "seq,received_at,stream,channel,delivery_id,event_type,event_time,access,subject_ids,body_sha256,signature_verified,hash,prev_hash";

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

pub fn jsonl(e: &Entry, hash: &[u8; 32], access: Access) -> String {
    let subjects: serde_json::Value = serde_json::from_str(&e.subject_ids).unwrap_or(json!({}));
    json!({
        "seq": e.seq,
        "received_at": rfc3339(e.received_at_ms),
        "stream": e.source,
        "channel": e.channel,
        "delivery_id": e.delivery_id,
        "event_type": e.event_type,
        "event_time": e.event_time_ms.map(rfc3339),
        "access": access.as_str(),
        "subject_ids": subjects,
        "body_sha256": e.body_sha256,
        "signature_verified": e.signature_verified,
        "hash": to_hex(hash),
        "prev_hash": to_hex(&e.prev_hash),
    })
    .to_string()
}

/// RFC 4180 quoting: every field quoted, quotes doubled.
fn quote(field: &str) -> String {
    format!("\"{}\"", field.replace('"', "\"\""))
}

pub fn csv(e: &Entry, hash: &[u8; 32], access: Access) -> String {
    [
        e.seq.to_string(),
        rfc3339(e.received_at_ms),
        e.source.clone(),
        e.channel.clone(),
        e.delivery_id.clone().unwrap_or_default(),
        e.event_type.clone(),
        e.event_time_ms.map(rfc3339).unwrap_or_default(),
        access.as_str().to_string(),
        e.subject_ids.clone(),
        e.body_sha256.clone().unwrap_or_default(),
        e.signature_verified.to_string(),
        to_hex(hash),
        to_hex(&e.prev_hash),
    ]
    .iter()
    .map(|f| quote(f))
    .collect::<Vec<_>>()
    .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{sample, GENESIS};

    #[test]
    fn csv_quotes_hostile_values() {
        let mut e = sample(1, GENESIS);
        e.event_type = "a\",\"b".into();
        let line = csv(&e, &e.hash(), Access::Revoke);
        assert!(line.contains("\"a\"\",\"\"b\""), "{line}");
        assert_eq!(CSV_HEADER.split(',').count(), 13);
    }

    #[test]
    fn jsonl_has_every_field() {
        let e = sample(3, GENESIS);
        let v: serde_json::Value =
            serde_json::from_str(&jsonl(&e, &e.hash(), Access::Revoke)).unwrap();
        for k in CSV_HEADER.split(',') {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["subject_ids"]["user_id"], "user_1");
    }
}
