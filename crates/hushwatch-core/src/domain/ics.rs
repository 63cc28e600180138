//! All-day holidays from iCalendar (RFC 5545) text.
//!
//! Operators export public-holiday calendars as `.ics` files. This module turns
//! that text into [`IcsHoliday`] values that answer "is this local date a
//! holiday?" with a binary search over occurrence start dates. It is pure: the
//! caller reads the file and passes the text in, and passes the date the
//! expansion window is anchored on ([`ExpansionWindow::around`]); nothing here
//! reads the clock.
//!
//! What stays hand-written, and why: the line-level reader (unfolding,
//! content lines, BEGIN/END nesting, DATE values, DURATION, EXDATE/RDATE
//! lists, RECURRENCE-ID) and the RRULE *syntax* check. They are strict on
//! purpose and point at the physical line to fix, which no general iCalendar
//! crate does: a silently dropped holiday means pages on a day nobody is
//! working. The rule *semantics* (every FREQ, INTERVAL, COUNT, UNTIL, WKST,
//! BYMONTH, BYWEEKNO, BYYEARDAY, BYMONTHDAY, BYDAY with or without ordinals,
//! BYSETPOS) are expanded by the `rrule` crate, which follows RFC 5545 the way
//! python-dateutil does (its test-suite is ported from dateutil's).
//!
//! Supported. Anything else that would change *which dates* are holidays is
//! rejected with an [`IcsError`] naming the line, instead of being ignored:
//! - all-day VEVENTs (DTSTART is a DATE) with DTEND or a DURATION in whole days
//!   or weeks;
//! - RRULE with FREQ=DAILY, WEEKLY, MONTHLY or YEARLY and any of the parts
//!   above; DTSTART must be the rule's first occurrence (RFC 5545 counts
//!   DTSTART as an occurrence even when the rule would not produce it,
//!   dateutil does not; refusing the disagreement keeps both readings equal
//!   and catches the typo it almost always is);
//! - EXRULE (RFC 2445, deprecated by RFC 5545 but still exported by some
//!   tools): occurrences it produces are removed, expanded like an RRULE;
//! - RDATE with DATE values: extra occurrences of the same length;
//! - EXDATE, RECURRENCE-ID (a moved or cancelled occurrence) and
//!   STATUS:CANCELLED.
//!
//! Refused: FREQ=HOURLY/MINUTELY/SECONDLY and BYHOUR/BYMINUTE/BYSECOND (they
//! repeat within a day, which an all-day holiday cannot), X- rule parts,
//! RDATE with DATE-TIME or PERIOD values, RECURRENCE-ID;RANGE=THISANDFUTURE.
//!
//! Bounds. Recurring events are expanded only inside the window, at most
//! [`MAX_OCCURRENCES`] occurrence starts per calendar text, and a rule whose
//! DTSTART is so far before the window that reaching it would take more than
//! [`MAX_STEPS_BEFORE_WINDOW`] steps is refused, as is a file whose rules
//! together need more than [`MAX_STEPS_PER_FILE`]. A date outside the window is
//! only a holiday through a non-recurring event or an RDATE.
//!
//! Timed events are not holidays; they are counted in
//! [`IcsCalendar::skipped_timed_events`] so the caller can warn about them.

use std::fmt;

use chrono::{DateTime, Days, Month, Months, NaiveDate, NaiveTime, TimeZone, Weekday};
use rrule::{Frequency, NWeekday, RRule, RRuleSet, Tz as RuleTz, Unvalidated, Validated};

/// Recurring events are expanded this many years before and after the anchor.
pub const WINDOW_YEARS: u32 = 10;

/// Most occurrence starts one calendar text may hold (RRULE and RDATE
/// occurrences, and single events). A weekly rule over the whole window is
/// about 1,050; a daily one about 7,300. Each start is 4 bytes.
pub const MAX_OCCURRENCES: usize = 50_000;

/// Most rule periods (days for FREQ=DAILY, weeks, months, years) between
/// DTSTART and the window. The crate steps through them one by one from
/// DTSTART (COUNT and BYSETPOS depend on every earlier period), so this
/// bounds the work a rule starting in year 1 could cause. A daily rule may
/// start about 270 years before the window.
pub const MAX_STEPS_BEFORE_WINDOW: i64 = 100_000;

/// Most rule periods the crate may step through for one calendar text, all
/// RRULEs and EXRULEs together, so many rules that each stay under
/// [`MAX_STEPS_BEFORE_WINDOW`] cannot add up to minutes of work at load
/// (500,000 steps took under 1 s in a debug build on a shared 2-core VM). A
/// daily rule over the whole window is about 7,300 steps.
pub const MAX_STEPS_PER_FILE: i64 = 500_000;

/// Some editors on Windows prepend a byte-order mark; it is not part of the
/// first property name.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The dates recurring events are expanded over, both ends inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpansionWindow {
    pub first: NaiveDate,
    pub last: NaiveDate,
}

impl ExpansionWindow {
    /// [`WINDOW_YEARS`] either side of `anchor` (the caller's "today"),
    /// clamped to chrono's range.
    pub fn around(anchor: NaiveDate) -> Self {
        let months = Months::new(WINDOW_YEARS * 12);
        Self {
            first: anchor.checked_sub_months(months).unwrap_or(NaiveDate::MIN),
            last: anchor.checked_add_months(months).unwrap_or(NaiveDate::MAX),
        }
    }

    pub fn contains(&self, date: NaiveDate) -> bool {
        (self.first..=self.last).contains(&date)
    }
}

/// One all-day holiday from a VEVENT: runs of `days` local dates starting at
/// each of `starts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcsHoliday {
    /// SUMMARY with iCalendar escapes removed; empty when the event has none.
    pub summary: String,
    /// DTSTART: the first day of the first occurrence.
    pub start: NaiveDate,
    /// How many consecutive local dates each occurrence covers (at least 1).
    pub days: u32,
    /// The RRULE value as written, when the holiday repeats.
    pub rule: Option<String>,
    /// Sorted, distinct occurrence start dates: DTSTART, RRULE occurrences
    /// inside the window and RDATEs, minus EXDATE, EXRULE and occurrences
    /// replaced by a RECURRENCE-ID override.
    pub starts: Vec<NaiveDate>,
}

/// All holidays found in one `.ics` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcsCalendar {
    pub holidays: Vec<IcsHoliday>,
    /// VEVENTs whose DTSTART has a time of day; they are not holidays.
    pub skipped_timed_events: usize,
    /// Where recurring events were expanded.
    pub window: ExpansionWindow,
}

/// Why an `.ics` text was rejected, at which (1-based, physical) line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcsError {
    pub line: usize,
    pub reason: String,
}

impl IcsError {
    fn new(line: usize, reason: impl Into<String>) -> Self {
        Self {
            line,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for IcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for IcsError {}

/// Parses iCalendar text into its all-day holidays, expanding recurring
/// events over [`ExpansionWindow::around`] `anchor`.
///
/// # Errors
/// Malformed structure (no VCALENDAR, unbalanced BEGIN/END, a VEVENT without
/// DTSTART), all-day events this module cannot represent exactly (e.g. an
/// hourly RRULE) and calendars past the bounds are reported with the line to
/// fix.
pub fn parse_ics(text: &str, anchor: NaiveDate) -> Result<IcsCalendar, IcsError> {
    parse_ics_bytes(text.as_bytes(), anchor)
}

/// Like [`parse_ics`], for raw file bytes. Some exporters fold long lines in
/// the middle of a multi-byte UTF-8 character, which makes the file invalid
/// UTF-8 until it is unfolded; this accepts such files.
///
/// # Errors
/// As [`parse_ics`], plus text that is not UTF-8 once unfolded.
pub fn parse_ics_bytes(bytes: &[u8], anchor: NaiveDate) -> Result<IcsCalendar, IcsError> {
    let window = ExpansionWindow::around(anchor);
    let mut reader = Reader::new(window);
    for logical in unfold(bytes)? {
        reader.feed(parse_property(logical)?)?;
    }
    Ok(assemble(reader.finish()?, window))
}

impl IcsHoliday {
    /// Whether this holiday (any occurrence) covers the local date.
    pub fn covers(&self, date: NaiveDate) -> bool {
        self.occurrence_covering(date).is_some()
    }

    /// Start date of the occurrence that covers `date`, if any. Every
    /// occurrence lasts `days`, so the latest start on or before `date` is
    /// the only one that can reach it.
    pub fn occurrence_covering(&self, date: NaiveDate) -> Option<NaiveDate> {
        let index = self.starts.partition_point(|&start| start <= date);
        let start = *self.starts.get(index.checked_sub(1)?)?;
        // Day offsets avoid adding `days` to a date, which could overflow
        // chrono's range for absurd DURATIONs.
        (date.signed_duration_since(start).num_days() < i64::from(self.days)).then_some(start)
    }
}

impl IcsCalendar {
    /// Whether any holiday covers the local date.
    pub fn covers(&self, date: NaiveDate) -> bool {
        self.holiday_on(date).is_some()
    }

    /// The first holiday covering the local date, e.g. to name it in a log.
    pub fn holiday_on(&self, date: NaiveDate) -> Option<&IcsHoliday> {
        self.holidays.iter().find(|holiday| holiday.covers(date))
    }

    /// Occurrence starts held, over all holidays (at most [`MAX_OCCURRENCES`]).
    pub fn occurrence_count(&self) -> usize {
        self.holidays
            .iter()
            .map(|holiday| holiday.starts.len())
            .sum()
    }
}

// ---------------------------------------------------------------------------
// Lines: unfolding and content-line syntax.
// ---------------------------------------------------------------------------

/// One unfolded content line and the physical line it started on, so errors
/// point at what the operator sees in an editor.
struct LogicalLine {
    line: usize,
    text: String,
}

fn unfold(bytes: &[u8]) -> Result<Vec<LogicalLine>, IcsError> {
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    let mut folded: Vec<(usize, Vec<u8>)> = Vec::new();
    for (index, physical) in bytes.split(|&byte| byte == b'\n').enumerate() {
        let physical = physical.strip_suffix(b"\r").unwrap_or(physical);
        append_physical(&mut folded, index + 1, physical)?;
    }
    folded
        .into_iter()
        .map(|(line, text)| decode_line(line, text))
        .collect()
}

/// Adds one physical line: a leading space or tab means "continues the line
/// before", minus that one character (RFC 5545 section 3.1).
fn append_physical(
    folded: &mut Vec<(usize, Vec<u8>)>,
    line: usize,
    physical: &[u8],
) -> Result<(), IcsError> {
    match physical.split_first() {
        Some((b' ' | b'\t', rest)) => match folded.last_mut() {
            Some((_, text)) => text.extend_from_slice(rest),
            None => return Err(IcsError::new(
                line,
                "line starts with a space or tab (a continuation) but there is no line before it",
            )),
        },
        Some(_) => folded.push((line, physical.to_vec())),
        // Blank lines are not valid iCalendar but carry nothing; tolerate them
        // (many files end with one).
        None => {}
    }
    Ok(())
}

fn decode_line(line: usize, text: Vec<u8>) -> Result<LogicalLine, IcsError> {
    match String::from_utf8(text) {
        Ok(text) => Ok(LogicalLine { line, text }),
        Err(_) => Err(IcsError::new(
            line,
            "text is not valid UTF-8; save the file as UTF-8",
        )),
    }
}

/// A content line: `NAME;PARAM=VALUE;...:VALUE`, name and parameter names
/// upper-cased because iCalendar names are case-insensitive.
struct Property {
    line: usize,
    name: String,
    params: Vec<(String, String)>,
    value: String,
}

impl Property {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

fn parse_property(logical: LogicalLine) -> Result<Property, IcsError> {
    let LogicalLine { line, text } = logical;
    let Some(colon) = find_unquoted(&text, ':') else {
        return Err(IcsError::new(
            line,
            format!("expected NAME:VALUE, found {:?}", preview(&text)),
        ));
    };
    let mut pieces = split_unquoted(&text[..colon], ';').into_iter();
    let name = pieces.next().unwrap_or_default().trim();
    if !is_valid_name(name) {
        return Err(IcsError::new(
            line,
            format!(
                "{:?} is not a property name; expected NAME:VALUE",
                preview(name)
            ),
        ));
    }
    let params = pieces
        .map(|piece| parse_param(line, piece))
        .collect::<Result<_, _>>()?;
    Ok(Property {
        line,
        name: name.to_ascii_uppercase(),
        params,
        value: text[colon + 1..].to_string(),
    })
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

fn parse_param(line: usize, piece: &str) -> Result<(String, String), IcsError> {
    let Some((name, value)) = piece.split_once('=') else {
        return Err(IcsError::new(
            line,
            format!(
                "parameter {:?} has no '=' (expected NAME=VALUE)",
                preview(piece)
            ),
        ));
    };
    let value = value
        .strip_prefix('"')
        .and_then(|inner| inner.strip_suffix('"'))
        .unwrap_or(value);
    Ok((name.trim().to_ascii_uppercase(), value.to_string()))
}

/// Position of `target` outside double quotes: quoted parameter values may
/// contain `:` and `;` (e.g. `TZID="Asia/Tokyo: JST"`).
fn find_unquoted(text: &str, target: char) -> Option<usize> {
    let mut quoted = false;
    text.char_indices().find_map(|(index, ch)| {
        if ch == '"' {
            quoted = !quoted;
        }
        (ch == target && !quoted).then_some(index)
    })
}

fn split_unquoted(text: &str, separator: char) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(index) = find_unquoted(rest, separator) {
        pieces.push(&rest[..index]);
        rest = &rest[index + separator.len_utf8()..];
    }
    pieces.push(rest);
    pieces
}

/// The start of a line for error messages, so one bad line cannot produce a
/// huge message.
fn preview(text: &str) -> String {
    const LIMIT: usize = 40;
    let mut shown: String = text.chars().take(LIMIT).collect();
    if text.chars().nth(LIMIT).is_some() {
        shown.push('…');
    }
    shown
}

/// Undoes TEXT escaping (RFC 5545 section 3.3.11). `\:` is not standard but
/// some exporters write it.
fn unescape_text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('n' | 'N') => out.push('\n'),
            Some(escaped @ (',' | ';' | '\\' | ':')) => out.push(escaped),
            // Unknown escapes are kept verbatim so no text is lost.
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Components: BEGIN/END nesting and which properties belong to which VEVENT.
// ---------------------------------------------------------------------------

struct OpenComponent {
    name: String,
    line: usize,
}

/// Walks content lines, tracking nesting and collecting top-level VEVENTs.
struct Reader {
    /// Open components, outermost first; `open[0]` is always a VCALENDAR.
    open: Vec<OpenComponent>,
    /// The VEVENT being read, if it sits directly inside the VCALENDAR.
    event: Option<EventDraft>,
    seen_calendar: bool,
    events: Vec<FinishedEvent>,
    expansion: Expansion,
}

impl Reader {
    fn new(window: ExpansionWindow) -> Self {
        Self {
            open: Vec::new(),
            event: None,
            seen_calendar: false,
            events: Vec::new(),
            expansion: Expansion {
                window,
                left: MAX_OCCURRENCES,
                steps_left: MAX_STEPS_PER_FILE,
            },
        }
    }

    fn feed(&mut self, property: Property) -> Result<(), IcsError> {
        match property.name.as_str() {
            "BEGIN" => self.begin(&property),
            "END" => self.end(&property),
            _ => self.property(property),
        }
    }

    fn begin(&mut self, property: &Property) -> Result<(), IcsError> {
        let name = component_name(property)?;
        self.check_nesting(property, &name)?;
        // Only VEVENTs directly inside the VCALENDAR are events; one nested
        // in another component (e.g. an X- wrapper) is not ours to read.
        if name == "VEVENT" && self.open.len() == 1 {
            self.event = Some(EventDraft::new(property.line));
        }
        self.seen_calendar = true;
        self.open.push(OpenComponent {
            name,
            line: property.line,
        });
        Ok(())
    }

    /// A VCALENDAR must be the outermost component, and only that.
    fn check_nesting(&self, property: &Property, name: &str) -> Result<(), IcsError> {
        match (self.open.last(), name == "VCALENDAR") {
            (None, false) => Err(self.outside_calendar(property, &format!("BEGIN:{name}"))),
            (Some(parent), true) => Err(IcsError::new(
                property.line,
                format!(
                    "BEGIN:VCALENDAR inside BEGIN:{} from line {}; calendars cannot be nested",
                    parent.name, parent.line
                ),
            )),
            _ => Ok(()),
        }
    }

    fn end(&mut self, property: &Property) -> Result<(), IcsError> {
        let name = component_name(property)?;
        let Some(top) = self.open.pop() else {
            return Err(IcsError::new(
                property.line,
                format!("END:{name} has no matching BEGIN:{name}"),
            ));
        };
        if top.name != name {
            return Err(self.mismatched_end(property.line, &name, &top));
        }
        if name == "VEVENT" && self.open.len() == 1 {
            if let Some(draft) = self.event.take() {
                self.events.push(draft.finish(&mut self.expansion)?);
            }
        }
        Ok(())
    }

    fn mismatched_end(&self, line: usize, name: &str, top: &OpenComponent) -> IcsError {
        let hint = if self.open.iter().any(|open| open.name == name) {
            format!("add END:{} before this line", top.name)
        } else {
            format!("nothing named {name} is open; remove this line or add its BEGIN")
        };
        IcsError::new(
            line,
            format!(
                "END:{name} does not match BEGIN:{} from line {}; {hint}",
                top.name, top.line
            ),
        )
    }

    fn property(&mut self, property: Property) -> Result<(), IcsError> {
        if self.open.is_empty() {
            return Err(self.outside_calendar(&property, &property.name));
        }
        // Properties of a VALARM (or other sub-component) inside the VEVENT
        // are not the event's own, so only depth 2 counts.
        match self.event.as_mut() {
            Some(event) if self.open.len() == 2 => event.add(property),
            _ => Ok(()),
        }
    }

    fn outside_calendar(&self, property: &Property, what: &str) -> IcsError {
        let reason = if self.seen_calendar {
            format!("{what} after END:VCALENDAR; only another BEGIN:VCALENDAR may follow")
        } else {
            format!("expected BEGIN:VCALENDAR, found {what}; is this an iCalendar (.ics) file?")
        };
        IcsError::new(property.line, reason)
    }

    fn finish(self) -> Result<Vec<FinishedEvent>, IcsError> {
        if let Some(open) = self.open.last() {
            return Err(IcsError::new(
                open.line,
                format!("BEGIN:{0} is never closed; add END:{0}", open.name),
            ));
        }
        if !self.seen_calendar {
            return Err(IcsError::new(
                1,
                "missing BEGIN:VCALENDAR: the text has no iCalendar content",
            ));
        }
        Ok(self.events)
    }
}

fn component_name(property: &Property) -> Result<String, IcsError> {
    let name = property.value.trim().to_ascii_uppercase();
    if name.is_empty() {
        return Err(IcsError::new(
            property.line,
            format!(
                "{} needs a component name, e.g. {}:VEVENT",
                property.name, property.name
            ),
        ));
    }
    Ok(name)
}

// ---------------------------------------------------------------------------
// Events: from collected properties to a holiday.
// ---------------------------------------------------------------------------

/// The properties of one VEVENT that matter for holidays, kept raw until
/// END:VEVENT because DTSTART decides how the others are read.
#[derive(Default)]
struct EventDraft {
    begin_line: usize,
    summary: Option<Property>,
    dtstart: Option<Property>,
    dtend: Option<Property>,
    duration: Option<Property>,
    rrule: Option<Property>,
    uid: Option<Property>,
    recurrence_id: Option<Property>,
    status: Option<Property>,
    exdates: Vec<Property>,
    rdates: Vec<Property>,
    exrules: Vec<Property>,
}

enum EventKind {
    Holiday(IcsHoliday),
    Timed,
    Cancelled,
}

struct FinishedEvent {
    kind: EventKind,
    uid: Option<String>,
    /// RECURRENCE-ID: the occurrence of the same-UID series this event replaces.
    replaces: Option<NaiveDate>,
}

/// The window and what is left of the per-calendar occurrence budget.
struct Expansion {
    window: ExpansionWindow,
    left: usize,
    /// Rule periods still allowed (see [`MAX_STEPS_PER_FILE`]).
    steps_left: i64,
}

impl Expansion {
    fn charge(&mut self, count: usize, line: usize) -> Result<(), IcsError> {
        self.left = self
            .left
            .checked_sub(count)
            .ok_or_else(|| self.too_many(line))?;
        Ok(())
    }

    fn too_many(&self, line: usize) -> IcsError {
        IcsError::new(
            line,
            format!(
                "more than {MAX_OCCURRENCES} holiday occurrences between {} and {} in this file; end frequent rules with UNTIL or COUNT, or use fewer, longer events (DTEND/DURATION)",
                self.window.first, self.window.last
            ),
        )
    }
}

impl EventDraft {
    fn new(begin_line: usize) -> Self {
        Self {
            begin_line,
            ..Self::default()
        }
    }

    fn add(&mut self, property: Property) -> Result<(), IcsError> {
        let slot = match property.name.as_str() {
            // Some exporters repeat SUMMARY once per LANGUAGE; the first one
            // names the holiday well enough for a log line.
            "SUMMARY" => {
                self.summary.get_or_insert(property);
                return Ok(());
            }
            "DTSTART" => &mut self.dtstart,
            "DTEND" => &mut self.dtend,
            "DURATION" => &mut self.duration,
            // RFC 5545 allows one RRULE ("SHOULD NOT occur more than
            // once"); two would be a union nobody expects from an editor.
            "RRULE" => &mut self.rrule,
            "UID" => &mut self.uid,
            "RECURRENCE-ID" => &mut self.recurrence_id,
            "STATUS" => &mut self.status,
            "EXDATE" => {
                self.exdates.push(property);
                return Ok(());
            }
            "RDATE" => {
                self.rdates.push(property);
                return Ok(());
            }
            "EXRULE" => {
                self.exrules.push(property);
                return Ok(());
            }
            _ => return Ok(()),
        };
        set_once(slot, property)
    }

    fn finish(self, expansion: &mut Expansion) -> Result<FinishedEvent, IcsError> {
        let Some(dtstart) = &self.dtstart else {
            return Err(IcsError::new(
                self.begin_line,
                "VEVENT has no DTSTART; add one, e.g. DTSTART;VALUE=DATE:20260101",
            ));
        };
        let replaces = self
            .recurrence_id
            .as_ref()
            .map(parse_recurrence_id)
            .transpose()?;
        Ok(FinishedEvent {
            kind: self.kind(dtstart, expansion)?,
            uid: self.uid.as_ref().map(|uid| uid.value.trim().to_string()),
            replaces,
        })
    }

    fn kind(&self, dtstart: &Property, expansion: &mut Expansion) -> Result<EventKind, IcsError> {
        if self.is_cancelled() {
            return Ok(EventKind::Cancelled);
        }
        match parse_date_property(dtstart)? {
            // A time of day means a meeting or similar, not a day off; the
            // rest of the event is not checked so exotic rules cannot fail
            // the whole file.
            DateValue::DateTime(_) => Ok(EventKind::Timed),
            DateValue::Date(start) => self.holiday(start, expansion).map(EventKind::Holiday),
        }
    }

    fn is_cancelled(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|status| status.value.trim().eq_ignore_ascii_case("CANCELLED"))
    }

    fn holiday(&self, start: NaiveDate, expansion: &mut Expansion) -> Result<IcsHoliday, IcsError> {
        let days = self.length_days(start)?;
        let mut starts = match &self.rrule {
            Some(rrule) => rule_occurrences(rrule, start, days, expansion)?,
            None => vec![start],
        };
        for rdate in &self.rdates {
            starts.extend(parse_rdate(rdate)?);
        }
        starts.sort_unstable();
        starts.dedup();
        let exdates = self.exdate_list()?;
        starts.retain(|start| exdates.binary_search(start).is_err());
        for exrule in &self.exrules {
            let (Some(&first), Some(&last)) = (starts.first(), starts.last()) else {
                break;
            };
            let excluded = rule_exclusions(exrule, start, first, last, expansion)?;
            starts.retain(|start| excluded.binary_search(start).is_err());
        }
        let line = self
            .rrule
            .as_ref()
            .map_or(self.begin_line, |rrule| rrule.line);
        expansion.charge(starts.len(), line)?;
        Ok(IcsHoliday {
            summary: self
                .summary
                .as_ref()
                .map(|summary| unescape_text(&summary.value))
                .unwrap_or_default(),
            start,
            days,
            rule: self
                .rrule
                .as_ref()
                .map(|rrule| rrule.value.trim().to_string()),
            starts,
        })
    }

    fn length_days(&self, start: NaiveDate) -> Result<u32, IcsError> {
        match (&self.dtend, &self.duration) {
            (Some(_), Some(duration)) => Err(IcsError::new(
                duration.line,
                "a VEVENT may have DTEND or DURATION, not both; remove one",
            )),
            (Some(dtend), None) => days_until_end(dtend, start),
            (None, Some(duration)) => parse_duration_days(duration),
            // RFC 5545: an all-day event without either lasts one day.
            (None, None) => Ok(1),
        }
    }

    fn exdate_list(&self) -> Result<Vec<NaiveDate>, IcsError> {
        let mut dates = Vec::new();
        for property in &self.exdates {
            dates.extend(parse_date_list(property)?);
        }
        dates.sort_unstable();
        dates.dedup();
        Ok(dates)
    }
}

/// RDATE on an all-day event: DATE values only. A DATE-TIME or PERIOD would
/// be an occurrence with a time of day, which no holiday has.
fn parse_rdate(property: &Property) -> Result<Vec<NaiveDate>, IcsError> {
    if property
        .param("VALUE")
        .is_some_and(|value| value.eq_ignore_ascii_case("PERIOD"))
    {
        return Err(IcsError::new(
            property.line,
            "RDATE;VALUE=PERIOD is not supported on an all-day event; list the dates with RDATE;VALUE=DATE:YYYYMMDD,YYYYMMDD",
        ));
    }
    let expected = value_type(property)?;
    let mut dates = Vec::new();
    for item in property.value.split(',').map(str::trim) {
        match parse_date_value(item, expected) {
            Ok(DateValue::Date(date)) => dates.push(date),
            Ok(DateValue::DateTime(_)) => {
                return Err(IcsError::new(
                    property.line,
                    format!("RDATE {item:?} has a time but DTSTART is a date; write RDATE;VALUE=DATE:YYYYMMDD"),
                ))
            }
            Err(reason) => return Err(IcsError::new(property.line, format!("RDATE: {reason}"))),
        }
    }
    Ok(dates)
}

fn set_once(slot: &mut Option<Property>, property: Property) -> Result<(), IcsError> {
    if let Some(first) = slot {
        return Err(IcsError::new(
            property.line,
            format!(
                "{} appears twice in one VEVENT (first on line {}); keep only one",
                property.name, first.line
            ),
        ));
    }
    *slot = Some(property);
    Ok(())
}

/// Collects finished events into the calendar, turning RECURRENCE-ID
/// overrides into exclusions on the series they replace.
fn assemble(events: Vec<FinishedEvent>, window: ExpansionWindow) -> IcsCalendar {
    let replaced: Vec<(String, NaiveDate)> = events
        .iter()
        .filter_map(|event| Some((event.uid.clone()?, event.replaces?)))
        .collect();
    let mut calendar = IcsCalendar {
        holidays: Vec::new(),
        skipped_timed_events: 0,
        window,
    };
    for event in events {
        match event.kind {
            EventKind::Timed => calendar.skipped_timed_events += 1,
            EventKind::Cancelled => {}
            EventKind::Holiday(mut holiday) => {
                if event.replaces.is_none() {
                    exclude_replaced(&mut holiday, event.uid.as_deref(), &replaced);
                }
                calendar.holidays.push(holiday);
            }
        }
    }
    calendar
}

fn exclude_replaced(holiday: &mut IcsHoliday, uid: Option<&str>, replaced: &[(String, NaiveDate)]) {
    let Some(uid) = uid else {
        return;
    };
    holiday.starts.retain(|start| {
        !replaced
            .iter()
            .any(|(other, date)| other == uid && date == start)
    });
}

fn parse_recurrence_id(property: &Property) -> Result<NaiveDate, IcsError> {
    if property
        .param("RANGE")
        .is_some_and(|range| range.eq_ignore_ascii_case("THISANDFUTURE"))
    {
        return Err(IcsError::new(
            property.line,
            "RECURRENCE-ID;RANGE=THISANDFUTURE is not supported; edit the recurring event instead",
        ));
    }
    Ok(parse_date_property(property)?.date())
}

fn days_until_end(dtend: &Property, start: NaiveDate) -> Result<u32, IcsError> {
    let DateValue::Date(end) = parse_date_property(dtend)? else {
        return Err(IcsError::new(
            dtend.line,
            "DTEND has a time but DTSTART is a date; write DTEND;VALUE=DATE:YYYYMMDD",
        ));
    };
    let days = end.signed_duration_since(start).num_days();
    if days <= 0 {
        return Err(IcsError::new(
            dtend.line,
            format!("DTEND {end} is not after DTSTART {start}; DTEND is exclusive, so a one-day holiday ends the day after it starts"),
        ));
    }
    u32::try_from(days).map_err(|_| IcsError::new(dtend.line, "DTEND is too far after DTSTART"))
}

/// DURATION for an all-day event: `P<n>D` or `P<n>W` (RFC 5545 dur-day /
/// dur-week). Hours would not map to whole local dates, so they are refused.
fn parse_duration_days(property: &Property) -> Result<u32, IcsError> {
    let text = property.value.trim().to_ascii_uppercase();
    let bad = || {
        IcsError::new(
            property.line,
            format!(
                "DURATION {:?} is not a whole number of days or weeks; use e.g. P1D, P3D or P1W",
                preview(&text)
            ),
        )
    };
    let body = text.strip_prefix('+').unwrap_or(&text);
    let body = body.strip_prefix('P').ok_or_else(bad)?;
    let (number, per_unit) = match (body.strip_suffix('D'), body.strip_suffix('W')) {
        (Some(number), _) => (number, 1),
        (None, Some(number)) => (number, 7),
        (None, None) => return Err(bad()),
    };
    let days = parse_digits(number)
        .and_then(|count| count.checked_mul(per_unit))
        .ok_or_else(bad)?;
    if days == 0 {
        return Err(IcsError::new(
            property.line,
            "DURATION must be at least one day (P1D)",
        ));
    }
    Ok(days)
}

/// An unsigned decimal; `str::parse` alone would also accept a leading `+`.
fn parse_digits(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

// ---------------------------------------------------------------------------
// Date values.
// ---------------------------------------------------------------------------

/// A DATE or DATE-TIME value; for a DATE-TIME only the calendar date as
/// written is kept, since holidays are compared by date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DateValue {
    Date(NaiveDate),
    DateTime(NaiveDate),
}

impl DateValue {
    fn date(self) -> NaiveDate {
        match self {
            Self::Date(date) | Self::DateTime(date) => date,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueType {
    Date,
    DateTime,
}

fn parse_date_property(property: &Property) -> Result<DateValue, IcsError> {
    let value_type = value_type(property)?;
    parse_date_value(property.value.trim(), value_type)
        .map_err(|reason| IcsError::new(property.line, format!("{}: {reason}", property.name)))
}

/// EXDATE may list several comma-separated values.
fn parse_date_list(property: &Property) -> Result<Vec<NaiveDate>, IcsError> {
    let value_type = value_type(property)?;
    property
        .value
        .split(',')
        .map(|item| {
            parse_date_value(item.trim(), value_type)
                .map(DateValue::date)
                .map_err(|reason| {
                    IcsError::new(property.line, format!("{}: {reason}", property.name))
                })
        })
        .collect()
}

fn value_type(property: &Property) -> Result<Option<ValueType>, IcsError> {
    match property.param("VALUE") {
        None => Ok(None),
        Some(value) if value.eq_ignore_ascii_case("DATE") => Ok(Some(ValueType::Date)),
        Some(value) if value.eq_ignore_ascii_case("DATE-TIME") => Ok(Some(ValueType::DateTime)),
        Some(other) => Err(IcsError::new(
            property.line,
            format!(
                "{};VALUE={other} is not supported; use VALUE=DATE with YYYYMMDD",
                property.name
            ),
        )),
    }
}

/// `YYYYMMDD` or `YYYYMMDDTHHMMSS[Z]`, checked against an explicit VALUE=.
fn parse_date_value(text: &str, expected: Option<ValueType>) -> Result<DateValue, String> {
    match (text.split_once(['T', 't']), expected) {
        (None, Some(ValueType::DateTime)) => Err(format!(
            "{text:?} has no time but VALUE=DATE-TIME; expected YYYYMMDDTHHMMSS"
        )),
        (None, _) => parse_date(text).map(DateValue::Date),
        (Some(_), Some(ValueType::Date)) => Err(format!(
            "{text:?} has a time but VALUE=DATE; write only YYYYMMDD"
        )),
        (Some((date, time)), _) => {
            check_time(text, time)?;
            parse_date(date).map(DateValue::DateTime)
        }
    }
}

fn parse_date(text: &str) -> Result<NaiveDate, String> {
    let Some((year, month, day)) = split_yyyymmdd(text) else {
        return Err(format!(
            "{:?} is not a date; expected YYYYMMDD",
            preview(text)
        ));
    };
    NaiveDate::from_ymd_opt(year, month, day)
        .ok_or_else(|| format!("{text} is not a valid calendar date"))
}

fn split_yyyymmdd(text: &str) -> Option<(i32, u32, u32)> {
    if text.len() != 8 {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range).and_then(parse_digits);
    let year = i32::try_from(number(0..4)?).ok()?;
    Some((year, number(4..6)?, number(6..8)?))
}

/// The time is only validated: a typo there should still be reported even
/// though the event is skipped.
fn check_time(whole: &str, time: &str) -> Result<(), String> {
    let digits = time.strip_suffix(['Z', 'z']).unwrap_or(time);
    if digits.len() == 6 && parse_digits(digits).is_some() {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not a date-time; expected YYYYMMDDTHHMMSS",
            preview(whole)
        ))
    }
}

// ---------------------------------------------------------------------------
// RRULE and EXRULE: strict syntax here, expansion by the `rrule` crate.
// ---------------------------------------------------------------------------

/// Rule periods per FREQ in days, rounded down, to estimate the steps
/// between DTSTART and the window.
fn period_days(freq: Frequency) -> i64 {
    match freq {
        Frequency::Yearly => 365,
        Frequency::Monthly => 28,
        Frequency::Weekly => 7,
        _ => 1,
    }
}

/// A checked rule and where its expansion starts.
struct Rule {
    rule: RRule<Validated>,
    dt_start: DateTime<RuleTz>,
    property_line: usize,
    text: String,
}

/// Start dates of an RRULE's occurrences inside the window (plus the days
/// before it that a multi-day occurrence could reach back from).
fn rule_occurrences(
    property: &Property,
    start: NaiveDate,
    days: u32,
    expansion: &mut Expansion,
) -> Result<Vec<NaiveDate>, IcsError> {
    let rule = Rule::parse(property, start)?;
    rule.check_first_is(start)?;
    let window = expansion.window;
    let from = window
        .first
        .checked_sub_days(Days::new(u64::from(days.saturating_sub(1))))
        .unwrap_or(NaiveDate::MIN);
    rule.charge_steps(start, from, window.last, expansion)?;
    rule.expand(from, window.last, expansion.left)
        .map_err(|too_many| match too_many {
            Limit::Budget => expansion.too_many(property.line),
            Limit::Stalled => rule.fail("it finds no occurrence for too long (over 100,000 periods in a row); check BYxxx parts that rarely match"),
            Limit::Panicked(reason) => rule.fail(&reason),
        })
}

/// Start dates an EXRULE removes between `first` and `last`.
fn rule_exclusions(
    property: &Property,
    start: NaiveDate,
    first: NaiveDate,
    last: NaiveDate,
    expansion: &mut Expansion,
) -> Result<Vec<NaiveDate>, IcsError> {
    let rule = Rule::parse(property, start)?;
    rule.charge_steps(start, first, last, expansion)?;
    rule.expand(first, last, usize::from(u16::MAX))
        .map_err(|_| {
            rule.fail(
                "it excludes too many dates or finds none for too long; list the dates with EXDATE",
            )
        })
}

enum Limit {
    /// More occurrences than allowed.
    Budget,
    /// The crate gave up after many periods without an occurrence.
    Stalled,
    /// The crate panicked (see [`guarded`]).
    Panicked(String),
}

impl Rule {
    fn parse(property: &Property, start: NaiveDate) -> Result<Self, IcsError> {
        let text = property.value.trim().to_string();
        let fail = |reason: String| {
            IcsError::new(
                property.line,
                format!("{} {text:?}: {reason}", property.name),
            )
        };
        let (unvalidated, until) = read_rule(&property.value).map_err(fail)?;
        let dt_start = midnight(start);
        let unvalidated = match until {
            Some(until) => unvalidated.until(midnight(until)),
            None => unvalidated,
        };
        // The crate checks ranges and combinations (BYWEEKNO only with
        // YEARLY, BYSETPOS with another BYxxx part, UNTIL not before
        // DTSTART, ...) and says which.
        let rule = unvalidated
            .validate(dt_start)
            .map_err(|error| fail(format!("{error}")))?;
        Ok(Self {
            rule,
            dt_start,
            property_line: property.line,
            text: format!("{} {text:?}", property.name),
        })
    }

    fn fail(&self, reason: &str) -> IcsError {
        IcsError::new(self.property_line, format!("{}: {reason}", self.text))
    }

    /// DTSTART must be the rule's first occurrence (see the module comment).
    fn check_first_is(&self, start: NaiveDate) -> Result<(), IcsError> {
        let first = guarded(|| {
            RRuleSet::new(self.dt_start)
                .rrule(self.rule.clone())
                .all(1)
                .dates
                .first()
                .map(DateTime::date_naive)
        })
        .map_err(|reason| self.fail(&reason))?;
        match first {
            Some(first) if first == start => Ok(()),
            Some(first) => Err(self.fail(&format!(
                "DTSTART {start} is not an occurrence of this rule (the first is {first}); set DTSTART to the first occurrence"
            ))),
            None => Err(self.fail(&format!(
                "the rule has no occurrence on or after DTSTART {start}"
            ))),
        }
    }

    /// Refuses a rule the crate would have to step through for too long
    /// before reaching `from` (see [`MAX_STEPS_BEFORE_WINDOW`]), and takes
    /// its steps up to `to` from the file's allowance ([`MAX_STEPS_PER_FILE`]).
    fn charge_steps(
        &self,
        start: NaiveDate,
        from: NaiveDate,
        to: NaiveDate,
        expansion: &mut Expansion,
    ) -> Result<(), IcsError> {
        let until = self.rule.get_until().map(DateTime::date_naive);
        let per_step = period_days(self.rule.get_freq()) * i64::from(self.rule.get_interval());
        let steps_to = |end: NaiveDate| {
            let end = until.map_or(end, |until| end.min(until));
            (end.signed_duration_since(start).num_days() / per_step.max(1)).max(0)
        };
        let before = steps_to(from);
        if before > MAX_STEPS_BEFORE_WINDOW {
            return Err(self.fail(&format!(
                "DTSTART {start} is {before} repetitions before {from}, more than {MAX_STEPS_BEFORE_WINDOW}; move DTSTART to a recent occurrence (and shorten COUNT to match)"
            )));
        }
        expansion.steps_left -= steps_to(to);
        if expansion.steps_left < 0 {
            return Err(self.fail(&format!(
                "the rules in this file would take more than {MAX_STEPS_PER_FILE} repetitions to expand; move DTSTARTs closer to the window or end rules with UNTIL"
            )));
        }
        Ok(())
    }

    /// Occurrence start dates from `from` to `to`, both inclusive; more than
    /// `limit` is an error.
    fn expand(
        &self,
        from: NaiveDate,
        to: NaiveDate,
        limit: usize,
    ) -> Result<Vec<NaiveDate>, Limit> {
        // `all` stops at its limit and says so; asking for one more than
        // allowed tells "exactly the limit" from "more".
        let asked = u16::try_from(limit.saturating_add(1)).unwrap_or(u16::MAX);
        let result = guarded(|| {
            RRuleSet::new(self.dt_start)
                .rrule(self.rule.clone())
                .after(midnight(from))
                .before(midnight(to))
                .all(asked)
        })
        .map_err(Limit::Panicked)?;
        if result.dates.len() > limit || result.dates.len() >= usize::from(u16::MAX) {
            return Err(Limit::Budget);
        }
        if result.limited && result.dates.len() < usize::from(asked) {
            return Err(Limit::Stalled);
        }
        Ok(result.dates.iter().map(DateTime::date_naive).collect())
    }
}

/// Runs the crate on text from a file: a panic inside it (a bug on some
/// input we did not foresee) becomes a refused rule, not a crashed monitor
/// or config reload.
fn guarded<T>(expand: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(expand))
        .map_err(|_| "the recurrence could not be expanded (internal error in the rrule crate); simplify the rule".to_string())
}

/// All-day dates are expanded as midnight UTC: a date has no zone, and UTC
/// has no DST gaps that could move or drop a midnight.
fn midnight(date: NaiveDate) -> DateTime<RuleTz> {
    RuleTz::UTC.from_utc_datetime(&date.and_time(NaiveTime::MIN))
}

/// Reads `FREQ=...;...` strictly into the crate's builder. UNTIL is returned
/// apart: it is compared by date (a DATE-TIME UNTIL keeps its date), which
/// the crate cannot express for a DATE DTSTART.
fn read_rule(value: &str) -> Result<(RRule<Unvalidated>, Option<NaiveDate>), String> {
    let mut seen: Vec<String> = Vec::new();
    let mut freq = None;
    let mut rule = RRule::new(Frequency::Yearly);
    let mut until = None;
    let mut count = None;
    for piece in value
        .split(';')
        .map(str::trim)
        .filter(|piece| !piece.is_empty())
    {
        let Some((name, part)) = piece.split_once('=') else {
            return Err(format!("part {piece:?} has no '=' (expected NAME=VALUE)"));
        };
        let name = name.trim().to_ascii_uppercase();
        let part = part.trim();
        if seen.contains(&name) {
            return Err(format!("{name} appears twice"));
        }
        seen.push(name.clone());
        rule = match name.as_str() {
            "FREQ" => {
                freq = Some(parse_freq(part)?);
                rule
            }
            "INTERVAL" => rule.interval(
                u16::try_from(positive(&name, part)?)
                    .map_err(|_| format!("INTERVAL={part} is too large (at most 65535)"))?,
            ),
            "COUNT" => {
                let number = positive(&name, part)?;
                count = Some(number);
                rule.count(number)
            }
            "UNTIL" => {
                until = Some(parse_date_value(part, None).map_err(|e| format!("UNTIL: {e}"))?.date());
                rule
            }
            "WKST" => rule.week_start(
                weekday_from_code(&part.to_ascii_uppercase())
                    .ok_or_else(|| format!("WKST={part} is not a weekday (MO, TU, WE, TH, FR, SA, SU)"))?,
            ),
            "BYMONTH" => rule.by_month(&numbers(&name, part, |n: u8| Month::try_from(n).ok())?),
            // RFC 5545 section 3.3.10 ranges, zero excluded; checked here
            // because the crate lets BYMONTHDAY=0 through (read as if absent).
            "BYMONTHDAY" => rule.by_month_day(numbers(&name, part, nonzero_up_to(31))?),
            "BYYEARDAY" => rule.by_year_day(numbers(&name, part, nonzero_up_to(366))?),
            "BYWEEKNO" => rule.by_week_no(numbers(&name, part, nonzero_up_to(53))?),
            "BYSETPOS" => rule.by_set_pos(numbers(&name, part, nonzero_up_to(366))?),
            "BYDAY" => rule.by_weekday(
                part.split(',')
                    .map(|day| parse_by_day(day.trim()))
                    .collect::<Result<_, _>>()?,
            ),
            "BYHOUR" | "BYMINUTE" | "BYSECOND" => {
                return Err(format!(
                    "{name} repeats within a day, which an all-day holiday cannot; remove it"
                ))
            }
            _ => {
                return Err(format!(
                    "{name} is not supported; the parts are FREQ, INTERVAL, COUNT, UNTIL, WKST, BYMONTH, BYWEEKNO, BYYEARDAY, BYMONTHDAY, BYDAY and BYSETPOS"
                ))
            }
        };
    }
    let Some(freq) = freq else {
        return Err("FREQ is missing, e.g. FREQ=YEARLY".to_string());
    };
    if until.is_some() && count.is_some() {
        return Err("UNTIL and COUNT cannot both be given; keep one".to_string());
    }
    // RFC 5545: BYSETPOS "MUST only be used in conjunction with another
    // BYxxx rule part". The crate (like dateutil) would pick from the day
    // it fills in from DTSTART, which is never what the author meant.
    let by_parts = ["BYMONTH", "BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY"];
    if seen.iter().any(|name| name == "BYSETPOS")
        && !seen.iter().any(|name| by_parts.contains(&name.as_str()))
    {
        return Err(
            "BYSETPOS needs another BYxxx part to pick from, e.g. BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"
                .to_string(),
        );
    }
    Ok((rule.freq(freq), until))
}

fn parse_freq(value: &str) -> Result<Frequency, String> {
    match value.to_ascii_uppercase().as_str() {
        "YEARLY" => Ok(Frequency::Yearly),
        "MONTHLY" => Ok(Frequency::Monthly),
        "WEEKLY" => Ok(Frequency::Weekly),
        "DAILY" => Ok(Frequency::Daily),
        "HOURLY" | "MINUTELY" | "SECONDLY" => Err(format!(
            "FREQ={value} repeats within a day, which an all-day holiday cannot; use DAILY, WEEKLY, MONTHLY or YEARLY"
        )),
        _ => Err(format!(
            "FREQ={value} is not a frequency; use DAILY, WEEKLY, MONTHLY or YEARLY"
        )),
    }
}

fn positive(name: &str, value: &str) -> Result<u32, String> {
    parse_digits(value)
        .filter(|&number| number > 0)
        .ok_or_else(|| format!("{name}={value} must be a whole number of at least 1"))
}

/// A comma-separated list of signed integers, each converted by `convert`
/// (None: out of range). The crate then checks the ranges RFC 5545 gives.
fn numbers<T, N: TryFrom<i64>>(
    name: &str,
    value: &str,
    convert: impl Fn(N) -> Option<T>,
) -> Result<Vec<T>, String> {
    value
        .split(',')
        .map(|item| {
            parse_signed(item.trim())
                .and_then(|number| N::try_from(number).ok())
                .and_then(&convert)
                .ok_or_else(|| {
                    format!(
                        "{name}={value}: {:?} is not a valid number here",
                        preview(item.trim())
                    )
                })
        })
        .collect()
}

/// A converter for [`numbers`] accepting -max..=-1 and 1..=max.
fn nonzero_up_to<N: Copy + Into<i64>>(max: i64) -> impl Fn(N) -> Option<N> {
    move |number| {
        let wide: i64 = number.into();
        (wide != 0 && wide.abs() <= max).then_some(number)
    }
}

/// `[+|-]digits`.
fn parse_signed(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = i64::from(parse_digits(digits)?);
    Some(if negative { -magnitude } else { magnitude })
}

/// One BYDAY item: `MO`, `3MO`, `-1FR`, `+2TH`. The crate's own parser reads
/// a malformed ordinal (`XFR`) as "every Friday", so this one is strict.
fn parse_by_day(item: &str) -> Result<NWeekday, String> {
    let upper = item.to_ascii_uppercase();
    let split = upper.len().saturating_sub(2);
    let weekday = upper
        .get(split..)
        .and_then(weekday_from_code)
        .ok_or_else(|| {
            format!("BYDAY {item:?} does not end in a weekday (MO, TU, WE, TH, FR, SA, SU)")
        })?;
    let ordinal = upper.get(..split).unwrap_or_default();
    if ordinal.is_empty() {
        return Ok(NWeekday::Every(weekday));
    }
    let nth = parse_signed(ordinal)
        .and_then(|nth| i16::try_from(nth).ok())
        .filter(|nth| *nth != 0 && nth.unsigned_abs() <= 53)
        .ok_or_else(|| format!("BYDAY {item:?}: the ordinal must be 1 to 53 or -1 to -53"))?;
    Ok(NWeekday::Nth(nth, weekday))
}

fn weekday_from_code(code: &str) -> Option<Weekday> {
    Some(match code {
        "MO" => Weekday::Mon,
        "TU" => Weekday::Tue,
        "WE" => Weekday::Wed,
        "TH" => Weekday::Thu,
        "FR" => Weekday::Fri,
        "SA" => Weekday::Sat,
        "SU" => Weekday::Sun,
        _ => return None,
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Datelike;

    /// The day tests expand around: the window is 2016-06-01..=2036-06-01.
    const ANCHOR: NaiveDate = NaiveDate::from_ymd_opt(2026, 6, 1).unwrap();

    // Shadow the glob-imported functions so every test uses one anchor.
    fn parse_ics(text: &str) -> Result<IcsCalendar, IcsError> {
        super::parse_ics(text, ANCHOR)
    }

    fn parse_ics_bytes(bytes: &[u8]) -> Result<IcsCalendar, IcsError> {
        super::parse_ics_bytes(bytes, ANCHOR)
    }

    fn date(year: i32, month: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(year, month, day).unwrap()
    }

    /// A calendar with one VEVENT; its first property is on line 5.
    fn one_event(event: &[&str]) -> String {
        let mut lines = vec![
            "BEGIN:VCALENDAR",
            "VERSION:2.0",
            "PRODID:-//hushwatch//test//EN",
            "BEGIN:VEVENT",
        ];
        lines.extend_from_slice(event);
        lines.extend_from_slice(&["END:VEVENT", "END:VCALENDAR"]);
        lines.join("\n")
    }

    fn holiday(event: &[&str]) -> IcsHoliday {
        let mut calendar = parse_ics(&one_event(event)).unwrap();
        assert_eq!(calendar.holidays.len(), 1, "{calendar:?}");
        calendar.holidays.remove(0)
    }

    fn event_error(event: &[&str]) -> IcsError {
        parse_ics(&one_event(event)).unwrap_err()
    }

    fn assert_covers(holiday: &IcsHoliday, dates: &[NaiveDate]) {
        for &date in dates {
            assert!(
                holiday.covers(date),
                "{date} should be covered by {holiday:?}"
            );
        }
    }

    fn assert_not_covers(holiday: &IcsHoliday, dates: &[NaiveDate]) {
        for &date in dates {
            assert!(
                !holiday.covers(date),
                "{date} should not be covered by {holiday:?}"
            );
        }
    }

    #[test]
    fn single_date_covers_only_that_day() {
        let showa = holiday(&["SUMMARY:Showa Day", "DTSTART;VALUE=DATE:20260429"]);
        assert_eq!(showa.summary, "Showa Day");
        assert_eq!(
            (showa.start, showa.days, showa.rule.clone()),
            (date(2026, 4, 29), 1, None)
        );
        assert_covers(&showa, &[date(2026, 4, 29)]);
        assert_not_covers(
            &showa,
            &[date(2026, 4, 28), date(2026, 4, 30), date(2027, 4, 29)],
        );
    }

    #[test]
    fn eight_digit_value_without_value_param_is_a_date() {
        let new_year = holiday(&["DTSTART:20260101"]);
        assert_eq!(new_year.start, date(2026, 1, 1));
        assert_eq!(new_year.summary, "");
    }

    #[test]
    fn dtend_is_exclusive_and_sets_the_length() {
        let closure = holiday(&["DTSTART;VALUE=DATE:20261229", "DTEND;VALUE=DATE:20270104"]);
        assert_eq!(closure.days, 6);
        assert_covers(
            &closure,
            &[date(2026, 12, 29), date(2026, 12, 31), date(2027, 1, 3)],
        );
        assert_not_covers(&closure, &[date(2026, 12, 28), date(2027, 1, 4)]);
    }

    #[test]
    fn duration_in_days_and_weeks() {
        let golden_week = holiday(&["DTSTART;VALUE=DATE:20260503", "DURATION:P3D"]);
        assert_eq!(golden_week.days, 3);
        assert_covers(&golden_week, &[date(2026, 5, 3), date(2026, 5, 5)]);
        assert_not_covers(&golden_week, &[date(2026, 5, 2), date(2026, 5, 6)]);
        assert_eq!(holiday(&["DTSTART:20260801", "DURATION:P1W"]).days, 7);
        assert_eq!(holiday(&["DTSTART:20260801", "DURATION:P1D"]).days, 1);
        assert_eq!(holiday(&["DTSTART:20260801", "duration:+p2d"]).days, 2);
    }

    #[test]
    fn yearly_same_date_until_is_inclusive() {
        for until in ["UNTIL=20230704", "UNTIL=20230704T235959Z"] {
            let rule = format!("RRULE:FREQ=YEARLY;{until}");
            let july4 = holiday(&["DTSTART;VALUE=DATE:20200704", &rule]);
            assert_covers(
                &july4,
                &[date(2020, 7, 4), date(2021, 7, 4), date(2023, 7, 4)],
            );
            assert_not_covers(
                &july4,
                &[date(2019, 7, 4), date(2024, 7, 4), date(2023, 7, 5)],
            );
        }
    }

    #[test]
    fn yearly_count_includes_dtstart() {
        let christmas = holiday(&["DTSTART;VALUE=DATE:20201225", "RRULE:FREQ=YEARLY;COUNT=3"]);
        assert_eq!(
            christmas.starts,
            [date(2020, 12, 25), date(2021, 12, 25), date(2022, 12, 25)]
        );
        assert_eq!(christmas.rule.as_deref(), Some("FREQ=YEARLY;COUNT=3"));
        assert_covers(
            &christmas,
            &[date(2020, 12, 25), date(2021, 12, 25), date(2022, 12, 25)],
        );
        assert_not_covers(&christmas, &[date(2023, 12, 25), date(2019, 12, 25)]);
    }

    #[test]
    fn yearly_interval_with_count() {
        let every_other = holiday(&[
            "DTSTART;VALUE=DATE:20201225",
            "RRULE:FREQ=YEARLY;INTERVAL=2;COUNT=3",
        ]);
        assert_covers(
            &every_other,
            &[date(2020, 12, 25), date(2022, 12, 25), date(2024, 12, 25)],
        );
        assert_not_covers(
            &every_other,
            &[date(2021, 12, 25), date(2023, 12, 25), date(2026, 12, 25)],
        );
    }

    #[test]
    fn us_thanksgiving_is_the_fourth_thursday_of_november() {
        let thanksgiving = holiday(&[
            "SUMMARY:Thanksgiving Day",
            "DTSTART;VALUE=DATE:20251127",
            "RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=4TH",
        ]);
        assert_covers(
            &thanksgiving,
            &[date(2025, 11, 27), date(2026, 11, 26), date(2027, 11, 25)],
        );
        assert_not_covers(
            &thanksgiving,
            &[date(2026, 11, 19), date(2026, 11, 27), date(2027, 11, 26)],
        );
    }

    #[test]
    fn us_memorial_day_is_the_last_monday_of_may() {
        let memorial = holiday(&[
            "DTSTART;VALUE=DATE:20250526",
            "RRULE:FREQ=YEARLY;BYDAY=-1MO;BYMONTH=5",
        ]);
        assert_covers(
            &memorial,
            &[date(2025, 5, 26), date(2026, 5, 25), date(2027, 5, 31)],
        );
        assert_not_covers(
            &memorial,
            &[date(2026, 5, 31), date(2027, 5, 24), date(2024, 5, 27)],
        );
    }

    #[test]
    fn fifth_weekday_is_skipped_in_years_without_one() {
        // March 2026 and 2027 have five Mondays; 2028-2030 do not; 2031 does.
        let rule = |count: &str| {
            holiday(&[
                "DTSTART;VALUE=DATE:20260330",
                &format!("RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=5MO{count}"),
            ])
        };
        let open_ended = rule("");
        assert_covers(
            &open_ended,
            &[date(2026, 3, 30), date(2027, 3, 29), date(2031, 3, 31)],
        );
        assert_not_covers(&open_ended, &[date(2028, 3, 27), date(2028, 3, 31)]);
        assert_covers(&rule(";COUNT=3"), &[date(2031, 3, 31)]);
        assert_not_covers(&rule(";COUNT=2"), &[date(2031, 3, 31)]);
    }

    #[test]
    fn february_29_occurs_only_in_leap_years() {
        let leap = holiday(&["DTSTART;VALUE=DATE:20240229", "RRULE:FREQ=YEARLY"]);
        assert_covers(
            &leap,
            &[date(2024, 2, 29), date(2028, 2, 29), date(2036, 2, 29)],
        );
        assert_not_covers(
            &leap,
            &[
                date(2025, 2, 28),
                date(2025, 3, 1),
                date(2030, 2, 28),
                date(2030, 3, 1),
            ],
        );
        // COUNT only counts years where the date exists.
        let twice = holiday(&["DTSTART;VALUE=DATE:20240229", "RRULE:FREQ=YEARLY;COUNT=2"]);
        assert_covers(&twice, &[date(2028, 2, 29)]);
        assert_not_covers(&twice, &[date(2032, 2, 29)]);
    }

    #[test]
    fn multi_day_occurrences_cross_the_new_year() {
        let year_end = holiday(&[
            "DTSTART;VALUE=DATE:20251231",
            "DURATION:P3D",
            "RRULE:FREQ=YEARLY;UNTIL=20261231",
        ]);
        assert_covers(
            &year_end,
            &[
                date(2025, 12, 31),
                date(2026, 1, 1),
                date(2026, 1, 2),
                date(2026, 12, 31),
                date(2027, 1, 2),
            ],
        );
        assert_not_covers(
            &year_end,
            &[
                date(2025, 1, 1),
                date(2026, 1, 3),
                date(2026, 12, 30),
                date(2027, 12, 31),
                date(2028, 1, 1),
            ],
        );
    }

    #[test]
    fn exdate_removes_whole_occurrences() {
        let new_year = holiday(&[
            "DTSTART;VALUE=DATE:20200101",
            "DURATION:P2D",
            "RRULE:FREQ=YEARLY",
            "EXDATE;VALUE=DATE:20220101,20230101",
            "EXDATE:20250101T000000",
        ]);
        for gone in [date(2022, 1, 1), date(2023, 1, 1), date(2025, 1, 1)] {
            assert!(!new_year.starts.contains(&gone), "{gone}");
        }
        assert!(new_year.starts.contains(&date(2024, 1, 1)));
        assert_not_covers(
            &new_year,
            &[
                date(2022, 1, 1),
                date(2022, 1, 2),
                date(2023, 1, 1),
                date(2025, 1, 1),
            ],
        );
        assert_covers(
            &new_year,
            &[date(2021, 1, 2), date(2024, 1, 1), date(2026, 1, 2)],
        );
    }

    #[test]
    fn folded_lines_are_unfolded() {
        let folded = one_event(&[
            "SUMMARY:Golden",
            "  Week \\, Japan",
            "DTSTART;VALU",
            " E=DATE:2026050",
            "\t3",
            "DU",
            " RATION:P3D",
        ]);
        let calendar = parse_ics(&folded).unwrap();
        let golden = &calendar.holidays[0];
        assert_eq!(golden.summary, "Golden Week , Japan");
        assert_eq!((golden.start, golden.days), (date(2026, 5, 3), 3));
    }

    #[test]
    fn fold_inside_a_utf8_character_is_accepted_from_bytes() {
        // "元日" is E5 85 83 E6 97 A5; the fold splits the second character.
        let mut bytes = b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART:20260101\r\n".to_vec();
        bytes.extend_from_slice(b"SUMMARY:\xE5\x85\x83\xE6\r\n \x97\xA5\r\n");
        bytes.extend_from_slice(b"END:VEVENT\r\nEND:VCALENDAR\r\n");
        let calendar = parse_ics_bytes(&bytes).unwrap();
        assert_eq!(calendar.holidays[0].summary, "元日");
    }

    #[test]
    fn crlf_and_byte_order_mark_are_accepted() {
        let text = format!(
            "\u{feff}{}\r\n",
            one_event(&["DTSTART;VALUE=DATE:20260101"]).replace('\n', "\r\n")
        );
        let calendar = parse_ics(&text).unwrap();
        assert_eq!(calendar.holidays.len(), 1);
        assert!(calendar.covers(date(2026, 1, 1)));
        // Line numbers still count physical lines.
        let broken = one_event(&["SUMMARY:x", "DTSTART;VALUE=DATE:2026011"]).replace('\n', "\r\n");
        assert_eq!(parse_ics(&broken).unwrap_err().line, 6);
    }

    #[test]
    fn timed_events_are_skipped_and_counted() {
        let text = [
            "BEGIN:VCALENDAR",
            "BEGIN:VEVENT",
            "SUMMARY:Standup",
            "DTSTART;TZID=Asia/Tokyo:20260105T093000",
            "DTEND;TZID=Asia/Tokyo:20260105T094500",
            // Weekly rules are fine on timed events: they are not read.
            "RRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "DTSTART;VALUE=DATE-TIME:20260105T000000Z",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "DTSTART;VALUE=DATE:20260101",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
        .join("\n");
        let calendar = parse_ics(&text).unwrap();
        assert_eq!(calendar.skipped_timed_events, 2);
        assert_eq!(calendar.holidays.len(), 1);
        assert!(!calendar.covers(date(2026, 1, 5)));
    }

    #[test]
    fn sub_daily_rule_is_rejected_with_its_line() {
        let error = event_error(&[
            "SUMMARY:Payday",
            "DTSTART;VALUE=DATE:20260125",
            "RRULE:FREQ=HOURLY;BYMINUTE=0",
        ]);
        assert_eq!(error.line, 7);
        assert!(error.reason.contains("FREQ=HOURLY;BYMINUTE=0"), "{error}");
        assert!(error.reason.contains("repeats within a day"), "{error}");
        assert!(error.to_string().starts_with("line 7: RRULE "), "{error}");
    }

    #[test]
    fn missing_dtstart_points_at_the_event() {
        let error = event_error(&["SUMMARY:Mystery day", "DTEND;VALUE=DATE:20260102"]);
        assert_eq!(error.line, 4);
        assert!(error.reason.contains("no DTSTART"), "{error}");
    }

    #[test]
    fn dtend_not_after_dtstart_is_an_error() {
        for dtend in ["DTEND;VALUE=DATE:20260101", "DTEND;VALUE=DATE:20251231"] {
            let error = event_error(&["DTSTART;VALUE=DATE:20260101", dtend]);
            assert_eq!(error.line, 6);
            assert!(error.reason.contains("not after DTSTART"), "{error}");
        }
    }

    #[test]
    fn unsupported_or_inconsistent_events_name_the_problem() {
        let cases: &[(&[&str], usize, &str)] = &[
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYHOUR=9"],
                6,
                "BYHOUR repeats within a day",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=MINUTELY"],
                6,
                "FREQ=MINUTELY repeats within a day",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=FORTNIGHTLY"],
                6,
                "FREQ=FORTNIGHTLY is not a frequency",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;X-EASTER=1"],
                6,
                "X-EASTER is not supported",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYEASTER=0"],
                6,
                "BYEASTER is not supported",
            ),
            (
                &["DTSTART:20260130", "RRULE:FREQ=MONTHLY;BYDAY=XFR"],
                6,
                "BYDAY \"XFR\": the ordinal must be 1 to 53",
            ),
            (
                &["DTSTART:20260130", "RRULE:FREQ=MONTHLY;BYDAY=FRI"],
                6,
                "does not end in a weekday",
            ),
            (
                &["DTSTART:20260131", "RRULE:FREQ=MONTHLY;BYMONTHDAY=-32"],
                6,
                "BYMONTHDAY",
            ),
            (
                &["DTSTART:20260131", "RRULE:FREQ=MONTHLY;BYMONTHDAY=0"],
                6,
                "BYMONTHDAY",
            ),
            (
                &["DTSTART:20260131", "RRULE:FREQ=MONTHLY;BYMONTHDAY=1.5"],
                6,
                "\"1.5\" is not a valid number",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYMONTH=13"],
                6,
                "BYMONTH=13: \"13\" is not a valid number",
            ),
            (
                &["DTSTART:20260105", "RRULE:FREQ=MONTHLY;BYWEEKNO=2"],
                6,
                "BYWEEKNO",
            ),
            (
                &["DTSTART:20260105", "RRULE:FREQ=MONTHLY;BYSETPOS=1"],
                6,
                "BYSETPOS",
            ),
            (
                &["DTSTART:20260113", "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=2MO"],
                6,
                "DTSTART 2026-01-13 is not an occurrence of this rule (the first is 2027-01-11)",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYMONTH=2"],
                6,
                "is not an occurrence of this rule",
            ),
            (
                &[
                    "DTSTART:20260101",
                    "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
                ],
                6,
                "no occurrence on or after DTSTART",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;UNTIL=20251231"],
                6,
                "UNTIL",
            ),
            (
                &[
                    "DTSTART:20260101",
                    "RRULE:FREQ=YEARLY;COUNT=2;UNTIL=20300101",
                ],
                6,
                "UNTIL and COUNT",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;COUNT=0"],
                6,
                "COUNT=0 must be",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;INTERVAL=0"],
                6,
                "INTERVAL=0 must be",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;INTERVAL=70000"],
                6,
                "INTERVAL=70000 is too large",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;FREQ=DAILY"],
                6,
                "FREQ appears twice",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYMONTH"],
                6,
                "has no '='",
            ),
            (
                &["DTSTART:20260101", "RRULE:INTERVAL=2"],
                6,
                "FREQ is missing",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY", "RRULE:FREQ=YEARLY"],
                7,
                "RRULE appears twice",
            ),
            (
                &["DTSTART:00010101", "RRULE:FREQ=DAILY"],
                6,
                "move DTSTART to a recent occurrence",
            ),
            (
                &["DTSTART:20260101", "RDATE;VALUE=PERIOD:20260102/P1D"],
                6,
                "RDATE;VALUE=PERIOD is not supported",
            ),
            (
                &["DTSTART:20260101", "RDATE:20260102T090000Z"],
                6,
                "has a time but DTSTART is a date",
            ),
            (
                &["DTSTART:20260101", "RDATE;VALUE=DATE:2026010"],
                6,
                "RDATE: \"2026010\" is not a date",
            ),
            (
                &[
                    "DTSTART:20260101",
                    "RRULE:FREQ=DAILY",
                    "EXRULE:FREQ=WEEKLY;BYDAY=XX",
                ],
                7,
                "EXRULE \"FREQ=WEEKLY;BYDAY=XX\": BYDAY",
            ),
            (
                &["DTSTART:20260101", "DTEND:20260102", "DURATION:P1D"],
                7,
                "DTEND or DURATION, not both",
            ),
            (
                &["DTSTART:20260101", "DURATION:PT24H"],
                6,
                "whole number of days or weeks",
            ),
            (&["DTSTART:20260101", "DURATION:P0D"], 6, "at least one day"),
            (
                &["DTSTART:20260101", "DTEND:20260102T000000"],
                6,
                "DTEND has a time",
            ),
            (
                &["DTSTART:20260230"],
                5,
                "20260230 is not a valid calendar date",
            ),
            (
                &["DTSTART:2026-01-01"],
                5,
                "is not a date; expected YYYYMMDD",
            ),
            (
                &["DTSTART;VALUE=DATE:20260101T000000"],
                5,
                "has a time but VALUE=DATE",
            ),
            (&["DTSTART:20260101T0900"], 5, "is not a date-time"),
            (
                &["DTSTART;VALUE=PERIOD:20260101/P1D"],
                5,
                "VALUE=PERIOD is not supported",
            ),
            (
                &["DTSTART:20260101", "DTSTART:20260102"],
                6,
                "first on line 5",
            ),
            (
                &["DTSTART:20260101", "EXDATE:2026010"],
                6,
                "EXDATE: \"2026010\" is not a date",
            ),
            (
                &[
                    "DTSTART:20260101",
                    "RECURRENCE-ID;RANGE=THISANDFUTURE:20260101",
                ],
                6,
                "THISANDFUTURE",
            ),
        ];
        for (event, line, needle) in cases {
            let error = event_error(event);
            assert_eq!(error.line, *line, "{event:?}: {error}");
            assert!(
                error.reason.contains(needle),
                "{event:?}: expected {needle:?} in {error}"
            );
        }
    }

    #[test]
    fn structure_errors_carry_line_numbers() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 1, "missing BEGIN:VCALENDAR"),
            ("\n\n", 1, "missing BEGIN:VCALENDAR"),
            (
                "BEGIN:VEVENT\nDTSTART:20260101\nEND:VEVENT",
                1,
                "expected BEGIN:VCALENDAR, found BEGIN:VEVENT",
            ),
            (
                "VERSION:2.0\nBEGIN:VCALENDAR\nEND:VCALENDAR",
                1,
                "expected BEGIN:VCALENDAR, found VERSION",
            ),
            ("just some text", 1, "expected NAME:VALUE"),
            (" folded first line", 1, "no line before it"),
            (
                "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20260101\nEND:VCALENDAR",
                4,
                "add END:VEVENT",
            ),
            (
                "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20260101\nEND:VEVENT",
                1,
                "BEGIN:VCALENDAR is never closed",
            ),
            (
                "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20260101",
                2,
                "BEGIN:VEVENT is never closed",
            ),
            (
                "BEGIN:VCALENDAR\nEND:VALARM\nEND:VCALENDAR",
                2,
                "nothing named VALARM is open",
            ),
            (
                "BEGIN:VCALENDAR\nEND:VCALENDAR\nEND:VCALENDAR",
                3,
                "no matching BEGIN:VCALENDAR",
            ),
            (
                "BEGIN:VCALENDAR\nEND:VCALENDAR\nSUMMARY:x",
                3,
                "after END:VCALENDAR",
            ),
            ("BEGIN:VCALENDAR\nBEGIN:VCALENDAR", 2, "cannot be nested"),
            (
                "BEGIN:VCALENDAR\nBEGIN:\nEND:VCALENDAR",
                2,
                "needs a component name",
            ),
            (
                "BEGIN:VCALENDAR\nX-BAD;NOVALUE:1\nEND:VCALENDAR",
                2,
                "parameter \"NOVALUE\" has no '='",
            ),
            (
                "BEGIN:VCALENDAR\nBAD NAME:1\nEND:VCALENDAR",
                2,
                "is not a property name",
            ),
        ];
        for (text, line, needle) in cases {
            let error = parse_ics(text).unwrap_err();
            assert_eq!(error.line, *line, "{text:?}: {error}");
            assert!(
                error.reason.contains(needle),
                "{text:?}: expected {needle:?} in {error}"
            );
        }
    }

    #[test]
    fn invalid_utf8_is_reported_with_its_line() {
        let error = parse_ics_bytes(b"BEGIN:VCALENDAR\nSUMMARY:\xFF\nEND:VCALENDAR").unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.reason.contains("UTF-8"), "{error}");
    }

    #[test]
    fn unknown_components_and_properties_are_ignored() {
        let text = [
            "begin:vcalendar",
            "X-WR-CALNAME:Holidays",
            "BEGIN:VTIMEZONE",
            "TZID:Europe/London",
            "BEGIN:DAYLIGHT",
            "DTSTART:19810329T010000",
            "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU",
            "END:DAYLIGHT",
            "END:VTIMEZONE",
            "BEGIN:X-WRAPPER",
            // Not directly inside the VCALENDAR, so not an event of ours.
            "BEGIN:VEVENT",
            "DTSTART:20260202",
            "END:VEVENT",
            "END:X-WRAPPER",
            "Begin:VEvent",
            "dtstart;value=date;x-note=\"a:b;c\":20260525",
            "Summary:Spring bank holiday",
            "X-MICROSOFT-CDO-BUSYSTATUS:FREE",
            "BEGIN:VALARM",
            "TRIGGER:-PT15M",
            "DTSTART:20260101",
            "END:VALARM",
            "end:vevent",
            "BEGIN:VTODO",
            "DTSTART:20260303",
            "END:VTODO",
            "END:VCALENDAR",
            "",
        ]
        .join("\n");
        let calendar = parse_ics(&text).unwrap();
        assert_eq!(calendar.holidays.len(), 1);
        assert_eq!(calendar.holidays[0].summary, "Spring bank holiday");
        assert_eq!(calendar.holidays[0].start, date(2026, 5, 25));
        assert_eq!(calendar.skipped_timed_events, 0);
        assert!(!calendar.covers(date(2026, 2, 2)));
        assert!(!calendar.covers(date(2026, 3, 3)));
    }

    #[test]
    fn summary_escapes_are_undone() {
        let escaped = holiday(&[
            "DTSTART:20260101",
            "SUMMARY:Foo\\, Bar\\; Baz\\\\ Qux\\nNext\\N\\:end\\q",
            "SUMMARY;LANGUAGE=ja:二つ目",
        ]);
        assert_eq!(escaped.summary, "Foo, Bar; Baz\\ Qux\nNext\n:end\\q");
    }

    #[test]
    fn several_calendars_in_one_text_are_read() {
        let first = one_event(&["DTSTART:20260101"]);
        let second = one_event(&["DTSTART:20260102"]);
        let calendar = parse_ics(&format!("{first}\n{second}\n")).unwrap();
        assert_eq!(calendar.holidays.len(), 2);
    }

    #[test]
    fn recurrence_id_moves_or_cancels_one_occurrence() {
        let text = [
            "BEGIN:VCALENDAR",
            // Overrides may come before the series they change.
            "BEGIN:VEVENT",
            "UID:founders-day",
            "RECURRENCE-ID;VALUE=DATE:20240301",
            "DTSTART;VALUE=DATE:20240304",
            "SUMMARY:Founders' Day (moved)",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:founders-day",
            "DTSTART;VALUE=DATE:20200301",
            "RRULE:FREQ=YEARLY",
            "SUMMARY:Founders' Day",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:founders-day",
            "RECURRENCE-ID;VALUE=DATE:20250301",
            "DTSTART;VALUE=DATE:20250301",
            "STATUS:CANCELLED",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:dropped",
            "DTSTART;VALUE=DATE:20260401",
            "STATUS:CANCELLED",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
        .join("\n");
        let calendar = parse_ics(&text).unwrap();
        assert_eq!(calendar.holidays.len(), 2);
        assert_eq!(calendar.skipped_timed_events, 0);
        let series = &calendar.holidays[1].starts;
        assert!(!series.contains(&date(2024, 3, 1)) && !series.contains(&date(2025, 3, 1)));
        assert!(series.contains(&date(2023, 3, 1)) && series.contains(&date(2026, 3, 1)));
        let moved = calendar
            .holiday_on(date(2024, 3, 4))
            .map(|h| h.summary.as_str());
        assert_eq!(moved, Some("Founders' Day (moved)"));
        assert!(!calendar.covers(date(2024, 3, 1)));
        assert!(!calendar.covers(date(2025, 3, 1)));
        assert!(calendar.covers(date(2026, 3, 1)));
        assert!(!calendar.covers(date(2026, 4, 1)));
    }

    /// Japanese public holidays as an exporter might write them: CRLF, a
    /// VTIMEZONE, UTF-8 summaries (one folded), a VALARM and a timed event.
    const JAPAN: &str = "BEGIN:VCALENDAR\r
PRODID:-//hushwatch//jp holidays//JA\r
VERSION:2.0\r
CALSCALE:GREGORIAN\r
METHOD:PUBLISH\r
X-WR-CALNAME:日本の祝日\r
X-WR-TIMEZONE:Asia/Tokyo\r
BEGIN:VTIMEZONE\r
TZID:Asia/Tokyo\r
BEGIN:STANDARD\r
TZOFFSETFROM:+0900\r
TZOFFSETTO:+0900\r
TZNAME:JST\r
DTSTART:19700101T000000\r
END:STANDARD\r
END:VTIMEZONE\r
BEGIN:VEVENT\r
UID:ganjitsu@hushwatch.test\r
DTSTAMP:20251201T000000Z\r
DTSTART;VALUE=DATE:20260101\r
DTEND;VALUE=DATE:20260104\r
RRULE:FREQ=YEARLY\r
SUMMARY;LANGUAGE=ja:元日・年始休み\r
TRANSP:TRANSPARENT\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:seijin@hushwatch.test\r
DTSTART;VALUE=DATE:20260112\r
RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=2MO\r
SUMMARY:成人の日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:kenkoku@hushwatch.test\r
DTSTART;VALUE=DATE:20260211\r
RRULE:FREQ=YEARLY\r
SUMMARY:建国記念の日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:shunbun-2026@hushwatch.test\r
DTSTART;VALUE=DATE:20260320\r
SUMMARY:春分の日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:golden-week@hushwatch.test\r
DTSTART;VALUE=DATE:20260503\r
DURATION:P3D\r
RRULE:FREQ=YEARLY\r
SUMMARY:憲法記念日・みどりの日・こど\r
 もの日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:furikae-2026-05-06@hushwatch.test\r
DTSTART;VALUE=DATE:20260506\r
SUMMARY:振替休日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:umi@hushwatch.test\r
DTSTART;VALUE=DATE:20260720\r
RRULE:FREQ=YEARLY;BYMONTH=7;BYDAY=3MO\r
SUMMARY:海の日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:keirou@hushwatch.test\r
DTSTART;VALUE=DATE:20260921\r
RRULE:FREQ=YEARLY;BYMONTH=9;BYDAY=+3MO\r
SUMMARY:敬老の日\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:sports@hushwatch.test\r
DTSTART;VALUE=DATE:20261012\r
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=2MO\r
SUMMARY:スポーツの日\r
BEGIN:VALARM\r
ACTION:DISPLAY\r
TRIGGER:-PT15H\r
DESCRIPTION:明日は祝日\r
END:VALARM\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:nenmatsu@hushwatch.test\r
DTSTART;VALUE=DATE:20261229\r
DTEND;VALUE=DATE:20270101\r
RRULE:FREQ=YEARLY\r
SUMMARY:年末休業\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:all-hands@hushwatch.test\r
DTSTART;TZID=Asia/Tokyo:20260105T100000\r
DTEND;TZID=Asia/Tokyo:20260105T110000\r
SUMMARY:全社会議\r
END:VEVENT\r
END:VCALENDAR\r
";

    #[test]
    fn japanese_holiday_file() {
        let calendar = parse_ics(JAPAN).unwrap();
        assert_eq!(calendar.holidays.len(), 10);
        assert_eq!(calendar.skipped_timed_events, 1);
        let name = |y, m, d| {
            calendar
                .holiday_on(date(y, m, d))
                .map(|h| h.summary.as_str())
        };
        let expected = [
            ((2026, 1, 1), "元日・年始休み"),
            ((2026, 1, 3), "元日・年始休み"),
            ((2027, 1, 1), "元日・年始休み"),
            ((2026, 1, 12), "成人の日"),
            ((2027, 1, 11), "成人の日"),
            ((2028, 1, 10), "成人の日"),
            ((2027, 2, 11), "建国記念の日"),
            ((2026, 3, 20), "春分の日"),
            ((2026, 5, 4), "憲法記念日・みどりの日・こどもの日"),
            ((2027, 5, 5), "憲法記念日・みどりの日・こどもの日"),
            ((2026, 5, 6), "振替休日"),
            ((2027, 7, 19), "海の日"),
            ((2027, 9, 20), "敬老の日"),
            ((2027, 10, 11), "スポーツの日"),
            ((2026, 12, 31), "年末休業"),
        ];
        for ((y, m, d), summary) in expected {
            assert_eq!(name(y, m, d), Some(summary), "{y}-{m}-{d}");
        }
        for (y, m, d) in [
            (2026, 1, 4),
            (2026, 1, 5),
            (2027, 1, 4),
            (2027, 3, 20),
            (2027, 5, 6),
            (2026, 12, 28),
        ] {
            assert_eq!(name(y, m, d), None, "{y}-{m}-{d}");
        }
    }

    /// Occurrence starts as python-dateutil 2.9.0 expands them: `rruleset`
    /// with the rule (and EXRULE) at DTSTART, `between(2016-06-01,
    /// 2036-06-01, inc=True)`, the test window. Count, first and last starts,
    /// and the sum of `date.toordinal()` (chrono's `num_days_from_ce`) over
    /// all of them, so one wrong date anywhere changes the sum. Regenerate
    /// with the script in the commit that added this table (issue #32).
    struct Reference {
        dtstart: &'static str,
        rrule: &'static str,
        exrule: Option<&'static str>,
        count: usize,
        first: [&'static str; 3],
        last: [&'static str; 3],
        checksum: i64,
    }

    const REFERENCES: &[Reference] = &[
        Reference {
            dtstart: "20260130",
            rrule: "FREQ=MONTHLY;INTERVAL=2;BYDAY=FR;BYSETPOS=-1",
            exrule: None,
            count: 63,
            first: ["2026-01-30", "2026-03-27", "2026-05-29"],
            last: ["2036-01-25", "2036-03-28", "2036-05-30"],
            checksum: 46716376,
        },
        Reference {
            dtstart: "20260131",
            rrule: "FREQ=MONTHLY;COUNT=18;BYMONTHDAY=-1",
            exrule: None,
            count: 18,
            first: ["2026-01-31", "2026-02-28", "2026-03-31"],
            last: ["2027-04-30", "2027-05-31", "2027-06-30"],
            checksum: 13318273,
        },
        Reference {
            dtstart: "20260109",
            rrule: "FREQ=WEEKLY;INTERVAL=2;BYDAY=FR",
            exrule: None,
            count: 272,
            first: ["2026-01-09", "2026-01-23", "2026-02-06"],
            last: ["2036-05-02", "2036-05-16", "2036-05-30"],
            checksum: 201693984,
        },
        Reference {
            dtstart: "20250805",
            rrule: "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO",
            exrule: None,
            count: 4,
            first: ["2025-08-05", "2025-08-10", "2025-08-19"],
            last: ["2025-08-10", "2025-08-19", "2025-08-24"],
            checksum: 2957910,
        },
        Reference {
            dtstart: "20250805",
            rrule: "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU",
            exrule: None,
            count: 4,
            first: ["2025-08-05", "2025-08-17", "2025-08-19"],
            last: ["2025-08-17", "2025-08-19", "2025-08-31"],
            checksum: 2957924,
        },
        Reference {
            dtstart: "20260511",
            rrule: "FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO",
            exrule: None,
            count: 11,
            first: ["2026-05-11", "2027-05-17", "2028-05-15"],
            last: ["2034-05-15", "2035-05-14", "2036-05-12"],
            checksum: 8157335,
        },
        Reference {
            dtstart: "20261231",
            rrule: "FREQ=YEARLY;BYYEARDAY=-1",
            exrule: None,
            count: 10,
            first: ["2026-12-31", "2027-12-31", "2028-12-31"],
            last: ["2033-12-31", "2034-12-31", "2035-12-31"],
            checksum: 7416247,
        },
        Reference {
            dtstart: "20260105",
            rrule: "FREQ=DAILY;INTERVAL=10;COUNT=5",
            exrule: None,
            count: 5,
            first: ["2026-01-05", "2026-01-15", "2026-01-25"],
            last: ["2026-01-25", "2026-02-04", "2026-02-14"],
            checksum: 3698205,
        },
        Reference {
            dtstart: "20240229",
            rrule: "FREQ=YEARLY;COUNT=3",
            exrule: None,
            count: 3,
            first: ["2024-02-29", "2028-02-29", "2032-02-29"],
            last: ["2024-02-29", "2028-02-29", "2032-02-29"],
            checksum: 2221218,
        },
        Reference {
            dtstart: "20251127",
            rrule: "FREQ=YEARLY;BYMONTH=11;BYDAY=4TH",
            exrule: None,
            count: 11,
            first: ["2025-11-27", "2026-11-26", "2027-11-25"],
            last: ["2033-11-24", "2034-11-23", "2035-11-22"],
            checksum: 8155464,
        },
        Reference {
            dtstart: "20260323",
            rrule: "FREQ=MONTHLY;BYDAY=-2MO",
            exrule: None,
            count: 123,
            first: ["2026-03-23", "2026-04-20", "2026-05-18"],
            last: ["2036-03-24", "2036-04-21", "2036-05-19"],
            checksum: 91211040,
        },
        Reference {
            dtstart: "20260101",
            rrule: "FREQ=MONTHLY;BYMONTHDAY=1,15;UNTIL=20270101",
            exrule: None,
            count: 25,
            first: ["2026-01-01", "2026-01-15", "2026-02-01"],
            last: ["2026-12-01", "2026-12-15", "2027-01-01"],
            checksum: 18494954,
        },
        Reference {
            dtstart: "20260102",
            rrule: "FREQ=WEEKLY;BYDAY=FR;UNTIL=20261231",
            exrule: Some("FREQ=MONTHLY;BYDAY=1FR"),
            count: 40,
            first: ["2026-01-09", "2026-01-16", "2026-01-23"],
            last: ["2026-12-11", "2026-12-18", "2026-12-25"],
            checksum: 29591979,
        },
        Reference {
            dtstart: "20260130",
            rrule: "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
            exrule: None,
            count: 125,
            first: ["2026-01-30", "2026-02-27", "2026-03-31"],
            last: ["2036-03-31", "2036-04-30", "2036-05-30"],
            checksum: 92691535,
        },
        Reference {
            dtstart: "20100101",
            rrule: "FREQ=DAILY",
            exrule: None,
            count: 7306,
            first: ["2016-06-01", "2016-06-02", "2016-06-03"],
            last: ["2036-05-30", "2036-05-31", "2036-06-01"],
            checksum: 5404748661,
        },
    ];

    fn iso(date: NaiveDate) -> String {
        date.format("%Y-%m-%d").to_string()
    }

    #[test]
    fn expansion_matches_dateutil() {
        for reference in REFERENCES {
            let dtstart = format!("DTSTART;VALUE=DATE:{}", reference.dtstart);
            let rrule = format!("RRULE:{}", reference.rrule);
            let mut event = vec![dtstart.as_str(), rrule.as_str()];
            let exrule = reference.exrule.map(|exrule| format!("EXRULE:{exrule}"));
            event.extend(exrule.as_deref());
            let starts = holiday(&event).starts;
            let context = format!("{} {}", reference.dtstart, reference.rrule);
            assert_eq!(starts.len(), reference.count, "{context}");
            let first: Vec<String> = starts.iter().take(3).copied().map(iso).collect();
            let last: Vec<String> = starts[starts.len() - 3..]
                .iter()
                .copied()
                .map(iso)
                .collect();
            assert_eq!(first, reference.first, "{context}");
            assert_eq!(last, reference.last, "{context}");
            let checksum: i64 = starts.iter().map(|d| i64::from(d.num_days_from_ce())).sum();
            assert_eq!(checksum, reference.checksum, "{context}");
        }
    }

    #[test]
    fn the_issues_examples_cover_the_right_days() {
        // Outlook's "last Friday of every other month".
        let close = holiday(&[
            "DTSTART;VALUE=DATE:20260130",
            "RRULE:FREQ=MONTHLY;INTERVAL=2;BYDAY=FR;BYSETPOS=-1",
        ]);
        assert_covers(
            &close,
            &[date(2026, 1, 30), date(2026, 3, 27), date(2026, 5, 29)],
        );
        assert_not_covers(
            &close,
            &[date(2026, 2, 27), date(2026, 3, 20), date(2026, 4, 24)],
        );
        // Month-end close, 18 times: 2026-01-31 .. 2027-06-30.
        let month_end = holiday(&[
            "DTSTART;VALUE=DATE:20260131",
            "RRULE:FREQ=MONTHLY;COUNT=18;BYMONTHDAY=-1",
        ]);
        assert_covers(
            &month_end,
            &[date(2026, 2, 28), date(2026, 4, 30), date(2027, 6, 30)],
        );
        assert_not_covers(
            &month_end,
            &[date(2026, 3, 30), date(2027, 7, 31), date(2028, 2, 29)],
        );
        // A 9/80 schedule's every other Friday, around the DST weekends of
        // New York (Mar 8), Berlin (Mar 29) and Sydney (Apr 5) in 2026.
        let nine_eighty = holiday(&[
            "DTSTART;VALUE=DATE:20260109",
            "RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=FR",
        ]);
        assert_covers(
            &nine_eighty,
            &[date(2026, 3, 6), date(2026, 3, 20), date(2026, 4, 3)],
        );
        assert_not_covers(
            &nine_eighty,
            &[date(2026, 3, 13), date(2026, 3, 27), date(2026, 4, 10)],
        );
    }

    /// Overrides of monthly and weekly instances, as Outlook, Google and
    /// Apple export them: same UID, RECURRENCE-ID with the original date.
    #[test]
    fn overrides_move_and_cancel_monthly_and_weekly_instances() {
        let text = [
            "BEGIN:VCALENDAR",
            "BEGIN:VEVENT",
            "UID:nine-eighty",
            "DTSTART;VALUE=DATE:20260109",
            "RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=FR",
            "SUMMARY:9/80 Friday off",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:nine-eighty",
            // Moved into the week after Berlin's DST change (Mar 29).
            "RECURRENCE-ID;VALUE=DATE:20260320",
            "DTSTART;VALUE=DATE:20260330",
            "SUMMARY:9/80 Friday off (moved)",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:close",
            "DTSTART;VALUE=DATE:20260130",
            "RRULE:FREQ=MONTHLY;INTERVAL=2;BYDAY=FR;BYSETPOS=-1",
            "SUMMARY:Close",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:close",
            // Moved to the Thursday before Sydney's DST change (Apr 5).
            "RECURRENCE-ID;VALUE=DATE:20260327",
            "DTSTART;VALUE=DATE:20260402",
            "SUMMARY:Close (moved)",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:close",
            "RECURRENCE-ID;VALUE=DATE:20260529",
            "DTSTART;VALUE=DATE:20260529",
            "STATUS:CANCELLED",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
        .join("\n");
        let calendar = parse_ics(&text).unwrap();
        let name = |y, m, d| {
            calendar
                .holiday_on(date(y, m, d))
                .map(|h| h.summary.as_str())
        };
        assert_eq!(name(2026, 3, 20), None);
        assert_eq!(name(2026, 3, 30), Some("9/80 Friday off (moved)"));
        assert_eq!(name(2026, 4, 3), Some("9/80 Friday off"));
        assert_eq!(name(2026, 3, 27), None);
        assert_eq!(name(2026, 4, 2), Some("Close (moved)"));
        // May 29 stays a 9/80 Friday; only the Close occurrence is gone.
        let close = calendar.holidays.iter().find(|h| h.summary == "Close");
        assert!(close.is_some_and(|h| !h.starts.contains(&date(2026, 5, 29))));
        assert!(close.is_some_and(|h| h.starts.contains(&date(2026, 7, 31))));
        assert_eq!(name(2026, 7, 31), Some("Close"));
    }

    #[test]
    fn rdate_adds_and_exrule_removes_occurrences() {
        let fridays = holiday(&[
            "DTSTART;VALUE=DATE:20260102",
            "DURATION:P1D",
            "RRULE:FREQ=WEEKLY;BYDAY=FR;UNTIL=20261231",
            // First Fridays are worked.
            "EXRULE:FREQ=MONTHLY;BYDAY=1FR",
            "RDATE;VALUE=DATE:20261228,20261229",
            "RDATE:20401225",
            "EXDATE;VALUE=DATE:20261229",
        ]);
        assert_covers(
            &fridays,
            &[date(2026, 1, 9), date(2026, 12, 25), date(2026, 12, 28)],
        );
        // RDATEs are kept outside the window too: they are explicit.
        assert_covers(&fridays, &[date(2040, 12, 25)]);
        assert_not_covers(
            &fridays,
            &[
                date(2026, 1, 2),
                date(2026, 2, 6),
                date(2026, 12, 4),
                date(2026, 12, 29),
                date(2027, 1, 8),
            ],
        );
        // RDATE alone, without RRULE.
        let two_days = holiday(&["DTSTART:20260101", "RDATE:20260401"]);
        assert_eq!(two_days.starts, [date(2026, 1, 1), date(2026, 4, 1)]);
    }

    #[test]
    fn recurring_events_are_expanded_only_inside_the_window() {
        let window = parse_ics(&one_event(&["DTSTART:20260101"])).unwrap().window;
        assert_eq!(
            (window.first, window.last),
            (date(2016, 6, 1), date(2036, 6, 1))
        );
        let yearly = holiday(&["DTSTART:20000101", "RRULE:FREQ=YEARLY"]);
        assert_covers(&yearly, &[date(2017, 1, 1), date(2036, 1, 1)]);
        assert_not_covers(
            &yearly,
            &[date(2000, 1, 1), date(2016, 1, 1), date(2037, 1, 1)],
        );
        // A single event is exact wherever it is.
        let far = holiday(&["DTSTART:20400101"]);
        assert_covers(&far, &[date(2040, 1, 1)]);
        // An occurrence that starts just before the window still covers its
        // days inside it.
        let straddling = holiday(&["DTSTART:20150530", "DURATION:P5D", "RRULE:FREQ=YEARLY"]);
        assert_eq!(straddling.starts.first(), Some(&date(2016, 5, 30)));
        assert_covers(&straddling, &[date(2016, 6, 1), date(2016, 6, 3)]);
        assert_not_covers(&straddling, &[date(2016, 6, 4)]);
    }

    #[test]
    fn too_many_occurrences_are_refused_with_the_rule_that_overflows() {
        // Seven daily rules over the 20-year window: 7 x 7,306 > 50,000.
        let mut lines = vec!["BEGIN:VCALENDAR".to_string()];
        for _ in 0..7 {
            lines.extend(
                [
                    "BEGIN:VEVENT",
                    "DTSTART:20100101",
                    "RRULE:FREQ=DAILY",
                    "END:VEVENT",
                ]
                .map(String::from),
            );
        }
        lines.push("END:VCALENDAR".to_string());
        let error = parse_ics(&lines.join("\n")).unwrap_err();
        assert_eq!(error.line, 1 + 4 * 6 + 3, "{error}");
        assert!(
            error.reason.contains("more than 50000 holiday occurrences"),
            "{error}"
        );
        // Six fit.
        lines.drain(1 + 4 * 6..1 + 4 * 7);
        let calendar = parse_ics(&lines.join("\n")).unwrap();
        assert_eq!(calendar.occurrence_count(), 6 * 7306);
    }

    #[test]
    fn many_rules_cannot_add_up_to_unbounded_work() {
        // Each daily rule runs ~97,000 steps before ending just before the
        // window, under the per-rule bound; six of them are over the
        // per-file one, although none keeps an occurrence.
        let mut lines = vec!["BEGIN:VCALENDAR".to_string()];
        for _ in 0..6 {
            lines.extend(
                [
                    "BEGIN:VEVENT",
                    "DTSTART:17500101",
                    "RRULE:FREQ=DAILY;UNTIL=20160101",
                    "END:VEVENT",
                ]
                .map(String::from),
            );
        }
        lines.push("END:VCALENDAR".to_string());
        let error = parse_ics(&lines.join("\n")).unwrap_err();
        assert_eq!(error.line, 1 + 4 * 5 + 3, "{error}");
        assert!(
            error.reason.contains("more than 500000 repetitions"),
            "{error}"
        );
    }

    #[test]
    fn extreme_dates_do_not_panic() {
        for event in [
            &["DTSTART:99991231", "RRULE:FREQ=DAILY"][..],
            &["DTSTART:99991201", "RRULE:FREQ=MONTHLY;BYMONTHDAY=-1"],
            &["DTSTART:00000101", "RRULE:FREQ=YEARLY"],
            &[
                "DTSTART:19000101",
                "DURATION:P99999999D",
                "RRULE:FREQ=YEARLY",
            ],
            &["DTSTART:20260101", "RRULE:FREQ=YEARLY;INTERVAL=65535"],
            &[
                "DTSTART:20260101",
                "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;COUNT=3",
            ],
        ] {
            if let Ok(calendar) = parse_ics(&one_event(event)) {
                for day in [
                    date(2026, 1, 1),
                    date(2036, 6, 1),
                    NaiveDate::MAX,
                    NaiveDate::MIN,
                ] {
                    let _ = calendar.covers(day);
                }
            }
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn rule() -> impl Strategy<Value = String> {
            let freq = prop::sample::select(vec!["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]);
            let day = (prop::option::of(-5i8..=5), 0usize..7).prop_map(|(nth, wd)| {
                let code = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"][wd];
                nth.filter(|n| *n != 0)
                    .map_or(code.to_string(), |n| format!("{n}{code}"))
            });
            (
                freq,
                1u32..4,
                prop::option::of(1u32..40),
                prop::collection::vec(day, 0..3),
                prop::option::of(prop::sample::select(vec![-31i8, -1, 1, 15, 28, 31])),
                prop::option::of(prop::sample::select(vec![-2i32, -1, 1, 2])),
                prop::option::of(1u32..=12),
            )
                .prop_map(
                    |(freq, interval, count, days, month_day, set_pos, month)| {
                        let mut parts =
                            vec![format!("FREQ={freq}"), format!("INTERVAL={interval}")];
                        parts.extend(count.map(|c| format!("COUNT={c}")));
                        if !days.is_empty() {
                            parts.push(format!("BYDAY={}", days.join(",")));
                        }
                        parts.extend(month_day.map(|d| format!("BYMONTHDAY={d}")));
                        parts.extend(set_pos.map(|p| format!("BYSETPOS={p}")));
                        parts.extend(month.map(|m| format!("BYMONTH={m}")));
                        parts.join(";")
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Any rule is either refused on its own line or gives sorted,
            /// distinct starts beginning at DTSTART, and the binary-search
            /// lookup agrees with a scan of the starts.
            #[test]
            fn rules_are_refused_on_their_line_or_looked_up_exactly(
                rule in rule(),
                offset in 0u64..3000,
                days in 1u32..4,
            ) {
                let start = date(2020, 1, 1) + Days::new(offset);
                let dtstart = format!("DTSTART;VALUE=DATE:{}", start.format("%Y%m%d"));
                let duration = format!("DURATION:P{days}D");
                let rrule = format!("RRULE:{rule}");
                match parse_ics(&one_event(&[&dtstart, &duration, &rrule])) {
                    Err(error) => prop_assert_eq!(error.line, 7, "{}", error),
                    Ok(calendar) => {
                        let holiday = &calendar.holidays[0];
                        prop_assert_eq!(holiday.starts.first(), Some(&start));
                        prop_assert!(holiday.starts.windows(2).all(|w| w[0] < w[1]));
                        let mut day = start;
                        for _ in 0..120 {
                            let scan = holiday.starts.iter().any(|s| {
                                (0..i64::from(days)).contains(&day.signed_duration_since(*s).num_days())
                            });
                            prop_assert_eq!(holiday.covers(day), scan, "{}", day);
                            day = day + Days::new(3);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn error_display_is_line_then_reason() {
        let error = IcsError {
            line: 12,
            reason: "DTSTART: bad".to_string(),
        };
        assert_eq!(error.to_string(), "line 12: DTSTART: bad");
    }
}
