//! `hushwatch status` output: the status page's overview as a plain text
//! table, with ANSI colour only when the caller says the output is a TTY.

use super::format::{displayable, human_duration, short, zoned};
use super::model::{StatusDoc, StreamStatus};
use super::page::silence_words;
use chrono::{DateTime, TimeDelta, Utc};
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

/// Longest author shown in the STATE cell (the line below has more room).
const CELL_AUTHOR: usize = 16;

/// "FIRING", "FIRING (acked by ana 13:10)", "OK (silenced until Wed
/// 09:00 by bob)": who is on it, in the row a second responder reads first
/// (issue #27). Times on the calendar's wall clock, the weekday added when
/// not today; the line under the row has the zone and the comment.
fn state_cell(s: &StreamStatus, now: DateTime<Utc>) -> String {
    let tz = s.tz();
    let clock = |t: DateTime<Utc>| {
        let (local, today) = (t.with_timezone(&tz), now.with_timezone(&tz));
        if local.date_naive() == today.date_naive() {
            local.format("%H:%M").to_string()
        } else {
            local.format("%a %H:%M").to_string()
        }
    };
    let mut facts = Vec::new();
    if let Some(a) = s.ack() {
        facts.push(format!(
            "acked by {} {}",
            short(&a.by, CELL_AUTHOR),
            clock(a.at)
        ));
    }
    if let Some(x) = s.silenced.as_ref().filter(|x| x.quiet_page) {
        facts.push(format!(
            "silenced until {} by {}",
            clock(x.until),
            short(&x.by, CELL_AUTHOR)
        ));
    }
    let mut state = if s.firing() { "FIRING" } else { "OK" }.to_string();
    if let Some(r) = s.relay.as_ref().filter(|r| !r.ok()) {
        state = format!(
            "{state}, RELAY {}",
            r.state.replace('_', " ").to_uppercase()
        );
    }
    if let Some(c) = s.crosscheck.as_ref().filter(|c| !c.ok()) {
        state = format!("{state}, CROSS-CHECK {}", c.state.to_uppercase());
    }
    if facts.is_empty() {
        state.to_string()
    } else {
        format!("{state} ({})", facts.join("; "))
    }
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
    let acked = doc.streams.iter().filter(|s| s.ack().is_some()).count();
    let relays = doc.streams.iter().filter(|s| s.relay_alerting()).count();
    let crosschecks = doc
        .streams
        .iter()
        .filter(|s| s.crosscheck_alerting())
        .count();
    let _ = writeln!(
        out,
        "hushwatch {headline}: {firing} of {} stream(s) firing{}{}{}, as of {}",
        doc.streams.len(),
        if acked > 0 {
            format!(" ({acked} acknowledged)")
        } else {
            String::new()
        },
        if relays > 0 {
            format!(", {relays} relay(s) not OK")
        } else {
            String::new()
        },
        if crosschecks > 0 {
            format!(", {crosschecks} cross-check(s) not OK")
        } else {
            String::new()
        },
        now.format("%Y-%m-%d %H:%M:%S UTC")
    );
    if let Some(e) = doc.operator.as_ref().and_then(|o| o.error.as_ref()) {
        let _ = writeln!(out, "{}", paint(&clean(e), RED, colour));
    }
    if !doc.storage_ok {
        let _ = writeln!(
            out,
            "{}",
            paint("storage is failing: events are refused", RED, colour)
        );
    }
    if doc.degraded {
        let reasons = clean(&doc.degraded_reasons.join("; "));
        let _ = writeln!(
            out,
            "{}",
            paint(&format!("hushwatch degraded: {reasons}"), RED, colour)
        );
    }
    for s in doc.streams.iter().filter(|s| s.reconciliation_missing()) {
        let _ = writeln!(
            out,
            "{}",
            paint(
                &format!("{}: reconciliation report overdue", clean(&s.name)),
                RED,
                colour
            )
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
            let state = state_cell(s, now);
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
            [clean(&s.name), state, bar, clock, last]
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
        let c = if s.firing() || s.relay_alerting() || s.crosscheck_alerting() {
            RED
        } else {
            GREEN
        };
        let _ = writeln!(out, "{}", line(r, Some(c)));
        let _ = writeln!(out, "  {}", clean(&silence_words(s, now)));
        for line in s.who_is_on_it(now) {
            let _ = writeln!(out, "  {}", clean(&line));
        }
        if let Some(note) = s.learned_note() {
            let _ = writeln!(out, "  {}", clean(&note));
        }
        if let Some(r) = &s.relay {
            let c = if r.ok() { GREEN } else { RED };
            let _ = writeln!(out, "  {}", paint(&clean(&r.line(s.tz(), now)), c, colour));
        } else if let Some(f) = &s.forward {
            // An older server: no `relay` block, its `forward` facts.
            let words = clean(&f.words(|t| crate::status::format::zoned_and_utc(t, s.tz(), now)));
            let c = if f.alerting() { RED } else { GREEN };
            let _ = writeln!(out, "  {}", paint(&words, c, colour));
        }
        if let Some(x) = &s.crosscheck {
            let c = if x.ok() { GREEN } else { RED };
            let _ = writeln!(out, "  {}", paint(&clean(&x.line(s.tz(), now)), c, colour));
            if let Some(todo) = x.what_to_do() {
                let _ = writeln!(out, "    {}", clean(&todo));
            }
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
        // Issue 31: recovered lost messages and unmapped endpoints.
        for e in svix
            .endpoints
            .iter()
            .filter(|e| e.recovered_total > 0 || e.unmapped)
        {
            let mut said = Vec::new();
            if e.unmapped {
                said.push("unmapped (filed under the source's first stream)".to_string());
            }
            if e.recovered_total > 0 {
                said.push(format!(
                    "{} lost message(s) recovered (redelivered)",
                    e.recovered_total
                ));
            }
            let _ = writeln!(
                out,
                "svix {}/{}: {}",
                clean(&e.source),
                clean(e.endpoint_uid.as_deref().unwrap_or(&e.endpoint_id)),
                said.join(", ")
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

    fn firing_doc(extra: serde_json::Value) -> StatusDoc {
        let mut stream = serde_json::json!({
            "name": "identity", "calendar": "tokyo", "timezone": "Asia/Tokyo",
            "last_event_at": "2026-11-30T01:00:00Z", "last_event_type": "user.deleted",
            "watching_since": "2026-11-30T00:00:00Z",
            "business_silence_seconds": 25800, "threshold_seconds": 21600,
            "fires_at": "2026-11-30T07:00:00Z", "state": "firing",
            "firing_since": "2026-11-30T07:00:00Z", "in_business_hours": true
        });
        if let (Some(b), Some(e)) = (stream.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        serde_json::from_value(serde_json::json!({
            "now": "2026-11-30T08:10:00Z", "streams": [stream]
        }))
        .unwrap()
    }

    #[test]
    fn the_row_says_who_acknowledged_and_who_silenced_it() {
        let ack =
            serde_json::json!({"by": "ana", "at": "2026-11-30T08:05:00Z", "comment": "on it"});
        let out = render(&firing_doc(serde_json::json!({"acknowledged": ack})), false);
        assert!(
            out.starts_with("hushwatch NOT OK: 1 of 1 stream(s) firing (1 acknowledged), as of"),
            "{out}"
        );
        assert!(
            out.contains("identity  FIRING (acked by ana 17:05)  "),
            "{out}"
        );
        assert!(
            out.contains("\n  acknowledged by ana at Mon 17:05 Asia/Tokyo · 08:05 UTC: \u{201c}on it\u{201d}\n"),
            "{out}"
        );
        let silenced = serde_json::json!({
            "id": 1, "until": "2026-12-01T01:00:00Z", "by": "b\u{202e}ob", "comment": "IdP \u{1b}[2Jmigration",
            "kinds": ["*"], "quiet_page": true
        });
        let out = render(
            &firing_doc(serde_json::json!({"acknowledged": ack, "silenced": silenced})),
            false,
        );
        assert!(
            out.contains("FIRING (acked by ana 17:05; silenced until Tue 10:00 by bob)"),
            "{out}"
        );
        assert!(
            out.contains("  silenced until Tue 10:00 Asia/Tokyo · 01:00 UTC by bob: \u{201c}IdP [2Jmigration\u{201d}"),
            "{out}"
        );
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{202e}'),
            "{out}"
        );
        // An acknowledgement of an episode that has ended is not shown.
        let ok = firing_doc(
            serde_json::json!({"state": "ok", "firing_since": null, "acknowledged": ack}),
        );
        let out = render(&ok, false);
        assert!(!out.contains("acked"), "{out}");
    }

    #[test]
    fn a_silence_of_other_pages_only_is_not_called_silenced_in_the_state() {
        let partial = serde_json::json!({
            "id": 2, "until": "2026-11-30T09:00:00Z", "by": "cy", "comment": "svix work",
            "kinds": ["svix_*"], "quiet_page": false
        });
        let out = render(&firing_doc(serde_json::json!({"silenced": partial})), false);
        assert!(out.contains("identity  FIRING  "), "{out}");
        assert!(
            out.contains(
                "  other pages silenced (svix_*) until Mon 18:00 Asia/Tokyo · 09:00 UTC by cy"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_relay_that_pages_makes_the_whole_status_not_ok() {
        let relay = serde_json::json!({"relay": {
            "state": "dead_letters", "problems": ["dead_letters"],
            "command": "hushwatch replay --stream identity --dead-letters",
            "dead_letters": 2
        }});
        let mut doc = firing_doc(relay);
        doc.streams[0].state = "ok".into();
        assert!(!doc.all_ok());
        let out = render(&doc, false);
        assert!(
            out.starts_with("hushwatch NOT OK: 0 of 1 stream(s) firing, 1 relay(s) not OK, as of"),
            "{out}"
        );
        assert!(out.contains("identity  OK, RELAY DEAD LETTERS  "), "{out}");
        assert!(
            out.contains("\n  relay gave up events (dead letters): 2 dead letter(s) (`hushwatch replay --stream identity --dead-letters`)\n"),
            "{out}"
        );
    }

    #[test]
    fn a_degraded_sidecar_and_an_overdue_reconciliation_are_not_ok() {
        let mut doc = firing_doc(serde_json::json!({
            "state": "ok", "firing_since": null,
            "reconciliation": {"every_seconds": 3600, "grace_seconds": 600, "state": "missing",
                               "missing_since": "2026-11-30T08:00:00Z"}
        }));
        assert!(!doc.all_ok(), "an overdue report pages");
        let out = render(&doc, false);
        assert!(
            out.contains("\nidentity: reconciliation report overdue\n"),
            "{out}"
        );
        doc.streams[0].reconciliation = None;
        assert!(doc.all_ok());
        doc.degraded = true;
        doc.degraded_reasons = vec!["the last config reload failed".into()];
        assert!(!doc.all_ok(), "degraded pages");
        let out = render(&doc, false);
        assert!(out.starts_with("hushwatch NOT OK"), "{out}");
        assert!(
            out.contains("\nhushwatch degraded: the last config reload failed\n"),
            "{out}"
        );
    }

    #[test]
    fn an_unreadable_operator_state_is_said() {
        let mut doc = firing_doc(serde_json::json!({}));
        doc.operator = serde_json::from_value(
            serde_json::json!({"error": "silences and acknowledgements unreadable"}),
        )
        .unwrap();
        assert!(render(&doc, false).contains("silences and acknowledgements unreadable"));
    }

    #[test]
    fn a_cross_check_with_open_findings_or_failing_makes_the_whole_status_not_ok() {
        let block = serde_json::json!({"crosscheck": {
            "provider": "clerk", "state": "findings", "problems": ["findings"], "critical": true,
            "last_poll": "2026-11-30T08:00:00Z", "last_success": "2026-11-30T08:00:00Z",
            "open_findings": 2, "open_revocations": 2,
            "findings": [{"direction": "revoke", "subject": "user_2\u{1b}[2J", "organization": "org_9"},
                         {"direction": "revoke", "subject": "user_7", "organization": "org_9"}],
            "command": "hushwatch audit subject --config /etc/hushwatch/hushwatch.toml --format text user_2"
        }});
        let mut doc = firing_doc(block);
        doc.streams[0].state = "ok".into();
        assert!(!doc.all_ok(), "open findings page, so status exits 1");
        let out = render(&doc, false);
        assert!(
            out.starts_with(
                "hushwatch NOT OK: 0 of 1 stream(s) firing, 1 cross-check(s) not OK, as of"
            ),
            "{out}"
        );
        assert!(
            out.contains("identity  OK, CROSS-CHECK FINDINGS  "),
            "{out}"
        );
        assert!(
            out.contains("\n  cross-check: 2 missed revocations (Clerk): user_2[2J in org_9, user_7 in org_9; last poll 17:00 (`hushwatch audit subject --config /etc/hushwatch/hushwatch.toml --format text user_2`)\n"),
            "{out}"
        );
        assert!(!out.contains('\u{1b}'), "{out}");

        let ok = serde_json::json!({"crosscheck": {"provider": "workos", "state": "ok",
            "last_poll": "2026-11-30T08:00:00Z", "next_poll": "2026-11-30T08:15:00Z"}});
        let mut doc = firing_doc(ok);
        doc.streams[0].state = "ok".into();
        assert!(doc.all_ok());
        assert!(render(&doc, false).contains(
            "\n  cross-check with WorkOS: nothing missed, last poll 17:00, next 17:15\n"
        ));
    }
}
