//! `hushwatch audit subject --config F SUBJECT_ID [--format jsonl|text]`:
//! every audit entry about one subject, in chain order: the deliveries that
//! named it (classified grant/revoke/change/neutral) and the reconciliation
//! findings about it (`finding` = the drift kind). Text lines read times in
//! the stream's calendar zone; JSON lines in UTC. The answer to "what were
//! we told about this user, and did we act on it?".

use super::audit::open;
use crate::audit::chain::Entry;
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::store::audit::ExportFilter;
use chrono::{DateTime, SecondsFormat};
use serde_json::json;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

/// The channel reconciliation reports are audited under.
const RECONCILIATION: &str = "reconciliation";

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The subject-id kinds under which `entry` names the subject, stored as
/// any of `forms` (a report's findings are stored as `KIND:INDEX`).
fn names(entry: &Entry, forms: &[String]) -> Vec<String> {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&entry.subject_ids)
        .map(|m| {
            m.into_iter()
                .filter(|(_, v)| v.as_str().is_some_and(|v| forms.iter().any(|f| f == v)))
                .map(|(k, _)| k)
                .collect()
        })
        .unwrap_or_default()
}

pub fn subject(config_path: &Path, subject: &str, format: &str) -> ExitCode {
    let text = match format {
        "jsonl" => false,
        "text" => true,
        other => {
            eprintln!("--format: {other:?} is not jsonl or text");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let (config, reader) = match open(config_path) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let classifier = &config.audit.classifier;
    // With `[store] encryption_key` the log holds veiled tokens
    // (`store::veil`): the subject's token under every configured key
    // matches, and so does its plaintext from before a key was set.
    let forms = config.store.sealer.veil().forms(subject);
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut write_failed = false;
    let result = reader.for_each(&ExportFilter::default(), |stored| {
        let e = &stored.entry;
        let kinds = names(e, &forms);
        if kinds.is_empty() {
            return true;
        }
        let finding = (e.channel == RECONCILIATION).then(|| {
            kinds
                .iter()
                .map(|k| k.split(':').next().unwrap_or(k).to_owned())
                .collect::<Vec<_>>()
                .join(",")
        });
        let access = match &finding {
            Some(_) => "finding".to_owned(),
            None => classifier.classify(&e.event_type).as_str().to_owned(),
        };
        let line = if text {
            // In the stream's calendar zone, as its pages read; JSON keeps UTC.
            let zone = config.zone_of(&e.source);
            let at = DateTime::from_timestamp_millis(e.received_at_ms)
                .map(|t| crate::status::format::local_stamp_secs(t, zone))
                .unwrap_or_default();
            format!(
                "{}  {}  {}  {}  {}  delivery {}{}",
                at,
                e.source,
                e.channel,
                access,
                e.event_type,
                e.delivery_id.as_deref().unwrap_or("-"),
                finding
                    .as_deref()
                    .map(|f| format!("  ({f})"))
                    .unwrap_or_default()
            )
        } else {
            json!({
                "seq": e.seq,
                "received_at": rfc3339(e.received_at_ms),
                "stream": e.source,
                "channel": e.channel,
                "delivery_id": e.delivery_id,
                "event_type": e.event_type,
                "event_time": e.event_time_ms.map(rfc3339),
                "access": access,
                "finding": finding,
                "named_as": kinds,
            })
            .to_string()
        };
        // A closed pipe (e.g. `| head`) ends the listing quietly.
        write_failed = writeln!(out, "{line}").is_err();
        !write_failed
    });
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("audit subject failed: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
