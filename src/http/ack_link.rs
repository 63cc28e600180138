//! `GET`/`POST /ack/{code}`: the acknowledge links in pages (issue #30;
//! the codes are `store::ack_codes`, minted by `service::delivery`).
//!
//! - `GET` only shows a small confirmation page with a form: link scanners
//!   in mail gateways and chat unfurlers fetch links, and must not
//!   acknowledge anything by doing so.
//! - `POST` (the form) acknowledges the episode the code names, exactly as
//!   `POST /v1/streams/{stream}/acknowledge` does (audited, `created_by`
//!   "link"), and retires the episode's other codes in the same
//!   transaction.
//! - The code is the credential: an unknown, expired or used code, a code
//!   whose episode ended, and anything not shaped like a code all get the
//!   same 404 page (the shape check answers without a store read). The
//!   store looks the code up by SHA-256 and compares in constant time.
//! - Bounded like every unauthenticated route: the head by the server's
//!   limits, the (ignored) form body read through `body::read` under
//!   `MAX_BODY` and the body deadline, store calls under the store timeout.
//! - The code never reaches a log: nothing here logs the path, and the
//!   pages are `no-store` with `Referrer-Policy: no-referrer`, so the URL
//!   does not leave in a `Referer` either.

use super::api::Api;
use super::body;
use super::guard::body_failure;
use super::reply::{self, Reply};
use crate::status::page::esc;
use crate::store::ack_codes::{code_hash, well_formed, LinkState, LinkUse};
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, ALLOW};
use hyper::{Method, Request, StatusCode};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// The route: `GET` shows, `POST` confirms, anything else is 405.
pub(super) async fn handle(
    app: &dyn Api,
    code: &str,
    req: Request<Incoming>,
    deadline: Instant,
) -> Reply {
    match *req.method() {
        Method::GET => show(app, code).await,
        Method::POST => confirm(app, code, req, deadline).await,
        _ => {
            let mut r = reply::error(StatusCode::METHOD_NOT_ALLOWED, "use GET or POST");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, POST"));
            r
        }
    }
}

async fn show(app: &dyn Api, code: &str) -> Reply {
    if !well_formed(code) {
        return not_found();
    }
    match app.open_ack_code(code_hash(code)).await {
        Ok(LinkState::Open { stream, started_at }) => {
            html(StatusCode::OK, &confirm_page(&stream, started_at))
        }
        Ok(LinkState::AlreadyAcknowledged { stream, started_at }) => {
            html(StatusCode::OK, &already_page(&stream, started_at))
        }
        Ok(LinkState::Unknown) => not_found(),
        Err(_) => unavailable(),
    }
}

async fn confirm(app: &dyn Api, code: &str, req: Request<Incoming>, deadline: Instant) -> Reply {
    let (parts, body) = req.into_parts();
    // The form's body says nothing the code does not; it is read (bounded)
    // only so the connection can carry the answer and another request.
    if let Err(e) = body::read(&parts, body, deadline).await {
        let (status, _, reason) = body_failure(e);
        return reply::error(status, reason);
    }
    if !well_formed(code) {
        return not_found();
    }
    match app.confirm_ack_code(code_hash(code)).await {
        Ok(LinkUse::Acknowledged { stream, started_at }) => {
            html(StatusCode::OK, &done_page(&stream, started_at))
        }
        Ok(LinkUse::AlreadyAcknowledged { stream, started_at }) => {
            html(StatusCode::OK, &already_page(&stream, started_at))
        }
        Ok(LinkUse::Unknown) => not_found(),
        Err(_) => unavailable(),
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#1b1b1b}\
h1{font-size:1.4rem}button{font-size:1.1rem;padding:.6rem 1.2rem;background:#b3261e;color:#fff;border:0;border-radius:4px;cursor:pointer}\
.note{color:#555;font-size:.9rem}";

/// Scripts none, styles only the one above, the form may post only here,
/// and no framing (a framed confirm button could be clickjacked).
fn content_security_policy() -> String {
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(STYLE.as_bytes()));
    format!(
        "default-src 'none'; style-src 'sha256-{hash}'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    )
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\">\
         <title>{title} - hushwatch</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n",
        title = esc(title),
    )
}

/// The confirmation page: the form posts to this same URL (no `action`,
/// so it also works behind a proxy that serves hushwatch under a path).
pub(super) fn confirm_page(stream: &str, started_at: DateTime<Utc>) -> String {
    document(
        "Acknowledge alert",
        &format!(
            "<h1>Acknowledge the alert on stream <code id=\"stream\">{s}</code>?</h1>\n\
             <p>It has been firing since <time>{t}</time>. Acknowledging stops reminders and \
             escalations for this alert; it still resolves when events arrive again.</p>\n\
             <form method=\"post\"><button type=\"submit\" id=\"confirm\">Acknowledge</button></form>\n\
             <p class=\"note\">Nothing is acknowledged until you press the button.</p>",
            s = esc(stream),
            t = esc(&rfc(started_at)),
        ),
    )
}

pub(super) fn done_page(stream: &str, started_at: DateTime<Utc>) -> String {
    document(
        "Acknowledged",
        &format!(
            "<h1 id=\"result\">Acknowledged</h1>\n<p>The alert on stream <code>{s}</code> \
             (firing since <time>{t}</time>) is acknowledged. The other links to it no longer \
             acknowledge anything.</p>",
            s = esc(stream),
            t = esc(&rfc(started_at)),
        ),
    )
}

pub(super) fn already_page(stream: &str, started_at: DateTime<Utc>) -> String {
    document(
        "Already acknowledged",
        &format!(
            "<h1 id=\"result\">Already acknowledged</h1>\n<p>The alert on stream <code>{s}</code> \
             (firing since <time>{t}</time>) was already acknowledged.</p>",
            s = esc(stream),
            t = esc(&rfc(started_at)),
        ),
    )
}

/// One page for every code that opens nothing.
pub(super) fn unknown_page() -> String {
    document(
        "Link not valid",
        "<h1 id=\"result\">This link is not valid</h1>\n<p>It was used already, expired, or \
         its alert resolved. <code>GET /v1/status</code> or the status page shows what is firing \
         now; <code>hushwatch ack</code> acknowledges through the API.</p>",
    )
}

fn html(status: StatusCode, body: &str) -> Reply {
    let mut response = reply::text(status, "text/html; charset=utf-8", body.to_string());
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    set("content-security-policy", &content_security_policy());
    set("x-content-type-options", "nosniff");
    set("referrer-policy", "no-referrer");
    set("cache-control", "no-store");
    set("x-robots-tag", "noindex");
    response
}

fn not_found() -> Reply {
    html(StatusCode::NOT_FOUND, &unknown_page())
}

fn unavailable() -> Reply {
    let body = document(
        "Try again",
        "<h1 id=\"result\">hushwatch cannot reach its storage</h1>\n<p>Nothing was \
         acknowledged. Try the link again in a minute.</p>",
    );
    html(StatusCode::SERVICE_UNAVAILABLE, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_escape_what_they_show() {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        for page in [
            confirm_page("<script>x</script>\"'&", t),
            done_page("<b>", t),
            already_page("<b>", t),
        ] {
            assert!(!page.contains("<script>x"), "{page}");
            assert!(!page.contains("<b>"), "{page}");
            assert!(page.contains("&lt;"), "{page}");
        }
        let form = confirm_page("s", t);
        assert!(form.contains("<form method=\"post\">"));
        assert!(!form.contains("action="), "posts to its own URL");
        assert!(!unknown_page().contains("<form"));
    }
}
