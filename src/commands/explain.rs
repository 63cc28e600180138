//! `hushwatch explain`: when would this stream fire?

use super::{load_or_exit, parse_time};
use crate::clock::{Clock, SystemClock};
use crate::domain::silence::evaluate;
use crate::exit::EXIT_CONFIG;
use chrono::{SecondsFormat, Utc};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;

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
    let eval = evaluate(&calendar, &stream.policy, last, now);
    let rfc = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    Ok(json!({
        "stream": stream.name,
        "last_event": rfc(last),
        "fires_at": eval.fires_at.map(rfc),
        "reason": eval.reason.map(|r| r.as_str()),
        "business_silence_seconds": eval.business_silence.num_seconds(),
        "firing": eval.firing,
    }))
}
