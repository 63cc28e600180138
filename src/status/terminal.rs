//! `hushwatch status` output: the status page's overview as a plain text
//! table, with ANSI colour only when the caller says the output is a TTY.

use super::format::{displayable, human_duration, zoned};
use super::model::StatusDoc;
use super::page::silence_words;
use chrono::TimeDelta;
use std::fmt::Write;

const RED: &str = "\x1b[1;31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

fn paint(text: &str, colour: &str, on: bool) -> String {
    if on {
        format!("{colour}{text}{RESET}")
    } else {
        text.to_string()
    }
}

/// Characters in `s` as a terminal shows them (no escapes are counted:
/// cells are padded before they are painted).
fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(width.saturating_sub(n)))
}

/// Strips control and bidi/format characters (the same ones the HTML page
/// drops), so an event type from a request body cannot move the cursor,
/// recolour the operator's terminal or reorder what it shows.
fn clean(s: &str) -> String {
    displayable(s)
}

pub fn render(doc: &StatusDoc, colour: bool) -> String {
    let now = doc.now;
    let mut out = String::new();
    let headline = if doc.all_ok() {
        paint("OK", GREEN, colour)
    } else {
        paint("NOT OK", RED, colour)
    };
    let firing = doc.streams.iter().filter(|s| s.firing()).count();
    let _ = writeln!(
        out,
        "hushwatch {headline}: {firing} of {} stream(s) firing, as of {}",
        doc.streams.len(),
        now.format("%Y-%m-%d %H:%M:%S UTC")
    );
    if !doc.storage_ok {
        let _ = writeln!(
            out,
            "{}",
            paint("storage is failing: events are refused", RED, colour)
        );
    }
    let header = [
        "STREAM",
        "STATE",
        "SILENCE/THRESHOLD",
        "CLOCK",
        "LAST EVENT",
    ];
    let rows: Vec<[String; 5]> = doc
        .streams
        .iter()
        .map(|s| {
            let tz = s.tz();
            let state = if s.firing() { "FIRING" } else { "OK" };
            let bar = format!(
                "{}/{} ({:.0}%)",
                human_duration(TimeDelta::seconds(s.business_silence_seconds)),
                human_duration(TimeDelta::seconds(s.threshold_seconds)),
                s.fraction() * 100.0
            );
            let clock = if s.in_business_hours {
                "running".to_string()
            } else if let Some(t) = s.clock_paused_until {
                format!("paused until {}", zoned(t, tz, now))
            } else {
                "paused".to_string()
            };
            let last = match s.last_event_at {
                Some(t) => format!(
                    "{} {} ago",
                    clean(s.last_event_type.as_deref().unwrap_or("?")),
                    human_duration(now - t)
                ),
                None => "none yet".to_string(),
            };
            [clean(&s.name), state.to_string(), bar, clock, last]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 5], state_colour: Option<&str>| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let padded = pad(cell, widths[i]);
            match (i, state_colour) {
                (1, Some(c)) => l.push_str(&paint(&padded, c, colour)),
                _ => l.push_str(&padded),
            }
            l.push_str("  ");
        }
        l.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(&header.map(String::from), None));
    for (s, r) in doc.streams.iter().zip(&rows) {
        let c = if s.firing() { RED } else { GREEN };
        let _ = writeln!(out, "{}", line(r, Some(c)));
        let _ = writeln!(out, "  {}", clean(&silence_words(s, now)));
        if let Some(note) = s.learned_note() {
            let _ = writeln!(out, "  {}", clean(&note));
        }
    }
    if let Some(svix) = &doc.svix {
        for source in &svix.grouped_sources {
            let _ = writeln!(
                out,
                "svix {}: more than {} endpoints; further endpoints are grouped as other",
                clean(source),
                svix.max_endpoints_per_source
            );
        }
        for e in svix.endpoints.iter().filter(|e| e.state != "ok") {
            let c = if e.alerting() { RED } else { YELLOW };
            let lost: Vec<String> = e.lost_messages.iter().map(|m| clean(&m.msg_id)).collect();
            let _ = writeln!(
                out,
                "svix {}/{}: {}{}",
                clean(&e.source),
                clean(e.endpoint_uid.as_deref().unwrap_or(&e.endpoint_id)),
                paint(&e.state.to_uppercase(), c, colour),
                if lost.is_empty() {
                    String::new()
                } else {
                    format!(", lost {}", lost.join(" "))
                }
            );
        }
    }
    if let Some(n) = &doc.notifications {
        for (name, c) in n.notifiers.iter().filter(|(_, c)| c.pending + c.failed > 0) {
            let _ = writeln!(
                out,
                "notifier {}: {} pending, {} failed",
                clean(name),
                c.pending,
                if c.failed > 0 {
                    paint(&c.failed.to_string(), RED, colour)
                } else {
                    "0".to_string()
                }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_output_has_no_escapes_and_colour_output_does() {
        let doc: StatusDoc = serde_json::from_value(serde_json::json!({
            "now": "2026-11-30T00:13:00Z",
            "streams": [{
                "name": "identity", "calendar": "tokyo", "timezone": "Asia/Tokyo",
                "last_event_at": "2026-11-30T00:00:00Z", "last_event_type": "user.\u{1b}[2Jcreated",
                "watching_since": "2026-11-01T00:00:00Z",
                "business_silence_seconds": 7980, "threshold_seconds": 21600,
                "fires_at": "2026-11-30T04:00:00Z", "fires_in_seconds": 13620,
                "state": "ok", "firing_since": null, "in_business_hours": false,
                "clock_paused_until": "2026-12-01T00:00:00Z"
            }]
        }))
        .unwrap();
        let plain = render(&doc, false);
        assert!(!plain.contains('\x1b'), "{plain}");
        assert!(plain.contains("2h13m/6h (37%)"), "{plain}");
        assert!(
            plain.contains("paused until Tue 09:00 Asia/Tokyo"),
            "{plain}"
        );
        assert!(plain.contains("fires in 3h47m (Mon 13:00 Asia/Tokyo · 04:00 UTC)"));
        assert!(render(&doc, true).contains(GREEN));
    }
}
