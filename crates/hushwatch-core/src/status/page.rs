//! The HTML status page (`GET /`): one self-contained document, no script,
//! no external resource; it reloads itself every 10 s with a meta refresh.
//!
//! Built with maud's `html!`, which escapes every `(expr)` by construction:
//! text that came from config or from events (event types arrive in request
//! bodies) cannot be spliced in unescaped, because the only way to bypass
//! escaping is a `PreEscaped` that would stand out (there are two, each
//! with its reason beside it: the stylesheet constant, and the timeline's
//! tick path, which holds formatted numbers only). Text from config or events goes through [`Shown`],
//! which also drops the control and bidi/format characters `hushwatch
//! status` drops.

use super::format::{displayable, human_duration, short, utc, zoned, zoned_and_utc};
use super::model::{ReconciliationStatus, StatusDoc, StreamStatus, SvixEndpoint, AUTHOR_CHARS};
use super::relay::shell_word;
use super::timeline::Timeline;
use base64::Engine;
use chrono::{DateTime, DurationRound, TimeDelta, Timelike, Utc};
use chrono_tz::Tz;
use maud::{html, Markup, PreEscaped, Render, DOCTYPE};
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
.badge.ok{background:var(--ok)}.badge.firing{background:var(--bad)}.badge.warn{background:var(--warn)}.badge.acked{background:var(--warn)}.badge.silenced{background:var(--muted)}
.who{margin:.3rem 0 0;font-size:.9rem}.who li{margin:.15rem 0}.who ul{margin:0;padding-left:1.1rem}
.howto{border-left:.4rem solid var(--warn);padding:.1rem .75rem;margin:.6rem 0}.howto ul{margin:.3rem 0;padding-left:1.1rem}.howto p{margin:.3rem 0}.howto pre{margin:.3rem 0;white-space:pre-wrap}
@media (prefers-color-scheme:dark){.badge{color:#0d1117}}
svg.bar{display:block;width:100%;max-width:22rem;height:.8rem;margin:.2rem 0}
.bar .track{fill:var(--track)}.bar .fill{fill:var(--ok)}.bar .fill.near{fill:var(--warn)}.bar .fill.over{fill:var(--bad)}
.scroll{overflow-x:auto;direction:rtl}svg.timeline{direction:ltr;display:block;width:100%;min-width:640px;height:auto}
.timeline .bg{fill:var(--track)}.timeline .biz{fill:var(--biz)}.timeline .tick{stroke:var(--tick);stroke-width:2px;vector-effect:non-scaling-stroke}
.timeline .cross{fill:var(--bad);stroke:var(--bg);stroke-width:1.5}.timeline .now{stroke:var(--fg);stroke-dasharray:3 2}.timeline text.strip{font-weight:600;fill:var(--fg)}.timeline .unwatched{fill:var(--bg);opacity:.6}.timeline .day{stroke:var(--line)}.timeline text{fill:var(--muted);font-size:11px}
figure{margin:0 0 1rem}figcaption{font-weight:600}
code{font-size:.9em}
.ident{white-space:nowrap}.long{overflow-wrap:anywhere}
tr.relayline td{padding-top:0;font-size:.9rem;color:var(--muted)}tr.relayline.bad td{color:var(--fg);border-left:.4rem solid var(--bad)}
@media (max-width:760px){
 table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
 table.stack,table.stack tbody,table.stack tr,table.stack th,table.stack td{display:block;width:100%}
 table.stack caption{display:block;text-align:left}
 table.stack tr{border:1px solid var(--line);border-radius:.4rem;margin:0 0 .8rem;padding:.2rem}
 table.stack td,table.stack th{border:0;overflow-wrap:anywhere}
 table.stack td::before{content:attr(data-label);display:block;font-size:.8rem;color:var(--muted)}
 .timeline text{font-size:16px}
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

/// Text from config or from events, rendered as maud escapes text (for
/// element content and double-quoted attribute values) without the control
/// and bidi/format characters `hushwatch status` drops (`format::hidden`):
/// escaping alone would leave a U+202E from an event type reordering the
/// text around it.
pub struct Shown<T>(pub T);

impl<T: AsRef<str>> Render for Shown<T> {
    fn render_to(&self, buffer: &mut String) {
        let mut escaper = maud::Escaper::new(buffer);
        for c in self
            .0
            .as_ref()
            .chars()
            .filter(|&c| !super::format::hidden(c))
        {
            let _ = escaper.write_char(c);
        }
    }
}

/// `text` as [`Shown`] renders it, for the few HTML bodies built outside
/// this page (the acknowledge link's pages).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    Shown(text).render_to(&mut out);
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
    let relays = doc.streams.iter().filter(|s| s.relay_alerting()).count();
    let crosschecks = doc
        .streams
        .iter()
        .filter(|s| s.crosscheck_alerting())
        .count();
    let mut heads = Vec::new();
    if firing > 0 {
        heads.push(format!("{firing} FIRING"));
    }
    if relays > 0 {
        heads.push(format!("{relays} RELAY NOT OK"));
    }
    if crosschecks > 0 {
        heads.push(format!("{crosschecks} CROSS-CHECK NOT OK"));
    }
    let title = if heads.is_empty() {
        "OK · hushwatch".to_string()
    } else {
        format!("{} · hushwatch", heads.join(", "))
    };
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                meta http-equiv="refresh" content=(REFRESH_SECONDS);
                meta name="referrer" content="no-referrer";
                title { (Shown(&title)) }
                // The page's own constant stylesheet, pinned by its hash in
                // the Content-Security-Policy: escaping it would change the
                // bytes the hash is taken over (and nothing in it comes from
                // config or events).
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    h1 { "hushwatch status" }
                    (summary(doc, firing))
                    p class="note" {
                        "As of "
                        time datetime=(now.to_rfc3339()) {
                            (Shown(now.format("%a %Y-%m-%d %H:%M:%S UTC").to_string()))
                        }
                        ". This page reloads every " (REFRESH_SECONDS) " s."
                    }
                }
                main {
                    (streams_table(doc))
                    (timelines_section(doc, timelines))
                    (reconciliation_section(doc))
                    (relay_section(doc))
                    (svix_section(doc))
                    (operator_section(doc))
                    (notifications_section(doc))
                    (audit_section(doc))
                    (replicas_section(doc))
                }
            }
        }
    };
    let mut h = page.into_string();
    h.push('\n');
    h
}

/// Firing streams the banner names; the rest are counted.
const BANNER_NAMES: usize = 5;

fn summary(doc: &StatusDoc, firing: usize) -> Markup {
    let total = doc.streams.len();
    let svix_alerts = doc
        .svix
        .as_ref()
        .map_or(0, |s| s.endpoints.iter().filter(|e| e.alerting()).count());
    let mut parts = Vec::new();
    if firing > 0 {
        // The banner names who is silent and who is on it, so a second
        // responder sees at a glance that someone already is (issue #27).
        let mut names: Vec<String> = doc
            .streams
            .iter()
            .filter(|s| s.firing())
            .take(BANNER_NAMES)
            .map(|s| {
                let mut on_it = Vec::new();
                if let Some(a) = s.ack() {
                    on_it.push(format!("acknowledged by {}", short(&a.by, AUTHOR_CHARS)));
                }
                if let Some(x) = s.silenced.as_ref().filter(|x| x.quiet_page) {
                    on_it.push(format!(
                        "silenced until {} by {}",
                        zoned(x.until, s.tz(), doc.now),
                        short(&x.by, AUTHOR_CHARS)
                    ));
                }
                if on_it.is_empty() {
                    s.name.clone()
                } else {
                    format!("{} ({})", s.name, on_it.join(", "))
                }
            })
            .collect();
        if firing > BANNER_NAMES {
            names.push(format!("and {} more", firing - BANNER_NAMES));
        }
        parts.push(format!(
            "FIRING: {} \u{2014} {firing} of {total} streams silent too long",
            names.join(", ")
        ));
    } else if doc.all_ok() {
        parts.push(format!("OK: all {total} streams within their thresholds"));
    }
    // Otherwise each part below says what is not OK.
    // A relay that pages is not OK (issue #44): named here, what to run
    // just below (`how_to_fix_relays`).
    let relays: Vec<String> = doc
        .streams
        .iter()
        .filter_map(|s| Some((s, s.relay.as_ref().filter(|r| !r.ok())?)))
        .map(|(s, r)| format!("{} ({})", s.name, r.state_words()))
        .collect();
    if !relays.is_empty() {
        let n = relays.len();
        let mut names: Vec<String> = relays.into_iter().take(BANNER_NAMES).collect();
        if n > BANNER_NAMES {
            names.push(format!("and {} more", n - BANNER_NAMES));
        }
        parts.push(format!(
            "RELAY NOT OK: {} \u{2014} events wait for the app",
            names.join(", ")
        ));
    }
    // A cross-check that is failing or found what no webhook said (issue
    // #45): named here, what to do just below (`how_to_fix_crosschecks`).
    let crosschecks: Vec<String> = doc
        .streams
        .iter()
        .filter_map(|s| Some((s, s.crosscheck.as_ref().filter(|c| !c.ok())?)))
        .map(|(s, c)| format!("{} ({})", s.name, c.state_words()))
        .collect();
    if !crosschecks.is_empty() {
        let n = crosschecks.len();
        let mut names: Vec<String> = crosschecks.into_iter().take(BANNER_NAMES).collect();
        if n > BANNER_NAMES {
            names.push(format!("and {} more", n - BANNER_NAMES));
        }
        parts.push(format!(
            "CROSS-CHECK NOT OK: {} \u{2014} the provider changed access no webhook told us about, or cannot be asked",
            names.join(", ")
        ));
    }
    let overdue: Vec<&str> = doc
        .streams
        .iter()
        .filter(|s| s.reconciliation_missing())
        .map(|s| s.name.as_str())
        .take(BANNER_NAMES)
        .collect();
    if !overdue.is_empty() {
        parts.push(format!(
            "reconciliation report overdue: {}",
            overdue.join(", ")
        ));
    }
    if svix_alerts > 0 {
        parts.push(format!("{svix_alerts} Svix endpoint(s) need attention"));
    }
    if doc.degraded {
        parts.push(format!(
            "hushwatch degraded: {}",
            doc.degraded_reasons.join("; ")
        ));
    }
    if !doc.storage_ok {
        parts.push("storage is failing: events are refused".to_string());
    }
    let class = if doc.all_ok() {
        "summary"
    } else {
        "summary bad"
    };
    html! {
        p class=(class) id="summary" role="status" { (Shown(parts.join(" · "))) }
        (how_to_fix_relays(doc))
        (how_to_fix_crosschecks(doc))
        (how_to_acknowledge(doc))
    }
}

/// What to do for each cross-check that is not OK (the first few), right
/// under the banner: in words, and the command `/v1/status` gives.
fn how_to_fix_crosschecks(doc: &StatusDoc) -> Markup {
    let bad: Vec<_> = doc
        .streams
        .iter()
        .filter_map(|s| Some((s, s.crosscheck.as_ref().filter(|c| !c.ok())?)))
        .take(BANNER_NAMES)
        .collect();
    if bad.is_empty() {
        return html! {};
    }
    html! {
        div class="howto" id="how-to-crosscheck" {
            ul {
                @for (s, c) in bad {
                    li {
                        strong { (Shown(&s.name)) }
                        ": " (Shown(c.state_words()))
                        @if let Some(w) = c.what_to_do() { ": " (Shown(w)) }
                        @if let Some(cmd) = &c.command {
                            "; run " code class="long" { (Shown(cmd)) }
                        }
                    }
                }
            }
            p class="note" {
                "What each state means: the runbook's " code { "provider_missed" } " and "
                code { "crosscheck_failing" } " sections."
            }
        }
    }
}

/// What to run for each relay that is not OK (the first few), right under
/// the banner: the command `/v1/status` gives, exactly as printed.
fn how_to_fix_relays(doc: &StatusDoc) -> Markup {
    let bad: Vec<_> = doc
        .streams
        .iter()
        .filter_map(|s| Some((s, s.relay.as_ref().filter(|r| !r.ok())?)))
        .take(BANNER_NAMES)
        .collect();
    if bad.is_empty() {
        return html! {};
    }
    // One line per stream, so several relays and the stream rows below
    // still fit the first screen.
    html! {
        div class="howto" id="how-to-relay" {
            ul {
                @for (s, r) in bad {
                    li {
                        strong { (Shown(&s.name)) }
                        ": " (Shown(r.state_words()))
                        @if let Some(c) = &r.command {
                            "; run " code class="long" { (Shown(c)) }
                        }
                    }
                }
            }
            p class="note" {
                "Needs the admin token in " code { "$HUSHWATCH_ADMIN_TOKEN" } "; add " code { "--config" }
                " or " code { "--url" } " to reach the admin listener. What each state means: the runbook's relay sections."
            }
        }
    }
}

/// How to tell the others "I am on it", shown while a firing stream has
/// no acknowledgement: the CLI command and the API route, for the first
/// such stream (`hushwatch ack`, `POST /v1/streams/{stream}/acknowledge`,
/// both behind `[server] admin_token`).
fn how_to_acknowledge(doc: &StatusDoc) -> Markup {
    let Some(s) = doc.streams.iter().find(|s| s.firing() && s.ack().is_none()) else {
        return html! {};
    };
    html! {
        div class="howto" id="how-to-ack" {
            p {
                "Taking this on? Acknowledge it, so nobody else starts on it too \
                 (this also stops the episode's reminders and escalations):"
            }
            pre {
                code class="long" {
                    "hushwatch ack --stream " (Shown(shell_word(&s.name))) " --comment \"looking into it\""
                }
            }
            p class="note" {
                "Needs the admin token in " code { "$HUSHWATCH_ADMIN_TOKEN" } "; add " code { "--config" }
                " or " code { "--url" } " to reach the admin listener. Over HTTP: "
                code class="long" { "POST /v1/streams/" (Shown(path_segment(&s.name))) "/acknowledge" }
                " with the admin token as a Bearer token and a body like "
                code class="long" { "{\"created_by\": \"you\", \"comment\": \"looking into it\"}" }
                "."
            }
        }
    }
}

/// `name` percent-encoded for a URL path segment.
fn path_segment(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A short identifier (an event type, an id) stays whole: it never wraps
/// mid-word (`user.dele`/`ted`); a long one may wrap anywhere rather than
/// widen the page past a phone's screen.
fn ident(text: &str) -> Markup {
    ident_in(IdentTag::Code, text)
}

/// The element an identifier is shown in: `code`, or a `span` (a stream
/// name keeps the row's own font).
#[derive(Clone, Copy)]
enum IdentTag {
    Code,
    Span,
}

/// [`ident`] in a `code` or a `span` element.
fn ident_in(tag: IdentTag, text: &str) -> Markup {
    let long = displayable(text).chars().count() > IDENT_CHARS;
    let class = if long { "long" } else { "ident" };
    // A long event type may wrap, at its dots first (a break after
    // `organizationMembership.` reads better than one mid-word). A short
    // one never wraps, so needs none.
    let shown = html! {
        @if long {
            @for (i, part) in text.split('.').enumerate() {
                @if i > 0 { "." wbr; }
                (Shown(part))
            }
        } @else {
            (Shown(text))
        }
    };
    match tag {
        IdentTag::Code => html! { code class=(class) { (shown) } },
        IdentTag::Span => html! { span class=(class) { (shown) } },
    }
}

/// Longest identifier kept on one line: 28 monospace characters fit a
/// 390 px phone's stacked row.
const IDENT_CHARS: usize = 28;

/// A table's header row: one column heading per name (each row's cells
/// repeat it as `data-label`, which the stacked phone layout shows).
fn column_heads(names: &[&str]) -> Markup {
    html! {
        thead {
            tr {
                @for name in names {
                    th scope="col" { (name) }
                }
            }
        }
    }
}

fn streams_table(doc: &StatusDoc) -> Markup {
    html! {
        section aria-labelledby="streams-h" {
            h2 id="streams-h" { "Streams" }
            @if doc.streams.is_empty() {
                p { "No streams are configured." }
            } @else {
                table class="stack" id="streams" {
                    caption class="note" {
                        "Silence is counted in business time of each stream's calendar; times are shown in that calendar's zone and in UTC."
                    }
                    (column_heads(&["Stream", "State", "Business silence", "Business clock", "Last event", "Watching since"]))
                    tbody {
                        @for s in &doc.streams {
                            (stream_row(s, doc.now))
                        }
                    }
                }
            }
        }
    }
}

fn stream_row(s: &StreamStatus, now: DateTime<Utc>) -> Markup {
    let tz = s.tz();
    let state = if s.firing() { "firing" } else { "ok" };
    // State: words and colour, never colour alone.
    let state_text = match (s.firing(), s.firing_since) {
        (true, Some(t)) => format!("FIRING since {}", zoned_and_utc(t, tz, now)),
        (true, None) => "FIRING".to_string(),
        (false, _) => "OK".to_string(),
    };
    // Business silence against the threshold.
    let fraction = s.fraction();
    let bar_class = if fraction >= 1.0 {
        "fill over"
    } else if fraction >= 0.75 {
        "fill near"
    } else {
        "fill "
    };
    let silence = TimeDelta::seconds(s.business_silence_seconds);
    let threshold = TimeDelta::seconds(s.threshold_seconds);
    let pct = fraction * 100.0;
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
    let since = s
        .watching_since
        .map_or_else(|| "unknown".to_string(), |t| zoned_and_utc(t, tz, now));
    html! {
        tr id=(format_args!("stream-{}", id_of(&s.name))) data-state=(state)
            data-relay=[s.relay.as_ref().map(|r| Shown(&r.state))]
            data-acknowledged=(s.ack().is_some()) data-silenced=(s.silenced.is_some()) {
            th scope="row" {
                (ident_in(IdentTag::Span, &s.name)) br;
                span class="muted" { "calendar " (Shown(&s.calendar)) }
            }
            td data-label="State" class="state" {
                span class=(format_args!("badge {state}")) { (Shown(&state_text)) }
                // A relay that pages, in words (issue #44); the line below
                // the row says why and what to run.
                @if let Some(r) = s.relay.as_ref().filter(|r| !r.ok()) {
                    " " span class="badge firing" { "RELAY " (Shown(r.state.replace('_', " ").to_uppercase())) }
                }
                @if let Some(c) = s.crosscheck.as_ref().filter(|c| !c.ok()) {
                    " " span class="badge firing" { "CROSS-CHECK " (Shown(c.state.replace('_', " ").to_uppercase())) }
                }
                // Who is on it: badges in words, then the facts (issue #27).
                @if s.ack().is_some() {
                    " " span class="badge acked" { "ACKNOWLEDGED" }
                }
                @if let Some(x) = &s.silenced {
                    " " span class="badge silenced" {
                        @if x.quiet_page { "SILENCED" } @else { "PAGES PARTLY SILENCED" }
                    }
                }
                @let who = s.who_is_on_it(now);
                @if !who.is_empty() {
                    div class="who" {
                        ul {
                            @for line in &who { li { (Shown(line)) } }
                        }
                    }
                }
            }
            td data-label="Business silence" class="silence" {
                svg class="bar" role="img"
                    aria-label=(Shown(format!("{pct:.0}% of the {} threshold", human_duration(threshold))))
                    data-fraction=(format_args!("{fraction:.4}")) {
                    title { (Shown(human_duration(silence))) " of " (Shown(human_duration(threshold))) " business time" }
                    rect class="track" width="100%" height="100%" rx="3" {}
                    rect class=(bar_class) width=(format_args!("{pct:.2}%")) height="100%" rx="3" {}
                }
                span class="words" { (Shown(silence_words(s, now))) }
                @if let Some(n) = s.learned_note() {
                    span class="learned" { (Shown(n)) }
                }
            }
            td data-label="Business clock" class="clock" { (Shown(&clock)) }
            // Last event: type, arrival in both zones, lag.
            td data-label="Last event" class="last" {
                @match s.last_event_at {
                    Some(at) => {
                        (ident(s.last_event_type.as_deref().unwrap_or("?"))) br;
                        (Shown(zoned_and_utc(at, tz, now))) br;
                        span class="muted" { (Shown(human_duration(now - at))) " ago" }
                        @if let Some(lag) = s.newest_event_time.map(|e| at - e).filter(|lag| *lag >= TimeDelta::zero()) {
                            span class="muted" { " · lag " (Shown(human_duration(lag))) }
                        }
                    }
                    None => "nothing received yet",
                }
            }
            td data-label="Watching since" class="since" { (Shown(&since)) }
        }
        // The relay's line spans the row's width, right under it: on the
        // first screen, with what waits, the next attempt and the command.
        @if let Some(r) = &s.relay {
            tr class=(if r.ok() { "relayline" } else { "relayline bad" })
                id=(format_args!("relay-{}", id_of(&s.name))) data-relay=(Shown(&r.state)) {
                td colspan="6" data-label="Relay" { (relay_line_html(&r.line(tz, now))) }
            }
        }
        // The cross-check's line, the same way (issue #45).
        @if let Some(c) = &s.crosscheck {
            tr class=(if c.ok() { "relayline" } else { "relayline bad" })
                id=(format_args!("crosscheck-{}", id_of(&s.name))) data-crosscheck=(Shown(&c.state)) {
                td colspan="6" data-label="Cross-check" { (relay_line_html(&c.line(tz, now))) }
            }
        }
    }
}

/// The relay line with its command (the part in backticks) as code.
fn relay_line_html(line: &str) -> Markup {
    match line.rsplit_once(" (`") {
        Some((words, rest)) => html! {
            (Shown(words)) " (" code class="long" { (Shown(rest.trim_end_matches(')').trim_end_matches('`'))) } ")"
        },
        None => html! { (Shown(line)) },
    }
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

fn timelines_section(doc: &StatusDoc, timelines: &BTreeMap<String, Timeline>) -> Markup {
    if timelines.is_empty() {
        return html! {};
    }
    let missing = doc
        .streams
        .iter()
        .filter(|s| !timelines.contains_key(&s.name))
        .count();
    html! {
        section aria-labelledby="timeline-h" {
            h2 id="timeline-h" { "Last 7 days" }
            p class="note" {
                "Shaded: business hours. Each line: an arrival. Red diamond: silence reached the threshold."
            }
            @for s in &doc.streams {
                @if let Some(t) = timelines.get(&s.name) {
                    (timeline_svg(&s.name, s.tz(), t))
                }
            }
            @if missing > 0 {
                p class="note" { (missing) " more stream(s) are listed above without a timeline." }
            }
        }
    }
}

const TL_WIDTH: f64 = 1000.0;
const TL_HEIGHT: f64 = 40.0;
/// Room left and right of the plot inside the viewBox, so a mark at the
/// very start or end (an arrival now, a crossing an hour ago) is drawn
/// whole instead of half outside the picture.
const TL_PAD: f64 = 12.0;
/// Half the width of the threshold diamond (its height is twice this).
const TL_DIAMOND: f64 = 8.0;
/// The zoomed strip below the week: the last hours, where a week's scale
/// (6 px an hour) merges every recent arrival into one line.
const TL_ZOOM_HOURS: i64 = 24;
/// Top of the week strip and of the zoomed strip; the whole picture's height.
const TL_WEEK_TOP: f64 = 4.0;
const TL_ZOOM_TOP: f64 = 84.0;
const TL_VIEW_HEIGHT: f64 = 142.0;

/// Gridlines of a strip: local midnights (the week) or every few hours.
#[derive(Clone, Copy)]
enum Grid {
    Days,
    Hours(u32),
}

fn timeline_svg(name: &str, tz: Tz, t: &Timeline) -> Markup {
    let id = id_of(name);
    let desc = format!(
        "{} business-hour window(s) shaded, {} arrival(s){}, threshold crossed {} time(s){}. \
         Below: the last {TL_ZOOM_HOURS} hours.",
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
    let zoom_from = (t.end - TimeDelta::hours(TL_ZOOM_HOURS)).max(t.start);
    html! {
        figure {
            figcaption { (Shown(name)) }
            div class="scroll" {
                svg class="timeline" id=(format_args!("timeline-{id}")) role="img"
                    viewBox=(format_args!("{} 0 {} {TL_VIEW_HEIGHT}", -TL_PAD, TL_WIDTH + 2.0 * TL_PAD))
                    aria-labelledby=(format_args!("tl-{id}-t tl-{id}-d"))
                    data-arrivals=(t.arrivals.len()) data-crossings=(t.crossings.len()) {
                    title id=(format_args!("tl-{id}-t")) { (Shown(name)) " over the last 7 days" }
                    desc id=(format_args!("tl-{id}-d")) { (Shown(&desc)) }
                    (strip(tz, t, t.start, TL_WEEK_TOP, Grid::Days))
                    // Right-aligned: a phone shows the right (newest) end of the picture.
                    text class="strip" x=(TL_WIDTH) y=(format_args!("{:.1}", TL_ZOOM_TOP - 6.0)) text-anchor="end" {
                        "Last " (TL_ZOOM_HOURS) " hours"
                    }
                    (strip(tz, t, zoom_from, TL_ZOOM_TOP, Grid::Hours(3)))
                }
            }
        }
    }
}

/// One strip of the timeline: `[from, t.end]` drawn across the full width
/// at `top`, with business windows, the unwatched part, gridlines, the
/// arrivals (each at least 2 px wide whatever the scale: CSS
/// `vector-effect: non-scaling-stroke`) and a diamond per threshold crossing.
fn strip(tz: Tz, t: &Timeline, from: DateTime<Utc>, top: f64, grid: Grid) -> Markup {
    let span = (t.end - from).num_milliseconds().max(1) as f64;
    let x = |at: DateTime<Utc>| {
        ((at - from).num_milliseconds() as f64 / span * TL_WIDTH).clamp(0.0, TL_WIDTH)
    };
    let inside = |at: &DateTime<Utc>| *at >= from && *at <= t.end;
    // Gridlines: where, and their label.
    let mut marks: Vec<(DateTime<Utc>, String)> = Vec::new();
    match grid {
        Grid::Days => {
            // Local midnights, labelled with the weekday.
            let mut day = from
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
                marks.push((midnight, day.format("%a %d").to_string()));
                day = day.succ_opt().unwrap_or(day);
            }
        }
        Grid::Hours(every) => {
            // Whole local hours divisible by `every`, labelled "Tue 09:00"
            // at midnight and "12:00" otherwise.
            let mut at = from
                .with_timezone(&tz)
                .duration_trunc(TimeDelta::hours(1))
                .map(|t| t.to_utc())
                .unwrap_or(from);
            for _ in 0..=(TL_ZOOM_HOURS + 1) {
                at += TimeDelta::hours(1);
                // Room for the "now" label at the end.
                if at >= t.end - TimeDelta::hours(2) {
                    break;
                }
                let local = at.with_timezone(&tz);
                if !local.hour().is_multiple_of(every) {
                    continue;
                }
                let label = if local.hour() == 0 {
                    local.format("%a %d").to_string()
                } else {
                    local.format("%H:%M").to_string()
                };
                marks.push((at, label));
            }
        }
    }
    // All ticks in one path (~15 bytes each instead of ~90 as <line>s):
    // 100 streams x 500 arrivals stay well under a megabyte. Only numbers
    // go in it.
    let mut ticks = String::new();
    for a in t.arrivals.iter().filter(|a| inside(a)) {
        let _ = write!(ticks, "M{:.1} {}v{}", x(*a), top + 6.0, TL_HEIGHT - 6.0);
    }
    let label_y = top + TL_HEIGHT + 14.0;
    let line_end = top + TL_HEIGHT + 4.0;
    // Diamonds on the track's middle line, whole even at either end
    // (TL_PAD leaves room for their half-width).
    let mid = top + TL_HEIGHT / 2.0;
    let d = TL_DIAMOND;
    html! {
        rect class="bg" x="0" y=(top) width=(TL_WIDTH) height=(TL_HEIGHT) {}
        @for w in t.windows.iter().filter(|w| w.end > from) {
            @let (a, b) = (x(w.start.max(from)), x(w.end));
            rect class="biz" x=(format_args!("{a:.1}")) y=(top)
                width=(format_args!("{:.1}", (b - a).max(0.5))) height=(TL_HEIGHT) {}
        }
        // Before watching began nothing was counted: faded.
        @if t.watched_from > from {
            rect class="unwatched" x="0" y=(top) width=(format_args!("{:.1}", x(t.watched_from)))
                height=(TL_HEIGHT) { title { "not watched yet" } }
        }
        @for (at, label) in &marks {
            @let mx = x(*at);
            line class="day" x1=(format_args!("{mx:.1}")) x2=(format_args!("{mx:.1}")) y1=(top)
                y2=(format_args!("{line_end:.1}")) {}
            text x=(format_args!("{:.1}", mx + 2.0)) y=(format_args!("{label_y:.1}")) { (Shown(label)) }
        }
        @if let Grid::Hours(_) = grid {
            line class="now" x1=(TL_WIDTH) x2=(TL_WIDTH) y1=(top) y2=(format_args!("{line_end:.1}")) {}
            text x=(TL_WIDTH) y=(format_args!("{label_y:.1}")) text-anchor="end" { "now" }
        }
        @if !ticks.is_empty() {
            // Unescaped on purpose: the path is built just above from
            // formatted numbers only (`M`, `v`, digits, `.`, `-`, spaces),
            // nothing that needs escaping, and it is most of the page's
            // bytes (up to 500 arrivals a strip), so it skips the escaper.
            path class="tick" d=(PreEscaped(&ticks)) {}
        }
        @for c in t.crossings.iter().filter(|c| inside(c)) {
            path class="cross"
                d=(format_args!("M{:.1} {:.1} l{d} {d} l-{d} {d} l-{d} -{d} z", x(*c), mid - d)) {
                title { "threshold reached " (Shown(format!("{} · {}", zoned(*c, tz, t.end), utc(*c, t.end)))) }
            }
        }
    }
}

/// Silences and acknowledgements: why a firing stream may not be paging.
fn operator_section(doc: &StatusDoc) -> Markup {
    let Some(op) = &doc.operator else {
        return html! {};
    };
    let time = |t: DateTime<Utc>| Shown(t.format("%Y-%m-%d %H:%M UTC").to_string());
    html! {
        section aria-labelledby="op-h" {
            h2 id="op-h" { "Silences and acknowledgements" }
            @if let Some(e) = &op.error {
                p class="summary bad" id="operator-error" {
                    (Shown(e)) ": whether anyone acknowledged or silenced a stream is unknown."
                }
            }
            @if !op.silences.is_empty() {
                table class="stack" id="silences" {
                    (column_heads(&["Silence", "Streams", "From", "Until", "By", "Why"]))
                    tbody {
                        @for s in &op.silences {
                            @let covers = if !s.kinds.is_empty() && s.kinds != ["*"] {
                                format!("{} (pages: {})", s.streams.join(", "), s.kinds.join(", "))
                            } else {
                                s.streams.join(", ")
                            };
                            tr {
                                td data-label="Silence" {
                                    "#" (s.id) @if s.active { " (active)" } @else { " (planned)" }
                                }
                                td data-label="Streams" { (Shown(&covers)) }
                                td data-label="From" { (time(s.starts_at)) }
                                td data-label="Until" { (time(s.ends_at)) }
                                td data-label="By" { (Shown(&s.created_by)) }
                                td data-label="Why" { (Shown(&s.comment)) }
                            }
                        }
                    }
                }
            }
            @if !op.acknowledgements.is_empty() {
                table class="stack" id="acks" {
                    (column_heads(&["Acknowledged stream", "At", "By", "Why"]))
                    tbody {
                        @for a in &op.acknowledgements {
                            tr {
                                td data-label="Acknowledged stream" { (Shown(&a.stream)) }
                                td data-label="At" { (time(a.created_at)) }
                                td data-label="By" { (Shown(&a.created_by)) }
                                td data-label="Why" { (Shown(&a.comment)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One row per stream with `[streams.X.reconcile]`: is the job running,
/// its latest report and what that report found (times in the stream's zone).
fn reconciliation_section(doc: &StatusDoc) -> Markup {
    let rows: Vec<(&StreamStatus, &ReconciliationStatus)> = doc
        .streams
        .iter()
        .filter_map(|s| s.reconciliation.as_ref().map(|r| (s, r)))
        .collect();
    if rows.is_empty() {
        return html! {};
    }
    html! {
        section aria-labelledby="reconcile-h" {
            h2 id="reconcile-h" { "Reconciliation" }
            table class="stack" id="reconciliation" {
                (column_heads(&["Stream", "State", "Last report", "Next due", "Last drift"]))
                tbody {
                    @for (s, r) in rows {
                        (reconciliation_row(doc, s, r))
                    }
                }
            }
        }
    }
}

fn reconciliation_row(doc: &StatusDoc, s: &StreamStatus, r: &ReconciliationStatus) -> Markup {
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
    html! {
        tr data-state=(if r.missing_since.is_some() { "missing" } else { "ok" }) {
            th scope="row" { (Shown(&s.name)) }
            td data-label="State" { span class=(format_args!("badge {badge}")) { (Shown(&state)) } }
            td data-label="Last report" { (Shown(&last)) }
            td data-label="Next due" { (Shown(at(r.due_at))) }
            td data-label="Last drift" { (Shown(&drift)) }
        }
    }
}

/// One row per stream with `[streams.X.forward]`, or with relay rows stored
/// before its `[forward]` was removed: what is waiting for the app, how it
/// is failing, and what was given up (times in the stream's zone).
fn relay_section(doc: &StatusDoc) -> Markup {
    let rows: Vec<(&StreamStatus, &crate::status::model::ForwardStatus)> = doc
        .streams
        .iter()
        .filter_map(|s| s.forward.as_ref().map(|f| (s, f)))
        .collect();
    if rows.is_empty() {
        return html! {};
    }
    html! {
        section aria-labelledby="relay-h" {
            h2 id="relay-h" { "Relay to the app" }
            table class="stack" id="relay" {
                (column_heads(&["Stream", "App", "Pending", "Failures", "Dead letters", "Last delivered"]))
                tbody {
                    @for (s, f) in rows {
                        (relay_row(doc, s, f))
                    }
                }
            }
        }
    }
}

fn relay_row(doc: &StatusDoc, s: &StreamStatus, f: &crate::status::model::ForwardStatus) -> Markup {
    let tz = s.tz();
    let at = |t: Option<DateTime<Utc>>| {
        t.map_or_else(|| "none".to_string(), |t| zoned_and_utc(t, tz, doc.now))
    };
    let pending = match (f.pending, f.oldest_pending_at) {
        (0, _) | (_, None) => "0".to_string(),
        (n, Some(t)) => format!("{n} (oldest received {})", zoned_and_utc(t, tz, doc.now)),
    };
    let failures = match (&f.error, f.consecutive_failures) {
        (Some(e), _) => e.clone(),
        (None, 0) => "0".to_string(),
        (None, n) => format!(
            "{n} in a row since {}: {}",
            at(f.failing_since),
            f.last_error.as_deref().unwrap_or("failed")
        ),
    };
    let alerting = match &s.relay {
        Some(r) => !r.ok(),
        None => f.alerting(),
    };
    let badge = if alerting { "firing" } else { "ok" };
    let app = if f.configured {
        format!("{}{}", f.app, if f.ordered { " (ordered)" } else { "" })
    } else {
        "none: [forward] removed; stored events wait for it".to_string()
    };
    html! {
        tr data-state=(badge) {
            th scope="row" { (Shown(&s.name)) }
            td data-label="App" { (Shown(&app)) }
            td data-label="Pending" { (Shown(&pending)) }
            td data-label="Failures" {
                span class=(format_args!("badge {badge}")) { (Shown(short(&failures, 300))) }
            }
            td data-label="Dead letters" { (f.dead_letters) }
            td data-label="Last delivered" { (Shown(at(f.last_delivered_at))) }
        }
    }
}

fn svix_section(doc: &StatusDoc) -> Markup {
    let Some(svix) = &doc.svix else {
        return html! {};
    };
    html! {
        section aria-labelledby="svix-h" {
            h2 id="svix-h" { "Svix endpoints" }
            @if let Some(e) = &svix.error {
                p class="summary bad" { (Shown(e)) }
            } @else {
                @for source in &svix.grouped_sources {
                    p class="summary bad" {
                        "Svix source " (Shown(source)) " has more than " (svix.max_endpoints_per_source)
                        " endpoints; further endpoints are grouped as " code { "other" } "."
                    }
                }
                @if svix.endpoints.is_empty() {
                    p { "No operational webhook has named an endpoint yet." }
                } @else {
                    table class="stack" id="svix" {
                        (column_heads(&["Endpoint", "Source", "Feeds stream", "State", "Lost messages"]))
                        tbody {
                            @for e in &svix.endpoints {
                                (svix_row(e, doc.now))
                            }
                        }
                    }
                }
            }
        }
    }
}

fn svix_row(e: &SvixEndpoint, now: DateTime<Utc>) -> Markup {
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
    svix_recovered_unmapped(&mut state, e);
    html! {
        tr data-state=(Shown(&e.state)) {
            th scope="row" { code { (Shown(e.endpoint_uid.as_deref().unwrap_or(&e.endpoint_id))) } }
            td data-label="Source" { (Shown(&e.source)) }
            td data-label="Feeds stream" { (Shown(e.stream.as_deref().unwrap_or(""))) }
            td data-label="State" { span class=(format_args!("badge {badge}")) { (Shown(&state)) } }
            td data-label="Lost messages" {
                @if e.lost_messages.is_empty() {
                    "none"
                } @else {
                    @for (i, m) in e.lost_messages.iter().enumerate() {
                        @if i > 0 { " " }
                        code { (Shown(&m.msg_id)) }
                    }
                }
            }
        }
    }
}

/// Issue 31: lost messages recovered by their redelivery, and an endpoint
/// no mapping matched (its events are kept, not dropped).
fn svix_recovered_unmapped(state: &mut String, e: &SvixEndpoint) {
    if e.recovered_total > 0 {
        let _ = write!(
            state,
            ", {} lost message(s) recovered (redelivered)",
            e.recovered_total
        );
    }
    if e.unmapped {
        state.push_str(", unmapped (filed under the source's first stream)");
    }
}

fn notifications_section(doc: &StatusDoc) -> Markup {
    let Some(n) = &doc.notifications else {
        return html! {};
    };
    html! {
        section aria-labelledby="notify-h" {
            h2 id="notify-h" { "Notifications" }
            @if let Some(e) = &n.error {
                p class="summary bad" { "Outbox unreadable: " (Shown(e)) }
            } @else {
                table class="stack" id="notifiers" {
                    (column_heads(&["Notifier", "Kind", "Pending", "Delivered", "Failed", "Last error"]))
                    tbody {
                        @for (name, c) in &n.notifiers {
                            @let last = n
                                .recent_failures
                                .iter()
                                .filter(|f| &f.notifier == name)
                                .max_by_key(|f| f.at)
                                .map_or_else(
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
                            tr data-failed=(c.failed) {
                                th scope="row" { (Shown(name)) }
                                td data-label="Kind" { (Shown(&c.kind)) }
                                td data-label="Pending" { (c.pending) }
                                td data-label="Delivered" { (c.delivered) }
                                td data-label="Failed" {
                                    (c.failed)
                                    @if c.failed > 0 { " " span class="badge firing" { "FAILED" } }
                                }
                                td data-label="Last error" { (Shown(&last)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn audit_section(doc: &StatusDoc) -> Markup {
    let Some(a) = &doc.audit else {
        return html! {};
    };
    html! {
        section aria-labelledby="audit-h" {
            h2 id="audit-h" { "Audit log" }
            p id="audit" {
                @if let Some(e) = &a.error {
                    (Shown(e))
                } @else if !a.enabled && a.head_seq == 0 {
                    "The audit log is off."
                } @else {
                    @let short: String = a.head_hash.chars().take(16).collect();
                    "Head: entry #" (a.head_seq) " (hash " code { (Shown(&short)) "…" } "). "
                    @match &a.last_checkpoint {
                        Some(c) => {
                            "Last checkpoint: entry #" (c.seq) " at " (Shown(utc(c.at, doc.now))) " ("
                            @if c.signed { "signed" } @else { "unsigned" }
                            ")."
                        }
                        None => "No checkpoint yet.",
                    }
                }
            }
        }
    }
}

/// Only on a shared database: one SQLite process has nothing to show.
fn replicas_section(doc: &StatusDoc) -> Markup {
    let Some(r) = doc.replicas.as_ref().filter(|r| r.shared) else {
        return html! {};
    };
    let when = |t: Option<DateTime<Utc>>| t.map_or_else(|| "—".to_owned(), |t| utc(t, doc.now));
    html! {
        section aria-labelledby="replicas-h" {
            h2 id="replicas-h" { "Replicas" }
            p id="leader" {
                @match r.leader.as_ref().and_then(|l| Some((l.replica.as_ref()?, l))) {
                    Some((who, l)) => {
                        "Leader: " code { (Shown(who)) } ", term " (l.term)
                        @if let Some(until) = l.lease_until {
                            ", lease until " (Shown(utc(until, doc.now)))
                        }
                        "."
                    }
                    None => "No leader right now (the lease is being taken over).",
                }
                " This page was served by " code { (Shown(&r.this)) } "."
            }
            table {
                (column_heads(&["replica", "started", "last heartbeat", "role"]))
                tbody {
                    @for replica in &r.replicas {
                        tr {
                            td { code { (Shown(&replica.id)) } }
                            td { (Shown(when(replica.started_at))) }
                            td { (Shown(when(replica.last_seen))) }
                            td { @if replica.leader { "leader" } @else { "replica" } }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The identifier's HTML, to compare with the text expected.
    fn ident(text: &str) -> String {
        super::ident(text).into_string()
    }

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
    fn a_failing_relay_reads_with_its_backlog_failures_and_dead_letters_escaped() {
        let forward = serde_json::json!({"forward": {
            "app": "http://127.0.0.1:3000", "ordered": true, "clock": "delivered",
            "pending": 3, "oldest_pending_at": "2026-11-29T23:00:00Z",
            "last_delivered_at": "2026-11-29T22:00:00Z", "consecutive_failures": 5,
            "failing_since": "2026-11-29T23:00:01Z",
            "last_error": "http://127.0.0.1:3000 answered HTTP 502: <script>x</script>",
            "dead_letters": 1
        }});
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "streams": [stream(forward), stream(serde_json::json!({"name": "plain"}))]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(html.contains("Relay to the app</h2>"), "{html}");
        assert!(
            html.contains("3 (oldest received Mon 08:00 Asia/Tokyo · 23:00 UTC)"),
            "{html}"
        );
        assert!(html.contains("5 in a row since"), "{html}");
        assert!(!html.contains("<script>x"), "the app's answer is escaped");
        assert!(html.contains("(ordered)"));
        assert_eq!(
            html.matches("<tr data-state=\"firing\"").count(),
            1,
            "one relay row"
        );
    }

    #[test]
    fn a_relay_that_pages_turns_the_banner_and_names_what_to_run() {
        let relay = serde_json::json!({"relay": {
            "state": "failing", "problems": ["failing"],
            "command": "hushwatch forward retry --stream identity",
            "pending": 8, "consecutive_failures": 3,
            "failing_since": "2026-11-30T00:01:00Z", "last_error": "HTTP 400 <b>",
            "next_attempt_at": "2026-11-30T00:15:13Z",
            "oldest_pending": {"event_type": "user.deleted", "subject": "user_3",
                               "delivery_id": "msg_1", "received_at": "2026-11-30T00:01:00Z"}
        }});
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "streams": [stream(relay), stream(serde_json::json!({"name": "plain"}))]
        }));
        assert!(!d.all_ok(), "a failing relay is not OK");
        let html = render(&d, &BTreeMap::new());
        assert!(html.contains("<p class=\"summary bad\""), "{html}");
        assert!(!html.contains("OK: all"), "{html}");
        assert!(
            html.contains("RELAY NOT OK: identity (relay failing)"),
            "{html}"
        );
        assert!(html.contains("<title>1 RELAY NOT OK · hushwatch</title>"));
        assert!(html.contains(
            "<li><strong>identity</strong>: relay failing; run <code class=\"long\">hushwatch forward retry --stream identity</code></li>"
        ), "{html}");
        assert!(html.contains("data-relay=\"failing\""), "{html}");
        assert!(html.contains(">RELAY FAILING</span>"), "{html}");
        assert!(html.contains(
            "relay failing: 8 pending, oldest user.deleted user_3 since 09:01, 3 failed attempt(s) in a row: HTTP 400 &lt;b&gt;, next attempt 09:15:13 (<code class=\"long\">hushwatch forward retry --stream identity</code>)"
        ), "{html}");
        // The same document, OK: green, no how-to.
        let ok = serde_json::json!({"relay": {"state": "ok", "problems": []}});
        let d = doc(serde_json::json!({"now": "2026-11-30T00:13:00Z", "streams": [stream(ok)]}));
        assert!(d.all_ok());
        let html = render(&d, &BTreeMap::new());
        assert!(html.contains("OK: all 1 streams within their thresholds"));
        assert!(!html.contains("how-to-relay"));
        assert!(html.contains("relay ok: nothing waiting"));
    }

    #[test]
    fn long_event_types_wrap_at_their_dots() {
        let long = "organizationMembership.deleted.by_admin";
        assert_eq!(
            ident(long),
            "<code class=\"long\">organizationMembership.<wbr>deleted.<wbr>by_admin</code>"
        );
    }

    #[test]
    fn a_stream_whose_forward_was_removed_shows_its_stored_events_as_waiting() {
        let forward = serde_json::json!({"forward": {
            "configured": false, "pending": 2, "oldest_pending_at": "2026-11-29T23:00:00Z",
            "consecutive_failures": 3, "failing_since": "2026-11-29T23:00:01Z",
            "last_error": "the stream no longer has [forward] in the config", "dead_letters": 0
        }});
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z", "streams": [stream(forward)]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(
            html.contains("none: [forward] removed; stored events wait for it"),
            "{html}"
        );
        assert!(html.contains("<tr data-state=\"firing\""), "{html}");
        let f = d.streams[0].forward.as_ref().unwrap();
        assert!(!f.configured && f.alerting());
        assert!(f
            .words(|t| t.to_string())
            .starts_with("relay with no [forward] configured"));
        let drained = crate::status::model::ForwardStatus {
            pending: 0,
            ..f.clone()
        };
        assert!(
            !drained.alerting(),
            "nothing left to deliver: not red for ever"
        );
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
    fn who_is_on_it_is_escaped_cut_and_named_in_the_banner() {
        let long_by = "x".repeat(300);
        let d = doc(serde_json::json!({
            "now": "2026-11-30T05:05:00Z",
            "streams": [
                stream(serde_json::json!({
                    "state": "firing", "firing_since": "2026-11-30T04:00:00Z",
                    "acknowledged": {"by": "<b>ana</b>\u{202e}", "at": "2026-11-30T05:00:00Z",
                                     "comment": "on it <script>"},
                    "silenced": {"id": 3, "until": "2026-11-30T07:00:00Z", "by": long_by,
                                 "comment": "c", "kinds": ["silence"], "quiet_page": true}
                })),
                stream(serde_json::json!({"name": "billing", "state": "firing",
                                          "firing_since": "2026-11-30T04:00:00Z"})),
            ]
        }));
        let html = render(&d, &BTreeMap::new());
        assert!(
            !html.contains("<b>ana") && !html.contains("<script>"),
            "{html}"
        );
        assert!(!html.contains('\u{202e}'));
        assert!(html.contains(
            "acknowledged by &lt;b&gt;ana&lt;/b&gt; at Mon 14:00 Asia/Tokyo · 05:00 UTC: \u{201c}on it &lt;script&gt;\u{201d}"
        ), "{html}");
        assert!(html.contains(&format!(
            "silenced (pages: silence) until Mon 16:00 Asia/Tokyo · 07:00 UTC by {}…",
            "x".repeat(39)
        )));
        assert!(
            !html.contains(&"x".repeat(41)),
            "the row cuts a long author"
        );
        assert!(html.contains(
            "FIRING: identity (acknowledged by &lt;b&gt;ana&lt;/b&gt;, silenced until Mon 16:00 Asia/Tokyo by "
        ), "{html}");
        assert!(
            html.contains("billing \u{2014} 2 of 2 streams silent too long"),
            "{html}"
        );
        // billing has nobody on it: the how-to names it.
        assert!(
            html.contains("hushwatch ack --stream billing --comment"),
            "{html}"
        );
        assert!(html.contains("data-acknowledged=\"true\" data-silenced=\"true\""));
    }

    #[test]
    fn the_banner_names_five_firing_streams_and_counts_the_rest() {
        let streams: Vec<_> = (0..7)
            .map(|i| stream(serde_json::json!({"name": format!("s{i}"), "state": "firing"})))
            .collect();
        let d = doc(serde_json::json!({"now": "2026-11-30T05:05:00Z", "streams": streams}));
        let html = render(&d, &BTreeMap::new());
        assert!(
            html.contains("FIRING: s0, s1, s2, s3, s4, and 2 more \u{2014} 7 of 7 streams"),
            "{html}"
        );
    }

    #[test]
    fn short_identifiers_stay_whole_and_odd_stream_names_are_quoted() {
        assert_eq!(
            ident("user.deleted"),
            "<code class=\"ident\">user.deleted</code>"
        );
        assert!(ident(&"a.".repeat(20)).starts_with("<code class=\"long\">"));
        assert_eq!(shell_word("identity-1.x"), "identity-1.x");
        assert_eq!(shell_word("a b'c"), "'a b'\\''c'");
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn the_policy_pins_the_stylesheet_by_hash() {
        let csp = content_security_policy();
        assert!(csp.starts_with("default-src 'none'; style-src 'sha256-"));
        assert!(!csp.contains("unsafe"));
    }

    #[test]
    fn a_cross_check_that_found_missed_revocations_or_is_failing_turns_the_banner_and_says_what_to_do(
    ) {
        let findings = serde_json::json!({"crosscheck": {
            "provider": "clerk", "state": "findings", "problems": ["findings"], "critical": true,
            "last_poll": "2026-11-30T00:10:00Z", "open_findings": 2, "open_revocations": 2,
            "findings": [{"direction": "revoke", "subject": "user_<b>2", "organization": "org_9"},
                         {"direction": "revoke", "subject": "user_7", "organization": "org_9"}],
            "command": "hushwatch audit subject --config /etc/hushwatch/hushwatch.toml --format text 'user_<b>2'"
        }});
        let failing = serde_json::json!({"name": "workforce", "crosscheck": {
            "provider": "workos", "state": "failing", "problems": ["failing"], "critical": true,
            "reason": "the WorkOS API refused the key: HTTP 401",
            "last_success": "2026-11-29T23:00:00Z",
            "command": "hushwatch crosscheck --config /etc/hushwatch/hushwatch.toml --stream workforce --dry-run"
        }});
        let d = doc(serde_json::json!({
            "now": "2026-11-30T00:13:00Z",
            "streams": [stream(findings), stream(failing), stream(serde_json::json!({"name": "plain"}))]
        }));
        assert!(!d.all_ok());
        let html = render(&d, &BTreeMap::new());
        assert!(
            html.contains("<title>2 CROSS-CHECK NOT OK · hushwatch</title>"),
            "{html}"
        );
        assert!(
            html.contains("CROSS-CHECK NOT OK: identity (2 missed revocations (Clerk)), workforce (cross-check with WorkOS failing)"),
            "{html}"
        );
        assert!(html.contains("id=\"how-to-crosscheck\""), "{html}");
        assert!(
            html.contains(
                "give [crosscheck] api_key a WorkOS key that may read what the docs page"
            ),
            "{html}"
        );
        assert!(html.contains("CROSS-CHECK FINDINGS</span>"), "{html}");
        assert!(
            html.contains("cross-check: 2 missed revocations (Clerk): user_&lt;b&gt;2 in org_9, user_7 in org_9; last poll 09:10 \
             (<code class=\"long\">hushwatch audit subject --config /etc/hushwatch/hushwatch.toml --format text 'user_&lt;b&gt;2'</code>)"),
            "{html}"
        );
        assert!(
            html.contains(
                "cross-check failing: the WorkOS API refused the key: HTTP 401; last success 08:00"
            ),
            "{html}"
        );
        assert!(!html.contains("user_<b>"), "escaped");

        let ok = serde_json::json!({"crosscheck": {"provider": "clerk", "state": "ok"}});
        let d = doc(serde_json::json!({"now": "2026-11-30T00:13:00Z", "streams": [stream(ok)]}));
        assert!(d.all_ok());
        let html = render(&d, &BTreeMap::new());
        assert!(!html.contains("how-to-crosscheck"));
        assert!(html.contains("data-crosscheck=\"ok\""), "{html}");
    }
}
