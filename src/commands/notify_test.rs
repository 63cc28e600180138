//! `hushwatch notify-test`: sends one clearly labelled test page through a
//! configured notifier, by the same code path as real pages (one attempt,
//! the notifier's own timeout), and reports what happened.

use super::load_or_exit;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::notify::{Outcome, Page, Sender, SEVERITY};
use crate::store::PageKind;
use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::ExitCode;

pub fn run(config_path: &Path, notifier: &str) -> ExitCode {
    let config = match load_or_exit(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(n) = config.notifiers.get(notifier) else {
        let known: Vec<&str> = config.notifiers.keys().map(String::as_str).collect();
        eprintln!(
            "--notifier: no notifier named {notifier:?} (defined: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
        return ExitCode::from(EXIT_CONFIG);
    };
    let runtime = match super::runtime_or(EXIT_FAILURE) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let now = SystemClock.now();
    let page = test_page(&config, notifier, now);
    let outcome = runtime.block_on(Sender::new().send(n, &page, now));
    let what = format!("{notifier} ({})", n.kind.name());
    match outcome {
        Outcome::Delivered => {
            eprintln!("notify-test: {what}: delivered test page {}", page.key);
            ExitCode::SUCCESS
        }
        Outcome::Retry { reason, .. } => {
            eprintln!("notify-test: {what}: NOT delivered (would be retried): {reason}");
            ExitCode::from(EXIT_FAILURE)
        }
        Outcome::Permanent { reason, .. } => {
            eprintln!("notify-test: {what}: NOT delivered (permanent failure): {reason}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// A firing page marked as a test everywhere it shows (subject, summary,
/// `test` fields and labels), with a fresh key that no real page can have.
pub fn test_page(config: &Config, notifier: &str, now: DateTime<Utc>) -> Page {
    let stream = config
        .streams
        .values()
        .find(|s| s.notify.iter().any(|n| n == notifier));
    let digest = Sha256::new()
        .chain_update(now.timestamp_nanos_opt().unwrap_or_default().to_be_bytes())
        .chain_update(std::process::id().to_be_bytes())
        .chain_update(notifier.as_bytes())
        .finalize();
    let hex = crate::audit::chain::to_hex(&digest[..8]);
    let (calendar, timezone, business_hours) = crate::notify::calendar_facts(config, stream);
    Page {
        key: format!("hw-test-{hex}"),
        alert_id: format!("test-{hex}"),
        alert_kind: crate::domain::alert_kind::AlertKind::Silence,
        stream: stream.map_or_else(|| "notify-test".to_string(), |s| s.name.clone()),
        firing: true,
        kind: PageKind::Page,
        at: now,
        started_at: now,
        resolved_at: None,
        silent_since: Some(now - TimeDelta::hours(1)),
        resumed_at: None,
        business_silence: None,
        summary: "test page from `hushwatch notify-test`, no action needed".to_string(),
        severity: SEVERITY.to_string(),
        source: None,
        endpoint_id: None,
        calendar,
        timezone,
        business_hours,
        threshold: stream.map_or(TimeDelta::hours(1), |s| s.policy.threshold),
        max_silence: stream.and_then(|s| s.policy.max_silence),
        test: true,
        ack_url: None,
        runbook_base: config.server.runbook_base_url.clone(),
        config_path: config.path_for_commands(),
        relay_delivered: false,
    }
}
