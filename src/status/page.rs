//! The HTML status page (`GET /`): one self-contained document, no script,
//! no external resource; it reloads itself every 10 s with a meta refresh.
//! Every string that came from config or from events (event types arrive in
//! request bodies) goes through `esc`.

use super::format::{human_duration, utc, zoned, zoned_and_utc};
use super::model::{ReconciliationStatus, StatusDoc, StreamStatus, SvixEndpoint};
use super::timeline::Timeline;
use base64::Engine;
use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Seconds between reloads.
pub const REFRESH_SECONDS: u32 = 10;

const CSS: &str = r#"
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#59636e;--line:#d1d9e0;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--biz:#dbeafe;--track:#e6eaef;--tick:#1f2328}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;--ok:#3fb950;--bad:#f85149;--warn:#d29922;--biz:#1c2d48;--track:#262c36;--tick:#e6edf3}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1200px;padding:1rem;background:var(--bg);color:var(--fg);font:16px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.2rem;margin:1.6rem 0 .5rem}
.muted,.note{color:var(--muted)}.note{font-size:.9rem}
.learned{display:block;color:var(--muted);font-size:.85rem}
.summary{font-size:1.2rem;font-weight:600;padding:.5rem .75rem;border-left:.4rem solid var(--ok)}
.summary.bad{border-color:var(--bad)}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.5rem;border-bottom:1px solid var(--line)}
thead th{font-size:.85rem;color:var(--muted)}
.badge{display:inline-block;font-weight:700;padding:.1rem .45rem;border-radius:.3rem;color:#fff}
.badge.ok{background:var(--ok)}.badge.firing{background:var(--bad)}.badge.warn{background:var(--warn)}
@media (prefers-color-scheme:dark){.badge{color:#0d1117}}
svg.bar{display:block;width:100%;max-width:22rem;height:.8rem;margin:.2rem 0}
.bar .track{fill:var(--track)}.bar .fill{fill:var(--ok)}.bar .fill.near{fill:var(--warn)}.bar .fill.over{fill:var(--bad)}
.scroll{overflow-x:auto;direction:rtl}svg.timeline{direction:ltr;display:block;width:100%;min-width:640px;height:auto}
.timeline .bg{fill:var(--track)}.timeline .biz{fill:var(--biz)}.timeline .tick{stroke:var(--tick);stroke-width:1.5}
.timeline .cross{fill:var(--bad)}.timeline .unwatched{fill:var(--bg);opacity:.6}.timeline .day{stroke:var(--line)}.timeline text{fill:var(--muted);font-size:11px}
figure{margin:0 0 1rem}figcaption{font-weight:600}
code{font-size:.9em;word-break:break-all}
@media (max-width:760px){
 table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
 table.stack,table.stack tbody,table.stack tr,table.stack th,table.stack td{display:block;width:100%}
 table.stack caption{display:block;text-align:left}
 table.stack tr{border:1px solid var(--line);border-radius:.4rem;margin:0 0 .8rem;padding:.2rem}
 table.stack td,table.stack th{border:0}
 table.stack td::before{content:attr(data-label);display:block;font-size:.8rem;color:var(--muted)}
}
"#;

/// The `Content-Security-Policy` for the page: nothing may load, run, be
/// framed or submitted; only the page's own stylesheet (by hash) applies.
pub fn content_security_policy() -> String {
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(CSS.as_bytes()));
    format!(
        "default-src 'none'; style-src 'sha256-{hash}'; img-src data:; base-uri 'none'; \
         form-action 'none'; frame-ancestors 'none'"
    )
}

/// HTML-escapes text for element content and quoted attribute values, and
/// drops the control and bidi/format characters `hushwatch status` drops
/// (`format::hidden`): escaping alone would leave a U+202E from an event
/// type reordering the text around it.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().filter(|&c| !super::format::hidden(c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A stream name made safe for an `id` attribute (names are already
/// limited to `[A-Za-z0-9_.-]` by config; this keeps that true regardless).
fn id_of(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Renders the whole page.
pub fn render(doc: &StatusDoc, timelines: &BTreeMap<String, Timeline>) -> String {
    let now = doc.now;
    let firing = doc.streams.iter().filter(|s| s.firing()).count();
    let title = if firing > 0 {
        format!("{firing} FIRING · hushwatch")
    } else {
        "OK · hushwatch".to_string()
    };
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{}</title><style>{CSS}</style></head><body>",
        esc(&title)
    );
    h.push_str("<header><h1>hushwatch status</h1>");
    summary(&mut h, doc, firing);
    let _ = write!(
        h,
        "<p class=\"note\">As of <time datetime=\"{}\">{}</time>. This page reloads every {REFRESH_SECONDS} s.</p></header><main>",
        now.to_rfc3339(),
        esc(&now.format("%a %Y-%m-%d %H:%M:%S UTC").to_string())
    );
    streams_table(&mut h, doc);
    timelines_section(&mut h, doc, timelines);
    reconciliation_section(&mut h, doc);
    svix_section(&mut h, doc);
    operator_section(&mut h, doc);
    notifications_section(&mut h, doc);
    audit_section(&mut h, doc);
    replicas_section(&mut h, doc);
    h.push_str("</main></body></html>\n");
    h
}

fn summary(h: &mut String, doc: &StatusDoc, firing: usize) {
    let total = doc.streams.len();
    let svix_alerts = doc
        .svix
        .as_ref()
        .map_or(0, |s| s.endpoints.iter().filter(|e| e.alerting()).count());
    let mut parts = Vec::new();
    if firing > 0 {
        parts.push(format!(
            "FIRING: {firing} of {total} streams silent too long"
        ));
    } else {
        parts.push(format!("OK: all {total} streams within their thresholds"));
    }
    if svix_alerts > 0 {
        parts.push(format!("{svix_alerts} Svix endpoint(s) need attention"));
    }
    if !doc.storage_ok {
        parts.push("storage is failing: events are refused".to_string());
    }
    let bad = !doc.all_ok();
    let _ = write!(
        h,
        "<p class=\"summary{}\" id=\"summary\" role=\"status\">{}</p>",
        if bad { " bad" } else { "" },
        esc(&parts.join(" · "))
    );
}

fn streams_table(h: &mut String, doc: &StatusDoc) {
    h.push_str("<section aria-labelledby=\"streams-h\"><h2 id=\"streams-h\">Streams</h2>");
    if doc.streams.is_empty() {
        h.push_str("<p>No streams are configured.</p></section>");
        return;
    }
    h.push_str(
        "<table class=\"stack\" id=\"streams\"><caption class=\"note\">Silence is counted in business time of each stream's calendar; times are shown in that calendar's zone and in UTC.</caption>\
         <thead><tr><th scope=\"col\">Stream</th><th scope=\"col\">State</th><th scope=\"col\">Business silence</th>\
         <th scope=\"col\">Business clock</th><th scope=\"col\">Last event</th><th scope=\"col\">Watching since</th></tr></thead><tbody>",
    );
    for s in &doc.streams {
        stream_row(h, s, doc.now);
    }
    h.push_str("</tbody></table></section>");
}

fn stream_row(h: &mut String, s: &StreamStatus, now: DateTime<Utc>) {
    let tz = s.tz();
    let state = if s.firing() { "firing" } else { "ok" };
    let _ = write!(
        h,
        "<tr id=\"stream-{}\" data-state=\"{state}\"><th scope=\"row\">{}<br><span class=\"muted\">calendar {}</span></th>",
        id_of(&s.name),
        esc(&s.name),
        esc(&s.calendar)
    );
    // State: words and colour, never colour alone.
    let state_text = match (s.firing(), s.firing_since) {
        (true, Some(t)) => format!("FIRING since {}", zoned_and_utc(t, tz, now)),
        (true, None) => "FIRING".to_string(),
        (false, _) => "OK".to_string(),
    };
    let _ = write!(
        h,
        "<td data-label=\"State\" class=\"state\"><span class=\"badge {state}\">{}</span></td>",
        esc(&state_text)
    );
    // Business silence against the threshold.
    let fraction = s.fraction();
    let class = if fraction >= 1.0 {
        "over"
    } else if fraction >= 0.75 {
        "near"
    } else {
        ""
    };
    let silence = TimeDelta::seconds(s.business_silence_seconds);
    let threshold = TimeDelta::seconds(s.threshold_seconds);
    let words = silence_words(s, now);
    let _ = write!(
        h,
        "<td data-label=\"Business silence\" class=\"silence\">\
         <svg class=\"bar\" role=\"img\" aria-label=\"{pct:.0}% of the {thr} threshold\" data-fraction=\"{fraction:.4}\">\
         <title>{sil} of {thr} business time</title>\
         <rect class=\"track\" width=\"100%\" height=\"100%\" rx=\"3\"></rect>\
         <rect class=\"fill {class}\" width=\"{pct:.2}%\" height=\"100%\" rx=\"3\"></rect></svg>\
         <span class=\"words\">{}</span>{}</td>",
        esc(&words),
        s.learned_note()
            .map(|n| format!("<span class=\"learned\">{}</span>", esc(&n)))
            .unwrap_or_default(),
        pct = fraction * 100.0,
        sil = esc(&human_duration(silence)),
        thr = esc(&human_duration(threshold)),
    );
    // Whether the business clock runs now.
    let clock = if s.in_business_hours {
        "running (in business hours)".to_string()
    } else if let Some(t) = s.clock_paused_until {
        format!(
            "paused until {} (outside business hours)",
            zoned(t, tz, now)
        )
    } else {
        "paused (no business hours ahead)".to_string()
    };
    let _ = write!(
        h,
        "<td data-label=\"Business clock\" class=\"clock\">{}</td>",
        esc(&clock)
    );
    // Last event: type, arrival in both zones, lag.
    h.push_str("<td data-label=\"Last event\" class=\"last\">");
    match s.last_event_at {
        Some(at) => {
            let _ = write!(
                h,
                "<code>{}</code><br>{}<br><span class=\"muted\">{} ago</span>",
                esc(s.last_event_type.as_deref().unwrap_or("?")),
                esc(&zoned_and_utc(at, tz, now)),
                esc(&human_duration(now - at))
            );
            if let Some(lag) = s.newest_event_time.map(|e| at - e) {
                if lag >= TimeDelta::zero() {
                    let _ = write!(
                        h,
                        "<span class=\"muted\"> · lag {}</span>",
                        esc(&human_duration(lag))
                    );
                }
            }
        }
        None => h.push_str("nothing received yet"),
    }
    h.push_str("</td>");
    let since = s
        .watching_since
        .map_or_else(|| "unknown".to_string(), |t| zoned_and_utc(t, tz, now));
    let _ = write!(
        h,
        "<td data-label=\"Watching since\" class=\"since\">{}</td></tr>",
        esc(&since)
    );
}

/// "silent for 2h13m of business time, fires in 3h47m (Mon 13:00
/// Asia/Tokyo · 04:00 UTC)" or "FIRING for 1h05m".
pub fn silence_words(s: &StreamStatus, now: DateTime<Utc>) -> String {
    let tz = s.tz();
    let silent = format!(
        "silent for {} of business time",
        human_duration(TimeDelta::seconds(s.business_silence_seconds))
    );
    if s.firing() {
        let firing = s
            .firing_since
            .map(|t| format!("FIRING for {}", human_duration(now - t)))
            .unwrap_or_else(|| "FIRING".to_string());
        return format!("{firing} ({silent})");
    }
    match (s.fires_in_seconds, s.fires_at) {
        (Some(secs), Some(at)) => format!(
            "{silent}, fires in {} ({})",
            human_duration(TimeDelta::seconds(secs)),
            zoned_and_utc(at, tz, now)
        ),
        _ => format!("{silent}, no firing time ahead"),
    }
}

fn timelines_section(h: &mut String, doc: &StatusDoc, timelines: &BTreeMap<String, Timeline>) {
    if timelines.is_empty() {
        return;
    }
    h.push_str(
        "<section aria-labelledby=\"timeline-h\"><h2 id=\"timeline-h\">Last 7 days</h2>\
         <p class=\"note\">Shaded: business hours. Each line: an arrival. Red diamond: silence reached the threshold.</p>",
    );
    for s in &doc.streams {
        if let Some(t) = timelines.get(&s.name) {
            timeline_svg(h, &s.name, s.tz(), t);
        }
    }
    let missing = doc
        .streams
        .iter()
        .filter(|s| !timelines.contains_key(&s.name))
        .count();
    if missing > 0 {
        let _ = write!(
            h,
            "<p class=\"note\">{missing} more stream(s) are listed above without a timeline.</p>"
        );
    }
    h.push_str("</section>");
}

const TL_WIDTH: f64 = 1000.0;
const TL_TOP: f64 = 4.0;
const TL_HEIGHT: f64 = 40.0;

fn timeline_svg(h: &mut String, name: &str, tz: Tz, t: &Timeline) {
    let span = (t.end - t.start).num_milliseconds().max(1) as f64;
    let x = |at: DateTime<Utc>| (at - t.start).num_milliseconds() as f64 / span * TL_WIDTH;
    let id = id_of(name);
    let desc = format!(
        "{} business-hour window(s) shaded, {} arrival(s){}, threshold crossed {} time(s){}.",
        t.windows.len(),
        t.arrivals.len(),
        if t.truncated {
            " (only the newest are shown)"
        } else {
            ""
        },
        t.crossings.len(),
        t.crossings
            .last()
            .map(|c| format!(", last at {}", zoned(*c, tz, t.end)))
            .unwrap_or_default(),
    );
    let _ = write!(
        h,
        "<figure><figcaption>{}</figcaption><div class=\"scroll\"><svg class=\"timeline\" id=\"timeline-{id}\" role=\"img\" \
         viewBox=\"0 0 {TL_WIDTH} 62\" aria-labelledby=\"tl-{id}-t tl-{id}-d\" data-arrivals=\"{}\" data-crossings=\"{}\">\
         <title id=\"tl-{id}-t\">{} over the last 7 days</title><desc id=\"tl-{id}-d\">{}</desc>\
         <rect class=\"bg\" x=\"0\" y=\"{TL_TOP}\" width=\"{TL_WIDTH}\" height=\"{TL_HEIGHT}\"></rect>",
        esc(name),
        t.arrivals.len(),
        t.crossings.len(),
        esc(name),
        esc(&desc),
    );
    for w in &t.windows {
        let (a, b) = (x(w.start), x(w.end));
        let _ = write!(
            h,
            "<rect class=\"biz\" x=\"{a:.1}\" y=\"{TL_TOP}\" width=\"{:.1}\" height=\"{TL_HEIGHT}\"></rect>",
            (b - a).max(0.5)
        );
    }
    // Before watching began nothing was counted: faded.
    if t.watched_from > t.start {
        let _ = write!(
            h,
            "<rect class=\"unwatched\" x=\"0\" y=\"{TL_TOP}\" width=\"{:.1}\" height=\"{TL_HEIGHT}\"><title>not watched yet</title></rect>",
            x(t.watched_from)
        );
    }
    // Local midnights, labelled with the weekday.
    let mut day = t
        .start
        .with_timezone(&tz)
        .date_naive()
        .succ_opt()
        .unwrap_or_default();
    for _ in 0..8 {
        let Some(midnight) = day
            .and_hms_opt(0, 0, 0)
            .and_then(|m| m.and_local_timezone(tz).earliest())
        else {
            break;
        };
        let midnight = midnight.to_utc();
        if midnight >= t.end {
            break;
        }
        let mx = x(midnight);
        let _ = write!(
            h,
            "<line class=\"day\" x1=\"{mx:.1}\" x2=\"{mx:.1}\" y1=\"{TL_TOP}\" y2=\"{}\"></line>\
             <text x=\"{:.1}\" y=\"60\">{}</text>",
            TL_TOP + TL_HEIGHT + 4.0,
            mx + 2.0,
            day.format("%a %d")
        );
        day = day.succ_opt().unwrap_or(day);
    }
    // All ticks in one path (~15 bytes each instead of ~90 as <line>s):
    // 100 streams x 500 arrivals stay well under a megabyte.
    if !t.arrivals.is_empty() {
        h.push_str("<path class=\"tick\" d=\"");
        for a in &t.arrivals {
            let _ = write!(h, "M{:.1} {}v{}", x(*a), TL_TOP + 6.0, TL_HEIGHT - 6.0);
        }
        h.push_str("\"></path>");
    }
    for c in &t.crossings {
        let cx = x(*c);
        let _ = write!(
            h,
            "<path class=\"cross\" d=\"M{cx:.1} {} l5 6 l-5 6 l-5 -6 z\"><title>threshold reached {}</title></path>",
            TL_TOP,
            esc(&format!("{} · {}", zoned(*c, tz, t.end), utc(*c, t.end)))
        );
    }
    h.push_str("</svg></div></figure>");
}

/// Silences and acknowledgements: why a firing stream may not be paging.
fn operator_section(h: &mut String, doc: &StatusDoc) {
    let Some(op) = &doc.operator else { return };
    let time = |t: DateTime<Utc>| esc(&t.format("%Y-%m-%d %H:%M UTC").to_string());
    h.push_str(
        "<section aria-labelledby=\"op-h\"><h2 id=\"op-h\">Silences and acknowledgements</h2>",
    );
    if !op.silences.is_empty() {
        h.push_str(
            "<table class=\"stack\" id=\"silences\"><thead><tr><th scope=\"col\">Silence</th><th scope=\"col\">Streams</th>\
             <th scope=\"col\">From</th><th scope=\"col\">Until</th><th scope=\"col\">By</th><th scope=\"col\">Why</th></tr></thead><tbody>",
        );
        for s in &op.silences {
            let mut covers = s.streams.join(", ");
            if !s.kinds.is_empty() && s.kinds != ["*"] {
                let _ = write!(covers, " (pages: {})", s.kinds.join(", "));
            }
            let _ = write!(
                h,
                "<tr><td>#{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                s.id,
                if s.active { " (active)" } else { " (planned)" },
                esc(&covers),
                time(s.starts_at),
                time(s.ends_at),
                esc(&s.created_by),
                esc(&s.comment)
            );
        }
        h.push_str("</tbody></table>");
    }
    if !op.acknowledgements.is_empty() {
        h.push_str(
            "<table class=\"stack\" id=\"acks\"><thead><tr><th scope=\"col\">Acknowledged stream</th>\
             <th scope=\"col\">At</th><th scope=\"col\">By</th><th scope=\"col\">Why</th></tr></thead><tbody>",
        );
        for a in &op.acknowledgements {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&a.stream),
                time(a.created_at),
                esc(&a.created_by),
                esc(&a.comment)
            );
        }
        h.push_str("</tbody></table>");
    }
    h.push_str("</section>");
}

/// One row per stream with `[streams.X.reconcile]`: is the job running,
/// its latest report and what that report found (times in the stream's zone).
fn reconciliation_section(h: &mut String, doc: &StatusDoc) {
    let rows: Vec<(&StreamStatus, &ReconciliationStatus)> = doc
        .streams
        .iter()
        .filter_map(|s| s.reconciliation.as_ref().map(|r| (s, r)))
        .collect();
    if rows.is_empty() {
        return;
    }
    h.push_str(
        "<section aria-labelledby=\"reconcile-h\"><h2 id=\"reconcile-h\">Reconciliation</h2>\
         <table class=\"stack\" id=\"reconciliation\"><thead><tr><th scope=\"col\">Stream</th>\
         <th scope=\"col\">State</th><th scope=\"col\">Last report</th><th scope=\"col\">Next due</th>\
         <th scope=\"col\">Last drift</th></tr></thead><tbody>",
    );
    for (s, r) in rows {
        let tz = s.tz();
        let at = |t: Option<DateTime<Utc>>| {
            t.map_or_else(|| "none".to_string(), |t| zoned_and_utc(t, tz, doc.now))
        };
        let (badge, state) = match (&r.error, r.missing_since) {
            (Some(e), _) => ("firing", e.clone()),
            (None, Some(since)) => (
                "firing",
                format!("MISSING since {}", zoned_and_utc(since, tz, doc.now)),
            ),
            (None, None) => (
                "ok",
                format!(
                    "OK (every {}, grace {})",
                    human_duration(TimeDelta::seconds(r.every_seconds)),
                    human_duration(TimeDelta::seconds(r.grace_seconds))
                ),
            ),
        };
        // Like delivery ids, report ids stay off the page (`/v1/status` has them).
        let last = match r.last_finished_at {
            Some(t) => format!("finished {}", zoned_and_utc(t, tz, doc.now)),
            None => "none yet".to_string(),
        };
        let drift = r.last_drift.as_ref().map_or_else(
            || "-".to_string(),
            |d| {
                let parts: Vec<String> = d.iter().map(|(k, n)| format!("{n} {k}")).collect();
                if parts.is_empty() {
                    "none".to_string()
                } else {
                    parts.join(", ")
                }
            },
        );
        let _ = write!(
            h,
            "<tr data-state=\"{}\"><th scope=\"row\">{}</th><td data-label=\"State\"><span class=\"badge {badge}\">{}</span></td>\
             <td data-label=\"Last report\">{}</td><td data-label=\"Next due\">{}</td><td data-label=\"Last drift\">{}</td></tr>",
            if r.missing_since.is_some() { "missing" } else { "ok" },
            esc(&s.name),
            esc(&state),
            esc(&last),
            esc(&at(r.due_at)),
            esc(&drift),
        );
    }
    h.push_str("</tbody></table></section>");
}

fn svix_section(h: &mut String, doc: &StatusDoc) {
    let Some(svix) = &doc.svix else { return };
    h.push_str("<section aria-labelledby=\"svix-h\"><h2 id=\"svix-h\">Svix endpoints</h2>");
    if let Some(e) = &svix.error {
        let _ = write!(h, "<p class=\"summary bad\">{}</p></section>", esc(e));
        return;
    }
    for source in &svix.grouped_sources {
        let _ = write!(
            h,
            "<p class=\"summary bad\">Svix source {} has more than {} endpoints; further endpoints are grouped as <code>other</code>.</p>",
            esc(source),
            svix.max_endpoints_per_source
        );
    }
    if svix.endpoints.is_empty() {
        h.push_str("<p>No operational webhook has named an endpoint yet.</p></section>");
        return;
    }
    h.push_str(
        "<table class=\"stack\" id=\"svix\"><thead><tr><th scope=\"col\">Endpoint</th><th scope=\"col\">Source</th>\
         <th scope=\"col\">Feeds stream</th><th scope=\"col\">State</th><th scope=\"col\">Lost messages</th></tr></thead><tbody>",
    );
    for e in &svix.endpoints {
        svix_row(h, e, doc.now);
    }
    h.push_str("</tbody></table></section>");
}

fn svix_row(h: &mut String, e: &SvixEndpoint, now: DateTime<Utc>) {
    let badge = match e.state.as_str() {
        "ok" => "ok",
        "failing" => "warn",
        _ => "firing",
    };
    let mut state = e.state.to_uppercase();
    if let Some(d) = &e.disabled {
        let _ = write!(state, " ({})", d.trigger);
        if let Some(since) = d.since {
            let _ = write!(state, " since {}", utc(since, now));
        }
    }
    if e.failing_messages > 0 {
        let _ = write!(state, ", {} message(s) failing", e.failing_messages);
    }
    let lost = if e.lost_messages.is_empty() {
        "none".to_string()
    } else {
        e.lost_messages
            .iter()
            .map(|m| format!("<code>{}</code>", esc(&m.msg_id)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let _ = write!(
        h,
        "<tr data-state=\"{}\"><th scope=\"row\"><code>{}</code></th><td data-label=\"Source\">{}</td>\
         <td data-label=\"Feeds stream\">{}</td><td data-label=\"State\"><span class=\"badge {badge}\">{}</span></td>\
         <td data-label=\"Lost messages\">{lost}</td></tr>",
        esc(&e.state),
        esc(e.endpoint_uid.as_deref().unwrap_or(&e.endpoint_id)),
        esc(&e.source),
        esc(e.stream.as_deref().unwrap_or("")),
        esc(&state),
    );
}

fn notifications_section(h: &mut String, doc: &StatusDoc) {
    let Some(n) = &doc.notifications else { return };
    h.push_str("<section aria-labelledby=\"notify-h\"><h2 id=\"notify-h\">Notifications</h2>");
    if let Some(e) = &n.error {
        let _ = write!(
            h,
            "<p class=\"summary bad\">Outbox unreadable: {}</p></section>",
            esc(e)
        );
        return;
    }
    h.push_str(
        "<table class=\"stack\" id=\"notifiers\"><thead><tr><th scope=\"col\">Notifier</th><th scope=\"col\">Kind</th>\
         <th scope=\"col\">Pending</th><th scope=\"col\">Delivered</th><th scope=\"col\">Failed</th><th scope=\"col\">Last error</th></tr></thead><tbody>",
    );
    for (name, c) in &n.notifiers {
        let last = n
            .recent_failures
            .iter()
            .filter(|f| &f.notifier == name)
            .max_by_key(|f| f.at);
        let last = last.map_or_else(
            || "none".to_string(),
            |f| {
                format!(
                    "{} ({} page for {}, {} attempt(s), {})",
                    f.error.as_deref().unwrap_or("no reason recorded"),
                    f.status,
                    f.stream.as_deref().unwrap_or("?"),
                    f.attempts,
                    utc(f.at, doc.now)
                )
            },
        );
        let _ = write!(
            h,
            "<tr data-failed=\"{}\"><th scope=\"row\">{}</th><td data-label=\"Kind\">{}</td><td data-label=\"Pending\">{}</td>\
             <td data-label=\"Delivered\">{}</td><td data-label=\"Failed\">{}{}</td><td data-label=\"Last error\">{}</td></tr>",
            c.failed,
            esc(name),
            esc(&c.kind),
            c.pending,
            c.delivered,
            c.failed,
            if c.failed > 0 {
                " <span class=\"badge firing\">FAILED</span>"
            } else {
                ""
            },
            esc(&last),
        );
    }
    h.push_str("</tbody></table></section>");
}

fn audit_section(h: &mut String, doc: &StatusDoc) {
    let Some(a) = &doc.audit else { return };
    h.push_str(
        "<section aria-labelledby=\"audit-h\"><h2 id=\"audit-h\">Audit log</h2><p id=\"audit\">",
    );
    if let Some(e) = &a.error {
        let _ = write!(h, "{}", esc(e));
    } else if !a.enabled && a.head_seq == 0 {
        h.push_str("The audit log is off.");
    } else {
        let short: String = a.head_hash.chars().take(16).collect();
        let _ = write!(
            h,
            "Head: entry #{} (hash <code>{}…</code>). ",
            a.head_seq,
            esc(&short)
        );
        match &a.last_checkpoint {
            Some(c) => {
                let _ = write!(
                    h,
                    "Last checkpoint: entry #{} at {} ({}).",
                    c.seq,
                    esc(&utc(c.at, doc.now)),
                    if c.signed { "signed" } else { "unsigned" }
                );
            }
            None => h.push_str("No checkpoint yet."),
        }
    }
    h.push_str("</p></section>");
}

/// Only on a shared database: one SQLite process has nothing to show.
fn replicas_section(h: &mut String, doc: &StatusDoc) {
    let Some(r) = doc.replicas.as_ref().filter(|r| r.shared) else {
        return;
    };
    h.push_str("<section aria-labelledby=\"replicas-h\"><h2 id=\"replicas-h\">Replicas</h2><p id=\"leader\">");
    match r
        .leader
        .as_ref()
        .and_then(|l| Some((l.replica.as_ref()?, l)))
    {
        Some((who, l)) => {
            let _ = write!(h, "Leader: <code>{}</code>, term {}", esc(who), l.term);
            if let Some(until) = l.lease_until {
                let _ = write!(h, ", lease until {}", esc(&utc(until, doc.now)));
            }
            h.push('.');
        }
        None => h.push_str("No leader right now (the lease is being taken over)."),
    }
    let _ = write!(
        h,
        " This page was served by <code>{}</code>.</p>",
        esc(&r.this)
    );
    h.push_str("<table><thead><tr><th scope=\"col\">replica</th><th scope=\"col\">started</th><th scope=\"col\">last heartbeat</th><th scope=\"col\">role</th></tr></thead><tbody>");
    for replica in &r.replicas {
        let when = |t: Option<DateTime<Utc>>| t.map_or_else(|| "—".to_owned(), |t| utc(t, doc.now));
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&replica.id),
            esc(&when(replica.started_at)),
            esc(&when(replica.last_seen)),
            if replica.leader { "leader" } else { "replica" }
        );
    }
    h.push_str("</tbody></table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_show_only_on_a_shared_database_escaped() {
        let now = "2026-12-01T10:00:00Z";
        let shared = doc(serde_json::json!({
            "now": now,
            "replicas": {
                "self": "web-<b>-1",
                "shared": true,
                "replicas": [
                    {"id": "web-<b>-1", "started_at": now, "last_seen": now, "leader": true},
                    {"id": "web-2", "started_at": now, "last_seen": now, "leader": false}
                ],
                "leader": {"replica": "web-<b>-1", "term": 7, "lease_until": now},
                "is_leader": true
            }
        }));
        let html = render(&shared, &BTreeMap::new());
        assert!(
            html.contains("Leader: <code>web-&lt;b&gt;-1</code>, term 7"),
            "{html}"
        );
        assert!(html.contains("<td><code>web-2</code></td>"));
        assert!(!html.contains("web-<b>"));
        let solo = doc(serde_json::json!({
            "now": now,
            "replicas": {"self": "one", "shared": false, "replicas": [], "leader": null}
        }));
        assert!(!render(&solo, &BTreeMap::new()).contains("Replicas</h2>"));
    }

    fn doc(json: serde_json::Value) -> StatusDoc {
        serde_json::from_value(json).unwrap()
    }

    fn stream(extra: serde_json::Value) -> serde_json::Value {
        let mut base = serde_json::json!({
            "name": "identity", "calendar": "tokyo", "timezone": "Asia/Tokyo",
            "last_event_at": "2026-11-30T01:00:00Z", "last_event_type": "user.created",
            "watching_since": "2026-11-01T00:00:00Z",
            "business_silence_seconds": 7980, "threshold_seconds": 21600,
            "fires_at": "2026-11-30T04:00:00Z", "fires_in_seconds": 13620,
            "state": "ok", "firing_since": null, "in_business_hours": true,
            "clock_paused_until": null
        });
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        base
    }

    #[test]
    fn an_ok_stream_reads_in_words_with_its_zone() {
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "storage_ok": true, "streams": [stream(serde_json::json!({}))]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(html.contains(
            "silent for 2h13m of business time, fires in 3h47m (Mon 13:00 Asia/Tokyo · 04:00 UTC)"
        ));
        assert!(html.contains(">OK</span>"));
        assert!(
            html.contains("width=\"36.94%\""),
            "bar is silence/threshold"
        );
        assert!(html.contains("running (in business hours)"));
    }

    #[test]
    fn a_missing_reconciliation_reads_with_its_last_report_and_drift() {
        let reconciliation = serde_json::json!({"reconciliation": {
            "every_seconds": 3600, "grace_seconds": 1800, "state": "missing",
            "last_report_id": "rec-<7>", "last_finished_at": "2026-11-29T22:00:00Z",
            "last_drift": {"grant_missed": 1, "revoke_missed": 2},
            "due_at": "2026-11-29T23:30:00Z", "missing_since": "2026-11-29T23:30:00Z"
        }});
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "streams": [stream(reconciliation), stream(serde_json::json!({"name": "plain"}))]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(html.contains("Reconciliation</h2>"));
        assert!(
            html.contains("MISSING since Mon 08:30 Asia/Tokyo · 23:30 UTC"),
            "{html}"
        );
        assert!(html.contains("finished Mon 07:00 Asia/Tokyo"), "{html}");
        assert!(!html.contains("rec-"), "no report ids on the page: {html}");
        assert!(html.contains("1 grant_missed, 2 revoke_missed"));
        assert_eq!(html.matches("<tr data-state=\"missing\">").count(), 1);
        let none = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "streams": [stream(serde_json::json!({}))]
        }));
        assert!(!render(&none, &BTreeMap::new()).contains("Reconciliation</h2>"));
    }

    #[test]
    fn a_learned_threshold_says_where_it_came_from() {
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z",
            "streams": [stream(serde_json::json!({
                "threshold_seconds": 10800, "configured_threshold_seconds": 21600,
                "threshold_source": "learned",
                "learned": {"quantile": 0.999, "factor": 2.0, "min_seconds": 1800,
                            "usual_gap_seconds": 5400.0, "gaps": 1204, "days": 28}
            }))]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(
            html.contains(
                "learned threshold 3h (2× the 0.999 quantile 1h30m of 1204 gaps over 28 days; configured 6h)"
            ),
            "{html}"
        );
        assert!(
            html.contains("width=\"73.89%\""),
            "bar is silence/effective threshold"
        );
        let plain = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "streams": [stream(serde_json::json!({}))]
        }));
        assert!(!render(&plain, &BTreeMap::new()).contains("learned threshold"));
    }

    #[test]
    fn event_types_from_requests_are_escaped() {
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z",
            "streams": [stream(serde_json::json!({"last_event_type": "<script>alert(1)</script>"}))]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(!html.contains("<script>"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn a_firing_stream_says_for_how_long() {
        let d = doc(serde_json::json!({
            "now": "2026-11-30T05:05:00Z",
            "streams": [stream(serde_json::json!({
                "state": "firing", "firing_since": "2026-11-30T04:00:00Z",
                "business_silence_seconds": 25500, "fires_in_seconds": null
            }))]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(html.contains("FIRING since Mon 13:00 Asia/Tokyo · 04:00 UTC"));
        assert!(html.contains("FIRING for 1h05m"));
        assert!(html.contains("width=\"100.00%\""));
    }

    #[test]
    fn the_policy_pins_the_stylesheet_by_hash() {
        let csp = content_security_policy();
        assert!(csp.starts_with("default-src 'none'; style-src 'sha256-"));
        assert!(!csp.contains("unsafe"));
    }
}
