//! `hushwatch explain`: when would this stream fire?

use super::{load_or_exit, parse_time};
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, StreamConfig};
use crate::domain::adaptive::{days_known, effective_threshold, Effective};
use crate::domain::gap_sketch::GapSketch;
use crate::domain::silence::{evaluate, SilencePolicy};
use crate::exit::EXIT_CONFIG;
use crate::service::adaptive::{threshold_json, window_start};
use crate::service::STATE_FILE;
use crate::store::Store;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn run(config_path: &Path, stream: &str, last_event: &str, now: Option<&str>) -> ExitCode {
    match explain(config_path, stream, last_event, now) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn explain(
    config_path: &Path,
    stream_name: &str,
    last_event: &str,
    now: Option<&str>,
) -> Result<serde_json::Value, ExitCode> {
    let config = load_or_exit(config_path)?;
    // A templated stream (`[streams."PREFIX*"]`) is explained from its template.
    let templated = config.templates.stream(stream_name);
    let Some(stream) = config.streams.get(stream_name).or(templated.as_ref()) else {
        let known: Vec<&str> = config.streams.keys().map(String::as_str).collect();
        eprintln!(
            "--stream: no stream named {stream_name:?} (configured: {})",
            known.join(", ")
        );
        return Err(ExitCode::from(EXIT_CONFIG));
    };
    let last = parse_time("--last-event", last_event)?;
    let now = match now {
        Some(text) => parse_time("--now", text)?,
        None => SystemClock.now(),
    };
    let calendar = config.calendar_of(stream);
    let effective = learned_threshold(&config, stream, now);
    let policy = SilencePolicy {
        threshold: effective.threshold,
        ..stream.policy
    };
    let eval = evaluate(&calendar, &policy, last, now);
    let rfc = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    let mut out = json!({
        "stream": stream.name,
        "last_event": rfc(last),
        "fires_at": eval.fires_at.map(rfc),
        "reason": eval.reason.map(|r| r.as_str()),
        "business_silence_seconds": eval.business_silence.num_seconds(),
        "firing": eval.firing,
    });
    if let (Some(out), serde_json::Value::Object(t)) =
        (out.as_object_mut(), threshold_json(&effective))
    {
        out.extend(t);
    }
    Ok(out)
}

/// The effective threshold at `now` from what the running sidecar learned
/// and persisted (issue #18). Without `[adaptive]`, or when no state
/// exists yet, the configured threshold; a state that cannot be read is
/// said on stderr and the configured threshold is explained.
fn learned_threshold(config: &Config, stream: &StreamConfig, now: DateTime<Utc>) -> Effective {
    let configured = Effective::configured(stream.policy.threshold);
    let Some(policy) = &stream.adaptive else {
        return configured;
    };
    let path = config.server.data_dir.join(STATE_FILE);
    // Never create a state file just to explain.
    if config.store.postgres.is_none() && !path.exists() {
        return configured;
    }
    let today = now.date_naive();
    let read = async {
        let store = Store::open_configured(&config.store, path, Arc::new(SystemClock)).await?;
        let counts = store.gap_counts(window_start(today)).await;
        let _ = store.close().await;
        counts
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let counts = match runtime.map(|rt| rt.block_on(read)) {
        Ok(Ok(counts)) => counts,
        Ok(Err(e)) => {
            eprintln!("note: learned gaps unreadable ({e}); explaining the configured threshold");
            return configured;
        }
        Err(e) => {
            eprintln!("note: {e}; explaining the configured threshold");
            return configured;
        }
    };
    let mut sketch = GapSketch::new();
    let mut first = None;
    for c in counts.iter().filter(|c| c.stream == stream.name) {
        first = first
            .or(Some(c.day))
            .map(|f: chrono::NaiveDate| f.min(c.day));
        let n = u64::try_from(c.count).unwrap_or(0);
        sketch.merge(&GapSketch::from_pairs(&[(c.bucket, n)]));
    }
    effective_threshold(
        stream.policy.threshold,
        Some(policy),
        &sketch,
        days_known(first, today),
    )
}
