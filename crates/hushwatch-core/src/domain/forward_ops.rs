//! The operator's decisions about relay rows (issue #44): which rows
//! `forward list` shows, what `forward retry` and `forward skip` may do to
//! a row in a given state, how a replay walks its rows in bounded chunks,
//! and the audit lines these actions leave. The store
//! (`store::forward_admin`) reads and writes the rows; every choice about
//! them is one of these functions, so SQLite and PostgreSQL cannot
//! disagree.
//!
//! Row states are `pending` (queued), `held` (hushwatch itself cannot send
//! it until its cause is fixed), `delivered` and `dead` (a dead letter).

use chrono::{DateTime, SecondsFormat, Utc};

/// Rows one `forward list` answer shows at most; the rest are counted.
pub const LIST_MAX: usize = 500;
/// Rows a `forward list` shows when no limit is given.
pub const LIST_DEFAULT: usize = 100;

/// Rows one replay transaction looks at, at most: small enough that
/// SQLite's single writer is back for ingest within milliseconds, large
/// enough that a million-row window takes a few thousand short transactions
/// (2,000 let webhooks wait over a second behind a replay in a debug build
/// on a loaded 2-core machine).
pub const REPLAY_CHUNK: usize = 500;

/// The states `forward list --state` takes; none means every undelivered
/// row (pending, held and dead).
pub const LISTED_STATES: [&str; 3] = ["pending", "held", "dead"];

/// `--state`/`?state=` checked: `Ok(None)` for every undelivered state.
pub fn list_state(text: Option<&str>) -> Result<Option<&'static str>, String> {
    match text {
        None | Some("") => Ok(None),
        Some(s) => LISTED_STATES
            .iter()
            .find(|known| **known == s)
            .map(|known| Some(*known))
            .ok_or_else(|| {
                format!(
                    "state must be one of {} (not {:?})",
                    LISTED_STATES.join(", "),
                    s.chars().take(32).collect::<String>()
                )
            }),
    }
}

/// `?limit=` checked: 1 to [`LIST_MAX`], [`LIST_DEFAULT`] when absent.
pub fn list_limit(text: Option<&str>) -> Result<usize, String> {
    let Some(text) = text else {
        return Ok(LIST_DEFAULT);
    };
    match text.parse::<usize>() {
        Ok(n) if (1..=LIST_MAX).contains(&n) => Ok(n),
        _ => Err(format!("limit must be a whole number from 1 to {LIST_MAX}")),
    }
}

/// What an operator action may do to one row, by the row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Do it.
    Go,
    /// No row with that webhook-id in that stream: 404.
    Unknown,
    /// The app already accepted it: 409.
    Delivered,
    /// It is a dead letter already: 409 (replay it instead).
    Dead,
    /// hushwatch cannot send it until its cause is fixed: 409 for a retry.
    Held,
}

/// `forward skip`: a pending or held row becomes a dead letter now.
pub fn skip_verdict(state: Option<&str>) -> Verdict {
    match state {
        None => Verdict::Unknown,
        Some("pending" | "held") => Verdict::Go,
        Some("dead") => Verdict::Dead,
        Some(_) => Verdict::Delivered,
    }
}

/// `forward retry --id`: only a pending row can be tried now. A held row
/// stays held: what holds it (a missing key, a missing `[forward]`) is not
/// fixed by trying again, and it is released when the cause is gone.
pub fn retry_verdict(state: Option<&str>) -> Verdict {
    match state {
        None => Verdict::Unknown,
        Some("pending") => Verdict::Go,
        Some("held") => Verdict::Held,
        Some("dead") => Verdict::Dead,
        Some(_) => Verdict::Delivered,
    }
}

/// Which rows a replay re-queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayScope {
    /// Delivered and dead rows received in the request's window.
    Window,
    /// Every dead letter of the stream, whenever it arrived.
    DeadLetters,
}

/// Where a replay stopped: the (received at in epoch ms, row id) of the
/// last row it looked at. The window scope walks rows in (received_at, id)
/// order, the dead-letter scope in id order (its received at is unused).
pub type Cursor = (i64, i64);

/// The cursor before the first row of a window starting at `from_ms`.
pub fn first_cursor(from_ms: i64) -> Cursor {
    (from_ms, i64::MIN)
}

/// The rows a chunk covers end at the row `REPLAY_CHUNK - 1` places after
/// the cursor; none there means the chunk reaches the end of the scope
/// (`last_ms`, its last instant, inclusive) and is the last (the one that
/// writes the audit entry).
pub fn chunk_end(found: Option<Cursor>, last_ms: i64) -> (Cursor, bool) {
    match found {
        Some(end) => (end, false),
        None => ((last_ms, i64::MAX), true),
    }
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn because(comment: Option<&str>) -> String {
    comment
        .filter(|c| !c.is_empty())
        .map(|c| format!(": {c}"))
        .unwrap_or_default()
}

/// The audit entry type of a `forward skip`.
pub fn skip_summary(by: &str, delivery_id: &str, comment: &str) -> String {
    format!(
        "forward skip by {by}: {delivery_id} is a dead letter{}",
        because(Some(comment))
    )
}

/// The `last_error` a skipped row keeps (shown by `forward list`).
pub fn skipped_error(by: &str, at: DateTime<Utc>, comment: &str) -> String {
    format!("skipped by {by} at {}{}", rfc(at), because(Some(comment)))
}

/// The audit entry type of a `forward retry`: which event (or all) and how
/// many were made due now.
pub fn retry_summary(
    by: &str,
    delivery_id: Option<&str>,
    due: u64,
    comment: Option<&str>,
) -> String {
    let what = delivery_id.map_or_else(|| "every pending event".to_string(), str::to_string);
    format!(
        "forward retry by {by}: {what} ({due} due now){}",
        because(comment)
    )
}

/// The audit entry type of a replay of every dead letter.
pub fn dead_letters_replay_summary(by: &str, count: u64, types: &[String]) -> String {
    let types = if types.is_empty() {
        String::new()
    } else {
        format!(" types={}", types.join(","))
    };
    format!("replay of dead letters by {by}: {count}{types}")
}

/// The audit entry type of one chunk of a longer replay, from the
/// replay's own entry type for that chunk's count (the last chunk's entry
/// gives the total): what a replay cut off midway had re-queued is in the
/// log.
pub fn replay_part_summary(chunk_summary: &str, so_far: u64) -> String {
    format!("{chunk_summary} (one chunk of a longer replay; {so_far} re-queued so far)")
}

/// The audit entry type when deleting a stream gives up its undelivered
/// events (`DELETE /v1/streams/NAME?force=true`).
pub fn given_up_summary(by: &str, count: u64) -> String {
    format!("stream deleted by {by} with force: {count} undelivered event(s) are dead letters")
}

/// The `last_error` of a row given up because its stream was deleted.
pub fn given_up_error(by: &str, at: DateTime<Utc>) -> String {
    format!("its stream was deleted by {by} at {} with force", rfc(at))
}

/// The 409 of a `DELETE` that would drop undelivered events.
pub fn undelivered_refusal(stream: &str, count: u64) -> String {
    format!(
        "stream {stream} has {count} undelivered relay event(s) (pending or held); \
         deleting it would leave them unsent. Deliver or skip them first \
         (hushwatch forward list --stream {stream}), or delete with ?force=true \
         to make them dead letters (audited and paged)"
    )
}

/// The prefix of a stream's held-page marks in `forward_marks` (one per
/// held row a page of the current episode covered; the separator ends it,
/// so stream `a` never matches the marks of stream `ab`).
pub fn held_mark(stream: &str) -> String {
    format!(
        "held_paged:{stream}{}",
        crate::domain::forward::QUEUE_SEPARATOR
    )
}

/// What a held check does while the held alert fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldNews {
    /// Every held row was covered by a page.
    Nothing,
    /// An episode paged before rows were marked: mark what is held now
    /// without a page (which of them it named is not known, and naming
    /// them again would page twice for the same events).
    Record,
    /// Rows were held since the last page: a follow-up names them.
    Page,
}

/// From whether the episode has marks and how many held rows have none.
pub fn held_news(marked: bool, unmarked: u64) -> HeldNews {
    match (marked, unmarked) {
        (_, 0) => HeldNews::Nothing,
        (false, _) => HeldNews::Record,
        (true, _) => HeldNews::Page,
    }
}

/// The follow-up of a firing held page: `new_events` is the held page's
/// text for the events held since (`domain::forward::held_summary`).
pub fn held_follow_up_summary(stream: &str, held: u64, new_events: &str) -> String {
    format!(
        "more events of stream {stream} were held since the last page ({held} held in all). {new_events}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_chunk_says_it_is_one_part_and_how_many_so_far() {
        assert_eq!(
            replay_part_summary("replay of dead letters by ana: 500", 1000),
            "replay of dead letters by ana: 500 (one chunk of a longer replay; 1000 re-queued so far)"
        );
    }

    #[test]
    fn a_held_page_is_followed_up_only_for_rows_held_after_it() {
        assert_eq!(held_news(true, 0), HeldNews::Nothing);
        assert_eq!(held_news(false, 0), HeldNews::Nothing);
        assert_eq!(held_news(true, 2), HeldNews::Page);
        assert_eq!(held_news(false, 2), HeldNews::Record);
        assert_eq!(held_mark("org:acme"), "held_paged:org:acme\u{1f}");
        assert!(held_follow_up_summary("identity", 3, "1 event(s) …").starts_with(
            "more events of stream identity were held since the last page (3 held in all). 1 event(s)"
        ));
    }

    #[test]
    fn list_filters_are_typed_and_bounded() {
        assert_eq!(list_state(None), Ok(None));
        assert_eq!(list_state(Some("held")), Ok(Some("held")));
        assert!(
            list_state(Some("delivered")).is_err(),
            "delivered rows are not listed"
        );
        assert_eq!(list_limit(None), Ok(LIST_DEFAULT));
        assert_eq!(list_limit(Some("500")), Ok(500));
        for bad in ["0", "501", "-1", "ten", ""] {
            assert!(list_limit(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn skip_and_retry_answer_by_state() {
        assert_eq!(skip_verdict(None), Verdict::Unknown);
        assert_eq!(skip_verdict(Some("pending")), Verdict::Go);
        assert_eq!(skip_verdict(Some("held")), Verdict::Go);
        assert_eq!(skip_verdict(Some("delivered")), Verdict::Delivered);
        assert_eq!(skip_verdict(Some("dead")), Verdict::Dead);
        assert_eq!(retry_verdict(Some("pending")), Verdict::Go);
        assert_eq!(retry_verdict(Some("held")), Verdict::Held);
        assert_eq!(retry_verdict(Some("dead")), Verdict::Dead);
        assert_eq!(retry_verdict(None), Verdict::Unknown);
    }

    #[test]
    fn a_chunk_without_an_end_row_is_the_last() {
        assert_eq!(chunk_end(Some((5, 9)), 100), ((5, 9), false));
        assert_eq!(chunk_end(None, 100), ((100, i64::MAX), true));
        assert_eq!(first_cursor(7), (7, i64::MIN));
    }

    #[test]
    fn audit_lines_say_who_what_and_why() {
        assert_eq!(
            skip_summary("ana", "msg_1", "poison event"),
            "forward skip by ana: msg_1 is a dead letter: poison event"
        );
        assert_eq!(
            retry_summary("ana", None, 3, None),
            "forward retry by ana: every pending event (3 due now)"
        );
        assert_eq!(
            dead_letters_replay_summary("ana", 2, &["user.deleted".into()]),
            "replay of dead letters by ana: 2 types=user.deleted"
        );
        assert!(undelivered_refusal("acme", 4).contains("4 undelivered"));
    }
}
