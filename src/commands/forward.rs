//! `hushwatch forward list|retry|skip` (issue #44): thin clients of the
//! relay's operator routes (`/v1/streams/NAME/forwards…`, see
//! `http::forward_admin`), through the same exchange, token and
//! `Idempotency-Key` as `silence`, `ack` and `replay`
//! (`commands::silence::request`). `list` and `replay` print a table by
//! default (`--format json`: the server's answer as is).
//! Exit 0: done; 1: the server refused (its reason is printed, e.g. 404 for
//! an unknown webhook-id, 409 for one already delivered); 2: bad
//! arguments, missing token, or the server could not be reached.

use super::silence::{default_author, request, url_encode, Target, DEADLINE};
use serde_json::{json, Value};
use std::process::ExitCode;

/// Widest a table cell is printed; longer text ends in "…".
const CELL: usize = 60;

/// `forward list`.
pub struct ListArgs<'a> {
    pub stream: &'a str,
    pub state: Option<&'a str>,
    pub limit: Option<usize>,
    pub json: bool,
}

pub fn list(target: &Target<'_>, args: &ListArgs<'_>) -> ExitCode {
    let mut path = format!("/v1/streams/{}/forwards", url_encode(args.stream));
    let mut query = Vec::new();
    if let Some(state) = args.state {
        query.push(format!("state={}", url_encode(state)));
    }
    if let Some(limit) = args.limit {
        query.push(format!("limit={limit}"));
    }
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query.join("&"));
    }
    match request(target, hyper::Method::GET, &path, None, DEADLINE) {
        Ok(answer) if args.json => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Ok(answer) => {
            print!("{}", list_table(&answer));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `forward retry`.
pub fn retry(
    target: &Target<'_>,
    stream: &str,
    id: Option<&str>,
    comment: Option<&str>,
    created_by: Option<&str>,
) -> ExitCode {
    let mut body = json!({
        "created_by": created_by.map_or_else(default_author, str::to_string),
    });
    if let Some(id) = id {
        body["id"] = json!(id);
    }
    if let Some(comment) = comment {
        body["comment"] = json!(comment);
    }
    let path = format!("/v1/streams/{}/forwards/retry", url_encode(stream));
    match request(target, hyper::Method::POST, &path, Some(body), DEADLINE) {
        Ok(answer) => {
            let due = answer["due_now"].as_u64().unwrap_or(0);
            let held = answer["held"].as_u64().unwrap_or(0);
            match id {
                Some(id) => println!("{}: {} is due now", clean(stream), clean(id)),
                None => println!("{}: {due} pending event(s) due now", clean(stream)),
            }
            if held > 0 {
                println!(
                    "{held} held event(s) stay held until their cause is fixed \
                     (hushwatch forward list --stream {} --state held)",
                    clean(stream)
                );
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `forward skip`.
pub fn skip(
    target: &Target<'_>,
    stream: &str,
    id: &str,
    comment: &str,
    created_by: Option<&str>,
) -> ExitCode {
    let body = json!({
        "id": id,
        "comment": comment,
        "created_by": created_by.map_or_else(default_author, str::to_string),
    });
    let path = format!("/v1/streams/{}/forwards/skip", url_encode(stream));
    match request(target, hyper::Method::POST, &path, Some(body), DEADLINE) {
        Ok(_) => {
            println!(
                "{}: {} is a dead letter now; the events behind it go on \
                 (send it again later with: hushwatch replay --stream {} --dead-letters)",
                clean(stream),
                clean(id),
                clean(stream)
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Text from the server (event types and errors come from providers and
/// the app) made safe for a terminal: control characters shown escaped,
/// at most [`CELL`] characters.
fn clean(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == CELL {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => clean(s),
        other => clean(&other.to_string()),
    }
}

/// Columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = String>| {
        let text: Vec<String> = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", text.join("  ").trim_end())
    };
    let mut out = line(&mut header.iter().map(|h| h.to_string()));
    for row in rows {
        out.push_str(&line(&mut row.iter().cloned()));
    }
    out
}

/// `forward list`'s table: one row per event, then what was not shown.
pub(super) fn list_table(answer: &Value) -> String {
    let events = answer["events"].as_array().cloned().unwrap_or_default();
    let stream = cell(&answer["stream"]);
    if events.is_empty() {
        return format!("{stream}: no undelivered events\n");
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let error = match (&e["last_status"], &e["last_error"]) {
                (Value::Null, error) => cell(error),
                (status, Value::Null) => cell(status),
                (_, error) => cell(error),
            };
            vec![
                cell(&e["id"]),
                cell(&e["type"]),
                cell(&e["subject"]),
                cell(&e["state"]),
                cell(&e["received_at"]),
                cell(&e["attempts"]),
                cell(&e["next_attempt_at"]),
                error,
            ]
        })
        .collect();
    let mut out = table(
        &[
            "ID",
            "TYPE",
            "SUBJECT",
            "STATE",
            "RECEIVED",
            "ATTEMPTS",
            "NEXT ATTEMPT",
            "LAST ERROR",
        ],
        &rows,
    );
    let total = answer["total"].as_u64().unwrap_or(0);
    let more = answer["more"].as_u64().unwrap_or(0);
    if more > 0 {
        out.push_str(&format!(
            "{} of {total} shown, oldest first; {more} more not shown (--limit up to {})\n",
            rows.len(),
            crate::domain::forward_ops::LIST_MAX
        ));
    } else {
        out.push_str(&format!("{total} event(s)\n"));
    }
    out
}

/// `replay`'s table: what was (or would be) sent, then the counts.
pub(super) fn replay_table(answer: &Value) -> String {
    let rows: Vec<Vec<String>> = answer["deliveries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            vec![
                cell(&d["id"]),
                cell(&d["type"]),
                cell(&d["received_at"]),
                cell(&d["state"]),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        String::new()
    } else {
        table(&["ID", "TYPE", "RECEIVED", "WAS"], &rows)
    };
    let count = answer["requeued"].as_u64().unwrap_or(0);
    if count > rows.len() as u64 {
        out.push_str(&format!("({} listed of {count})\n", rows.len()));
    }
    let what = if answer["dry_run"].as_bool() == Some(true) {
        format!("would send {count}")
    } else {
        format!("sent again: {count}")
    };
    let pending = answer["already_pending"].as_u64().unwrap_or(0);
    let scope = if answer["dead_letters"].as_bool() == Some(true) {
        "dead letter(s)".to_string()
    } else {
        format!(
            "stored event(s) received from {} to {}",
            cell(&answer["from"]),
            cell(&answer["to"])
        )
    };
    out.push_str(&format!("{}: {what} {scope}", cell(&answer["stream"])));
    if pending > 0 {
        out.push_str(&format!("; {pending} still pending, not sent twice"));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_escape_what_the_server_relays_and_say_what_was_left_out() {
        let answer = json!({
            "stream": "clerk", "total": 3, "more": 2,
            "events": [{
                "id": "msg_1", "type": "user.deleted\u{1b}[2J", "subject": "user_1",
                "state": "pending", "received_at": "2026-12-03T22:46:00.000Z", "attempts": 4,
                "next_attempt_at": "2026-12-03T22:51:13.000Z",
                "last_error": "answered HTTP 400", "last_status": 400
            }]
        });
        let text = list_table(&answer);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("user.deleted\\u{1b}[2J"));
        assert!(text.contains("answered HTTP 400"));
        assert!(text.contains("1 of 3 shown"));
        assert!(text.starts_with("ID "));
        let dry = replay_table(&json!({
            "stream": "clerk", "dead_letters": true, "dry_run": true, "requeued": 1200,
            "already_pending": 0, "deliveries": [{"id": "a", "type": "t", "received_at": "x", "state": "dead"}]
        }));
        assert!(dry.contains("would send 1200 dead letter(s)"), "{dry}");
        assert!(dry.contains("(1 listed of 1200)"));
        assert_eq!(clean(&"x".repeat(100)).chars().count(), CELL + 1);
    }
}
