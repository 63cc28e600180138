//! `hushwatch crosscheck --config F --stream X [--format text|json]
//! [--dry-run]`: one cross-check poll of the stream now (issue #45,
//! docs/src/crosscheck.md), through the same `service::crosscheck::poll_once`
//! a scheduled poll runs: the cursor, snapshot and findings it stores are
//! the stream's own, so a finding printed here is not reported again.
//! `--dry-run` runs the same poll through `poll_dry_run`, which stores and
//! pages nothing; `--restart` first forgets the event-log checkpoint (a
//! checkpoint the provider no longer keeps fails every poll until then).
//! Prints the findings (text table or one JSON document);
//! exit 0 when the poll found nothing, 1 when it found something or failed,
//! 2 on a config error.

use crate::clock::{Clock, SystemClock};
use crate::domain::crosscheck::{Finding, When};
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::service::crosscheck::{poll_dry_run, poll_once, PollFailure, PollReport};
use crate::service::STATE_FILE;
use crate::store::Store;
use chrono::SecondsFormat;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn run(
    config_path: &Path,
    stream: &str,
    format: &str,
    dry_run: bool,
    restart: bool,
) -> ExitCode {
    let json = match format {
        "text" => false,
        "json" => true,
        other => {
            eprintln!("--format: {other:?} is not text or json");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let config = match super::load_or_exit(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(settings) = config.streams.get(stream) else {
        eprintln!(
            "--stream: {stream:?} is not a stream of {}",
            config_path.display()
        );
        return ExitCode::from(EXIT_CONFIG);
    };
    let Some(crosscheck) = settings.crosscheck.clone() else {
        eprintln!("streams.{stream}: has no [streams.{stream}.crosscheck] table");
        return ExitCode::from(EXIT_CONFIG);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let outcome = runtime.block_on(async {
        let path = config.server.data_dir.join(STATE_FILE);
        let store = Store::open_configured(&config.store, path, clock.clone())
            .await
            .map_err(|e| format!("cannot open the store: {e}"))?;
        let result = async {
            // A dry run only reads: a stream not watched yet is not
            // inserted, and its watch would start now.
            let rows = if dry_run {
                store.streams().await.map(|all| {
                    all.into_iter()
                        .filter(|r| r.name == stream)
                        .collect::<Vec<_>>()
                })
            } else {
                store
                    .watch_streams(vec![stream.to_owned()], clock.now())
                    .await
            }
            .map_err(|e| format!("storage: {e}"))?;
            let watch_started_at = rows
                .first()
                .map_or_else(|| clock.now(), |r| r.watch_started_at);
            if restart {
                // The operator has dealt with the window the provider no
                // longer keeps; the poll below starts from the oldest log
                // it still has (at most the watch start).
                let row = store
                    .crosscheck_state(stream.to_owned())
                    .await
                    .map_err(|e| format!("storage: {e}"))?;
                store
                    .crosscheck_finish_poll(
                        stream.to_owned(),
                        row,
                        crate::store::crosscheck::PollEnd::Restart,
                    )
                    .await
                    .map_err(|e| format!("storage: {e}"))?;
                eprintln!("{stream}: the cross-check checkpoint is cleared; polling from the watch start (at most the provider's retention back)");
            }
            let source = crate::service::crosscheck::source(&crosscheck);
            macro_rules! poll {
                ($f:ident) => {
                    $f(
                        &store,
                        stream,
                        &crosscheck,
                        &source,
                        &config.audit.classifier,
                        &config.store.sealer,
                        watch_started_at,
                        clock.as_ref(),
                    )
                    .await
                };
            }
            let report = if dry_run {
                poll!(poll_dry_run)
            } else {
                poll!(poll_once)
            };
            report.map_err(|e| match e {
                PollFailure::Provider(e) => {
                    format!("the {} API: {e}", crosscheck.provider.title())
                }
                PollFailure::Store(e) => format!("storage: {e}"),
            })
        }
        .await;
        let report = match result {
            Ok(report) if crosscheck.heal && !dry_run && !report.findings.is_empty() => report,
            other => {
                let _ = store.close().await;
                return other.map(|r| (r, Vec::new()));
            }
        };
        // `heal = true`: what was missed goes to the app through the relay's
        // queue, recorded through the same ingest path as a webhook; the
        // serving process forwards it. A dry run heals nothing.
        let app = crate::service::app::App::new(config.clone(), store, clock.clone())
            .await
            .map_err(|e| format!("storage: {e}"))?;
        let healed = crate::service::crosscheck_heal::heal(&app, &app, stream, &heal_items(&report))
            .await
            .map_err(|e| format!("storage (heal): {e}"));
        let _ = app.store().close().await;
        Ok((report, healed?))
    });
    match outcome {
        Err(reason) => {
            eprintln!("crosscheck of stream {stream} failed: {reason}");
            ExitCode::from(EXIT_FAILURE)
        }
        Ok((report, healed)) => {
            if json {
                let mut out = json_report(stream, &report, dry_run);
                out["healed"] = json!(healed);
                println!("{out}");
            } else {
                print!("{}", text_report(stream, &report, dry_run));
                for key in &healed {
                    println!("healed {key}: the missed event goes to the app");
                }
            }
            if report.findings.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

fn when(f: &Finding) -> (Option<String>, Option<String>) {
    let t = |d: chrono::DateTime<chrono::Utc>| d.to_rfc3339_opts(SecondsFormat::Secs, true);
    match f.when {
        When::At(at) => (Some(t(at)), None),
        When::Between(a, b) => (Some(t(a)), Some(t(b))),
    }
}

/// Each finding with its logged body (WorkOS), as `heal` takes them.
fn heal_items(report: &PollReport) -> Vec<crate::service::crosscheck_heal::HealItem> {
    report
        .findings
        .iter()
        .map(|f| crate::service::crosscheck_heal::HealItem {
            finding: f.clone(),
            body: report.bodies.get(&f.key).cloned(),
        })
        .collect()
}

fn json_report(stream: &str, report: &PollReport, dry_run: bool) -> serde_json::Value {
    let findings: Vec<serde_json::Value> = report
        .findings
        .iter()
        .map(|f| {
            let (from, until) = when(f);
            json!({
                "key": f.key,
                "new": report.new_keys.contains(&f.key),
                "direction": f.direction.as_str(),
                "event_type": f.event_type,
                "subject": f.subject,
                "organization": f.organization,
                "provider_id": f.provider_id,
                "at": if until.is_none() { from.clone() } else { None },
                "from": if until.is_some() { from } else { None },
                "until": until,
            })
        })
        .collect();
    json!({
        "stream": stream,
        "dry_run": dry_run,
        "baseline": report.baseline,
        "pending": report.pending,
        "committed": report.committed,
        "findings": findings,
    })
}

fn text_report(stream: &str, report: &PollReport, dry_run: bool) -> String {
    let mut out = String::new();
    if dry_run {
        out.push_str("dry run: nothing was stored and nothing was paged\n");
    }
    if report.baseline && dry_run {
        out.push_str(&format!(
            "stream {stream}: no baseline stored yet; a poll without --dry-run stores this listing as the baseline\n"
        ));
        return out;
    }
    if report.baseline {
        out.push_str(&format!(
            "stream {stream}: first listing stored as the baseline; the next poll compares with it\n"
        ));
        return out;
    }
    out.push_str(&format!(
        "stream {stream}: {} finding(s), {} new; {} change(s) waiting for the next poll\n",
        report.findings.len(),
        report.new_keys.len(),
        report.pending
    ));
    if report.findings.is_empty() {
        return out;
    }
    out.push_str("DIRECTION  EVENT TYPE                      SUBJECT                         ORGANIZATION         WHEN\n");
    for f in &report.findings {
        let (from, until) = when(f);
        let at = match until {
            Some(until) => format!("{} .. {until}", from.unwrap_or_default()),
            None => from.unwrap_or_default(),
        };
        out.push_str(&format!(
            "{:<10} {:<31} {:<31} {:<20} {at}\n",
            f.direction.as_str(),
            f.event_type,
            f.subject,
            f.organization.as_deref().unwrap_or("-"),
        ));
    }
    out
}
