//! `hushwatch audit subject --config F SUBJECT_ID [--format jsonl|text]`:
//! every audit entry about one subject, in chain order: the deliveries that
//! named it (classified grant/revoke/change/neutral) and the reconciliation
//! findings about it (`finding` = the drift kind). Text lines read times in
//! the stream's calendar zone; JSON lines in UTC. The answer to "what were
//! we told about this user, and did we act on it?".
//!
//! After the log, the cross-check's findings about the subject (issue #45:
//! what the provider's own API shows and no webhook said, as the subject or
//! as its organization), each with its state: `open`, `healed` (hushwatch
//! delivered it to the app; the heal's own audit entry is in the log above,
//! channel `crosscheck`) or `acknowledged`. Text lines start `crosscheck`;
//! JSON lines have `"channel": "crosscheck"` and `"finding"` set to the
//! direction.

use super::audit::open;
use crate::audit::chain::Entry;
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::store::audit::ExportFilter;
use crate::store::crosscheck::StoredFinding;
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
    drop(out);
    // The reader holds a read transaction; the findings are read after it.
    drop(reader);
    if let Err(e) = result {
        eprintln!("audit subject failed: {e}");
        return ExitCode::from(EXIT_FAILURE);
    }
    if write_failed {
        return ExitCode::SUCCESS;
    }
    let findings = match crosscheck_findings(&config, forms) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("audit subject: cross-check findings unreadable: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let veil = config.store.sealer.veil();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (stream, f) in findings {
        let line = finding_line(&config, &stream, &f, veil, text);
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}

/// Findings listed for one subject at most (a subject in more is rare;
/// the cap bounds the command's work).
const MAX_FINDINGS: usize = 1_000;

/// The cross-check's stored findings about any of `forms`, when a stream
/// is cross-checked (otherwise none, and the store is not opened).
fn crosscheck_findings(
    config: &crate::config::Config,
    forms: Vec<String>,
) -> Result<Vec<(String, StoredFinding)>, String> {
    if !config.streams.values().any(|s| s.crosscheck.is_some()) {
        return Ok(Vec::new());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let clock: std::sync::Arc<dyn crate::clock::Clock> =
            std::sync::Arc::new(crate::clock::SystemClock);
        let path = config.server.data_dir.join(crate::service::STATE_FILE);
        let store = crate::store::Store::open_configured(&config.store, path, clock)
            .await
            .map_err(|e| e.to_string())?;
        let found = store
            .crosscheck_subject_findings(forms, MAX_FINDINGS)
            .await
            .map_err(|e| e.to_string());
        let _ = store.close().await;
        found
    })
}

/// One finding as a line of the listing: the same columns as a log entry
/// (text), or a JSON line beside the log's.
fn finding_line(
    config: &crate::config::Config,
    stream: &str,
    f: &StoredFinding,
    veil: &crate::store::veil::Veil,
    text: bool,
) -> String {
    use crate::domain::crosscheck::When;
    let g = &f.finding;
    let subject = veil.reveal(&g.subject).into_owned();
    let organization = g
        .organization
        .as_deref()
        .map(|o| veil.reveal(o).into_owned());
    let utc = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
    if text {
        let zone = config.zone_of(stream);
        let local = |t| crate::status::format::local_stamp_secs(t, zone);
        let when = match g.when {
            When::At(t) => format!("provider time {}", local(t)),
            When::Between(a, b) => format!("gone or added between {} and {}", local(a), local(b)),
        };
        format!(
            "{}  {}  crosscheck  {}  {}  {}{}  {when}  {}  (finding {})",
            local(f.found_at),
            stream,
            g.direction.as_str(),
            g.event_type,
            subject,
            organization
                .as_deref()
                .map(|o| format!(" in {o}"))
                .unwrap_or_default(),
            f.state,
            g.key,
        )
    } else {
        let (at, from, until) = match g.when {
            When::At(t) => (Some(utc(t)), None, None),
            When::Between(a, b) => (None, Some(utc(a)), Some(utc(b))),
        };
        json!({
            "found_at": utc(f.found_at),
            "stream": stream,
            "channel": "crosscheck",
            "finding": g.direction.as_str(),
            "key": g.key,
            "event_type": g.event_type,
            "subject": subject,
            "organization": organization,
            "provider_id": g.provider_id,
            "at": at,
            "from": from,
            "until": until,
            "state": f.state,
        })
        .to_string()
    }
}
