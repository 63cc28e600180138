//! All-day holidays from iCalendar (RFC 5545) text.
//!
//! Operators export public-holiday calendars as `.ics` files. This module turns
//! that text into [`IcsHoliday`] values that answer "is this local date a
//! holiday?" without expanding recurrences year by year. It is pure: the caller
//! reads the file and passes the text in, and nothing here reads the clock.
//!
//! Supported subset. Anything else that would change *which dates* are
//! holidays is rejected with an [`IcsError`] instead of being ignored, because
//! a silently dropped holiday means pages on a day nobody is working:
//! - all-day VEVENTs (DTSTART is a DATE) with DTEND or a DURATION in whole days
//!   or weeks;
//! - RRULE with FREQ=YEARLY and INTERVAL, UNTIL or COUNT, BYMONTH/BYMONTHDAY
//!   that agree with DTSTART, or BYMONTH plus one ordinal BYDAY (`3MO`, `-1MO`);
//! - EXDATE, RECURRENCE-ID (a moved or cancelled occurrence) and
//!   STATUS:CANCELLED.
//!
//! Timed events are not holidays; they are counted in
//! [`IcsCalendar::skipped_timed_events`] so the caller can warn about them.

use std::fmt;

use chrono::{Datelike, NaiveDate, Weekday};

/// A yearly run may last at most this many days. That keeps every occurrence
/// that can cover a date starting in the date's year or the year before, so
/// [`IcsHoliday::covers`] only ever looks at two candidate years.
const MAX_YEARLY_DAYS: u32 = 366;

/// Some editors on Windows prepend a byte-order mark; it is not part of the
/// first property name.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// One all-day holiday from a VEVENT: a run of `days` local dates starting at
/// `start`, optionally repeating yearly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcsHoliday {
    /// SUMMARY with iCalendar escapes removed; empty when the event has none.
    pub summary: String,
    /// DTSTART: the first day of the first occurrence.
    pub start: NaiveDate,
    /// How many consecutive local dates each occurrence covers (at least 1).
    pub days: u32,
    /// The RRULE, when the holiday repeats.
    pub yearly: Option<YearlyRule>,
    /// Occurrence start dates removed by EXDATE or by a RECURRENCE-ID override.
    pub exdates: Vec<NaiveDate>,
}

/// A supported `RRULE:FREQ=YEARLY;...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YearlyRule {
    /// Every `interval` years (INTERVAL, default 1).
    pub interval: u32,
    /// Last date an occurrence may start on (UNTIL, inclusive, compared by date).
    pub until: Option<NaiveDate>,
    /// Total number of occurrences, DTSTART included (COUNT).
    pub count: Option<u32>,
    /// Which day of each year the occurrence falls on.
    pub by: YearlyBy,
}

/// How a yearly occurrence picks its day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YearlyBy {
    /// The month and day of DTSTART (Feb 29 only occurs in leap years).
    SameDate,
    /// The `nth` `weekday` of `month`: 1..=5 from the start, -1..=-5 from the
    /// end (-1 is the last). Years without such a day have no occurrence.
    NthWeekday {
        month: u32,
        weekday: Weekday,
        nth: i8,
    },
}

/// All holidays found in one `.ics` text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IcsCalendar {
    pub holidays: Vec<IcsHoliday>,
    /// VEVENTs whose DTSTART has a time of day; they are not holidays.
    pub skipped_timed_events: usize,
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

/// Parses iCalendar text into its all-day holidays.
///
/// # Errors
/// Malformed structure (no VCALENDAR, unbalanced BEGIN/END, a VEVENT without
/// DTSTART) and all-day events this module cannot represent exactly (e.g.
/// non-yearly RRULEs) are reported with the line to fix.
pub fn parse_ics(text: &str) -> Result<IcsCalendar, IcsError> {
    parse_ics_bytes(text.as_bytes())
}

/// Like [`parse_ics`], for raw file bytes. Some exporters fold long lines in
/// the middle of a multi-byte UTF-8 character, which makes the file invalid
/// UTF-8 until it is unfolded; this accepts such files.
///
/// # Errors
/// As [`parse_ics`], plus text that is not UTF-8 once unfolded.
pub fn parse_ics_bytes(bytes: &[u8]) -> Result<IcsCalendar, IcsError> {
    let mut reader = Reader::default();
    for logical in unfold(bytes)? {
        reader.feed(parse_property(logical)?)?;
    }
    Ok(assemble(reader.finish()?))
}

impl IcsHoliday {
    /// Whether this holiday (any occurrence) covers the local date.
    pub fn covers(&self, date: NaiveDate) -> bool {
        self.occurrence_covering(date).is_some()
    }

    /// Start date of the occurrence that covers `date`, if any.
    pub fn occurrence_covering(&self, date: NaiveDate) -> Option<NaiveDate> {
        self.candidate_starts(date)
            .into_iter()
            .flatten()
            .find(|&start| self.run_covers(start, date))
    }

    /// The only occurrences that can reach `date`. Yearly runs are at most
    /// [`MAX_YEARLY_DAYS`] long, so those start this year or last year.
    fn candidate_starts(&self, date: NaiveDate) -> [Option<NaiveDate>; 2] {
        let Some(rule) = &self.yearly else {
            return [Some(self.start), None];
        };
        let previous = date
            .year()
            .checked_sub(1)
            .and_then(|year| rule.occurrence_in(self.start, year));
        [rule.occurrence_in(self.start, date.year()), previous]
    }

    fn run_covers(&self, occurrence: NaiveDate, date: NaiveDate) -> bool {
        // Day offsets avoid adding `days` to a date, which could overflow
        // chrono's range for absurd DURATIONs.
        let offset = date.signed_duration_since(occurrence).num_days();
        (0..i64::from(self.days)).contains(&offset) && !self.exdates.contains(&occurrence)
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
}

impl YearlyRule {
    /// Start of the occurrence in `year` of a rule whose DTSTART is `start`,
    /// if the rule produces one that year. EXDATEs are not applied here.
    pub fn occurrence_in(&self, start: NaiveDate, year: i32) -> Option<NaiveDate> {
        let step = self.step_of(start.year(), year)?;
        let date = self.by.date_in(start, year)?;
        // RFC 5545: DTSTART always counts as the first occurrence, whatever
        // UNTIL says.
        (step == 0 || self.still_running(start, step, date)).then_some(date)
    }

    /// Which repetition `year` is (0 for DTSTART's year), if it is one at all.
    fn step_of(&self, first_year: i32, year: i32) -> Option<i64> {
        let gap = i64::from(year) - i64::from(first_year);
        // INTERVAL=0 is rejected by the parser; treat a hand-built 0 as 1
        // rather than dividing by zero.
        let interval = i64::from(self.interval.max(1));
        (gap >= 0 && gap % interval == 0).then_some(gap / interval)
    }

    fn still_running(&self, start: NaiveDate, step: i64, date: NaiveDate) -> bool {
        let before_until = self.until.is_none_or(|until| date <= until);
        // At most `step` repetitions came before, so a step below COUNT is
        // inside it without counting which of those years had the date.
        let within_count = self.count.is_none_or(|count| {
            step < i64::from(count) || self.occurrences_before(start, step) < i64::from(count)
        });
        before_until && within_count
    }

    /// How many of the repetitions before `step` produced a date. That is
    /// simply `step` unless some years lack the date (Feb 29, 5th weekday).
    fn occurrences_before(&self, start: NaiveDate, step: i64) -> i64 {
        if self.by.exists_every_year(start) {
            return step;
        }
        // The Gregorian calendar repeats every 400 years, so whether a
        // repetition has a date repeats every `period` steps. Counting one
        // period keeps this bounded however far `step` is from DTSTART.
        let period = steps_per_cycle(self.interval);
        let per_period = self.occurrences_among(start, period);
        (step / period) * per_period + self.occurrences_among(start, step % period)
    }

    /// How many of the first `steps` repetitions (fewer than 400) have a date.
    fn occurrences_among(&self, start: NaiveDate, steps: i64) -> i64 {
        let found = (0..steps)
            .filter(|&step| {
                let year = year_in_cycle(start.year(), step, self.interval);
                self.by.date_in(start, year).is_some()
            })
            .count();
        i64::try_from(found).unwrap_or(i64::MAX)
    }
}

/// Repetitions after which `first_year + step * interval` is back at the same
/// place in the 400-year Gregorian cycle.
fn steps_per_cycle(interval: u32) -> i64 {
    let stride = i64::from(interval % 400);
    400 / gcd(stride, 400)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A year in 2000..2400 with the same calendar as repetition `step`; staying
/// in that range keeps chrono far from its limits for any DTSTART.
fn year_in_cycle(first_year: i32, step: i64, interval: u32) -> i32 {
    let offset = (i64::from(first_year) + step * i64::from(interval)).rem_euclid(400);
    2000 + i32::try_from(offset).unwrap_or_default()
}

impl YearlyBy {
    /// The occurrence date in `year` for a rule whose DTSTART is `start`.
    fn date_in(self, start: NaiveDate, year: i32) -> Option<NaiveDate> {
        match self {
            Self::SameDate => NaiveDate::from_ymd_opt(year, start.month(), start.day()),
            Self::NthWeekday {
                month,
                weekday,
                nth,
            } => nth_weekday(year, month, weekday, nth),
        }
    }

    /// Whether every year has an occurrence date (a fast path for COUNT).
    fn exists_every_year(self, start: NaiveDate) -> bool {
        match self {
            Self::SameDate => !(start.month() == 2 && start.day() == 29),
            // Every month has at least four of each weekday.
            Self::NthWeekday { nth, .. } => (1..=4).contains(&nth.unsigned_abs()),
        }
    }
}

/// The `nth` `weekday` of `month` (negative counts from the end), or None
/// when there is no such day, e.g. a 5th Monday; RFC 5545 skips those.
fn nth_weekday(year: i32, month: u32, weekday: Weekday, nth: i8) -> Option<NaiveDate> {
    let weeks_skipped = u32::from(nth.unsigned_abs()).checked_sub(1)?;
    if nth > 0 {
        nth_from_start(year, month, weekday, weeks_skipped)
    } else {
        nth_from_end(year, month, weekday, weeks_skipped)
    }
}

fn nth_from_start(year: i32, month: u32, weekday: Weekday, weeks: u32) -> Option<NaiveDate> {
    let first = NaiveDate::from_ymd_opt(year, month, 1)?;
    let day = 1 + days_forward(first.weekday(), weekday) + 7 * weeks;
    NaiveDate::from_ymd_opt(year, month, day)
}

fn nth_from_end(year: i32, month: u32, weekday: Weekday, weeks: u32) -> Option<NaiveDate> {
    let last = last_day_of_month(year, month)?;
    let back = days_forward(weekday, last.weekday()) + 7 * weeks;
    let day = last.day().checked_sub(back).filter(|&day| day >= 1)?;
    NaiveDate::from_ymd_opt(year, month, day)
}

/// Days to step forward from `from` to reach `to` (0..=6).
fn days_forward(from: Weekday, to: Weekday) -> u32 {
    (7 + to.num_days_from_monday() - from.num_days_from_monday()) % 7
}

fn last_day_of_month(year: i32, month: u32) -> Option<NaiveDate> {
    let (next_year, next_month) = if month == 12 {
        (year.checked_add(1)?, 1)
    } else {
        (year, month + 1)
    };
    NaiveDate::from_ymd_opt(next_year, next_month, 1)?.pred_opt()
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
#[derive(Default)]
struct Reader {
    /// Open components, outermost first; `open[0]` is always a VCALENDAR.
    open: Vec<OpenComponent>,
    /// The VEVENT being read, if it sits directly inside the VCALENDAR.
    event: Option<EventDraft>,
    seen_calendar: bool,
    events: Vec<FinishedEvent>,
}

impl Reader {
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
                self.events.push(draft.finish()?);
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
    /// RDATE / EXRULE: they would change the dates, and are not supported.
    unsupported: Vec<Property>,
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
            "RRULE" => &mut self.rrule,
            "UID" => &mut self.uid,
            "RECURRENCE-ID" => &mut self.recurrence_id,
            "STATUS" => &mut self.status,
            "EXDATE" => {
                self.exdates.push(property);
                return Ok(());
            }
            "RDATE" | "EXRULE" => {
                self.unsupported.push(property);
                return Ok(());
            }
            _ => return Ok(()),
        };
        set_once(slot, property)
    }

    fn finish(self) -> Result<FinishedEvent, IcsError> {
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
            kind: self.kind(dtstart)?,
            uid: self.uid.as_ref().map(|uid| uid.value.trim().to_string()),
            replaces,
        })
    }

    fn kind(&self, dtstart: &Property) -> Result<EventKind, IcsError> {
        if self.is_cancelled() {
            return Ok(EventKind::Cancelled);
        }
        match parse_date_property(dtstart)? {
            // A time of day means a meeting or similar, not a day off; the
            // rest of the event is not checked so exotic rules cannot fail
            // the whole file.
            DateValue::DateTime(_) => Ok(EventKind::Timed),
            DateValue::Date(start) => self.holiday(start).map(EventKind::Holiday),
        }
    }

    fn is_cancelled(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|status| status.value.trim().eq_ignore_ascii_case("CANCELLED"))
    }

    fn holiday(&self, start: NaiveDate) -> Result<IcsHoliday, IcsError> {
        if let Some(property) = self.unsupported.first() {
            return Err(IcsError::new(
                property.line,
                format!(
                    "{} is not supported; write each extra date as its own VEVENT or use RRULE and EXDATE",
                    property.name
                ),
            ));
        }
        let days = self.length_days(start)?;
        let yearly = self.yearly_rule(start, days)?;
        Ok(IcsHoliday {
            summary: self
                .summary
                .as_ref()
                .map(|summary| unescape_text(&summary.value))
                .unwrap_or_default(),
            start,
            days,
            yearly,
            exdates: self.exdate_list()?,
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

    fn yearly_rule(&self, start: NaiveDate, days: u32) -> Result<Option<YearlyRule>, IcsError> {
        let Some(rrule) = &self.rrule else {
            return Ok(None);
        };
        let rule = parse_rrule(rrule, start)?;
        if days > MAX_YEARLY_DAYS {
            return Err(IcsError::new(
                rrule.line,
                format!("a yearly holiday lasts at most {MAX_YEARLY_DAYS} days, this one {days}; shorten DTEND/DURATION"),
            ));
        }
        Ok(Some(rule))
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
fn assemble(events: Vec<FinishedEvent>) -> IcsCalendar {
    let replaced: Vec<(String, NaiveDate)> = events
        .iter()
        .filter_map(|event| Some((event.uid.clone()?, event.replaces?)))
        .collect();
    let mut calendar = IcsCalendar::default();
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
    for (_, date) in replaced.iter().filter(|(other, _)| other == uid) {
        if !holiday.exdates.contains(date) {
            holiday.exdates.push(*date);
        }
    }
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
// RRULE.
// ---------------------------------------------------------------------------

/// RRULE parts as written, before they are checked against DTSTART.
#[derive(Default)]
struct RuleParts {
    freq: Option<String>,
    interval: Option<u32>,
    until: Option<NaiveDate>,
    count: Option<u32>,
    by_month: Option<u32>,
    by_month_day: Option<u32>,
    by_day: Option<(i8, Weekday)>,
}

fn parse_rrule(property: &Property, start: NaiveDate) -> Result<YearlyRule, IcsError> {
    let fail = |reason: String| {
        IcsError::new(
            property.line,
            format!("RRULE {:?}: {reason}", property.value.trim()),
        )
    };
    let parts = read_rule_parts(&property.value).map_err(fail)?;
    build_rule(&parts, start).map_err(fail)
}

fn read_rule_parts(value: &str) -> Result<RuleParts, String> {
    let mut parts = RuleParts::default();
    let mut seen: Vec<String> = Vec::new();
    for piece in value
        .split(';')
        .map(str::trim)
        .filter(|piece| !piece.is_empty())
    {
        let Some((name, part_value)) = piece.split_once('=') else {
            return Err(format!("part {piece:?} has no '=' (expected NAME=VALUE)"));
        };
        let name = name.trim().to_ascii_uppercase();
        if seen.contains(&name) {
            return Err(format!("{name} appears twice"));
        }
        parts.set(&name, part_value.trim())?;
        seen.push(name);
    }
    Ok(parts)
}

impl RuleParts {
    fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        match name {
            "FREQ" => self.freq = Some(value.to_ascii_uppercase()),
            "INTERVAL" => self.interval = Some(positive(name, value)?),
            "COUNT" => self.count = Some(positive(name, value)?),
            "UNTIL" => self.until = Some(parse_date_value(value, None)?.date()),
            "BYMONTH" => self.by_month = Some(single_number(name, value, 12)?),
            "BYMONTHDAY" => self.by_month_day = Some(single_number(name, value, 31)?),
            "BYDAY" => self.by_day = Some(parse_by_day(value)?),
            // The week start only matters for weekly rules and BYWEEKNO,
            // neither of which is accepted.
            "WKST" => {}
            _ => {
                return Err(format!(
                    "{name} is not supported; only INTERVAL, UNTIL, COUNT, BYMONTH, BYMONTHDAY and BYDAY with an ordinal (e.g. BYDAY=2MO) are"
                ))
            }
        }
        Ok(())
    }
}

fn positive(name: &str, value: &str) -> Result<u32, String> {
    parse_digits(value)
        .filter(|&number| number > 0)
        .ok_or_else(|| format!("{name}={value} must be a whole number of at least 1"))
}

/// One value from 1 to `max`; lists would need one occurrence per value in a
/// year, which this model (one run per year) cannot hold.
fn single_number(name: &str, value: &str, max: u32) -> Result<u32, String> {
    if value.contains(',') {
        return Err(format!(
            "{name}={value} lists several values, which is not supported; write one VEVENT per value"
        ));
    }
    parse_digits(value)
        .filter(|number| (1..=max).contains(number))
        .ok_or_else(|| format!("{name}={value} must be a number from 1 to {max}"))
}

/// `BYDAY=[+|-]nWD`, e.g. `3MO`, `-1MO`, `+2TH`.
fn parse_by_day(value: &str) -> Result<(i8, Weekday), String> {
    if value.contains(',') {
        return Err(format!(
            "BYDAY={value} lists several days, which is not supported; write one VEVENT per day"
        ));
    }
    let upper = value.to_ascii_uppercase();
    let split = upper.len().saturating_sub(2);
    let weekday = upper.get(split..).and_then(weekday_from_code);
    let ordinal = upper.get(..split).unwrap_or_default();
    let Some(weekday) = weekday else {
        return Err(format!(
            "BYDAY={value} does not end in a weekday (MO, TU, WE, TH, FR, SA, SU)"
        ));
    };
    if ordinal.is_empty() {
        return Err(format!(
            "BYDAY={value} has no ordinal; write e.g. 2MO (second Monday) or -1MO (last Monday)"
        ));
    }
    let nth = parse_ordinal(ordinal)
        .ok_or_else(|| format!("BYDAY={value}: the ordinal must be 1 to 5 or -1 to -5"))?;
    Ok((nth, weekday))
}

fn parse_ordinal(text: &str) -> Option<i8> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = i8::try_from(parse_digits(digits)?).ok()?;
    if !(1..=5).contains(&magnitude) {
        return None;
    }
    Some(if negative { -magnitude } else { magnitude })
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

fn weekday_code(weekday: Weekday) -> &'static str {
    match weekday {
        Weekday::Mon => "MO",
        Weekday::Tue => "TU",
        Weekday::Wed => "WE",
        Weekday::Thu => "TH",
        Weekday::Fri => "FR",
        Weekday::Sat => "SA",
        Weekday::Sun => "SU",
    }
}

fn build_rule(parts: &RuleParts, start: NaiveDate) -> Result<YearlyRule, String> {
    match parts.freq.as_deref() {
        Some("YEARLY") => {}
        Some(other) => {
            return Err(format!(
                "FREQ={other} is not supported: only yearly recurrence (FREQ=YEARLY) is; list other dates as separate VEVENTs"
            ))
        }
        None => return Err("FREQ is missing; holidays need FREQ=YEARLY".to_string()),
    }
    if parts.until.is_some() && parts.count.is_some() {
        return Err("UNTIL and COUNT cannot both be given; keep one".to_string());
    }
    Ok(YearlyRule {
        interval: parts.interval.unwrap_or(1),
        until: parts.until,
        count: parts.count,
        by: resolve_by(parts, start)?,
    })
}

/// Chooses the yearly day and insists that DTSTART is the first occurrence:
/// an RRULE that disagrees with DTSTART is almost always a typo, and RFC
/// 5545's answer (DTSTART plus the rule's dates) would hide it.
fn resolve_by(parts: &RuleParts, start: NaiveDate) -> Result<YearlyBy, String> {
    if let Some((nth, weekday)) = parts.by_day {
        if parts.by_month_day.is_some() {
            return Err("BYDAY together with BYMONTHDAY is not supported".to_string());
        }
        return nth_weekday_by(parts.by_month, nth, weekday, start);
    }
    if let Some(month) = parts.by_month.filter(|&month| month != start.month()) {
        return Err(format!(
            "BYMONTH={month} does not match DTSTART {start}; set DTSTART to the first occurrence"
        ));
    }
    if let Some(day) = parts.by_month_day.filter(|&day| day != start.day()) {
        return Err(format!(
            "BYMONTHDAY={day} does not match DTSTART {start}; set DTSTART to the first occurrence"
        ));
    }
    Ok(YearlyBy::SameDate)
}

fn nth_weekday_by(
    month: Option<u32>,
    nth: i8,
    weekday: Weekday,
    start: NaiveDate,
) -> Result<YearlyBy, String> {
    let by_day = format!("BYDAY={nth}{}", weekday_code(weekday));
    let Some(month) = month else {
        return Err(format!("{by_day} needs BYMONTH to say which month"));
    };
    let by = YearlyBy::NthWeekday {
        month,
        weekday,
        nth,
    };
    match by.date_in(start, start.year()) {
        Some(first) if first == start => Ok(by),
        Some(first) => Err(format!(
            "DTSTART {start} is not {by_day} of month {month} (that is {first}); set DTSTART to the first occurrence"
        )),
        None => Err(format!(
            "{by_day} of month {month} does not exist in {}; set DTSTART to the first occurrence",
            start.year()
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use chrono::Days;

    use super::*;

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
            (showa.start, showa.days, showa.yearly.clone()),
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
            christmas.yearly,
            Some(YearlyRule {
                interval: 1,
                until: None,
                count: Some(3),
                by: YearlyBy::SameDate
            })
        );
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
        let by = thanksgiving.yearly.as_ref().map(|rule| rule.by);
        assert_eq!(
            by,
            Some(YearlyBy::NthWeekday {
                month: 11,
                weekday: Weekday::Thu,
                nth: 4
            })
        );
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
            &[date(2024, 2, 29), date(2028, 2, 29), date(2400, 2, 29)],
        );
        assert_not_covers(
            &leap,
            &[
                date(2025, 2, 28),
                date(2025, 3, 1),
                date(2100, 2, 28),
                date(2100, 3, 1),
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
        assert_eq!(
            new_year.exdates,
            vec![date(2022, 1, 1), date(2023, 1, 1), date(2025, 1, 1)]
        );
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
    fn monthly_rule_is_rejected_with_its_line() {
        let error = event_error(&[
            "SUMMARY:Payday",
            "DTSTART;VALUE=DATE:20260125",
            "RRULE:FREQ=MONTHLY;BYMONTHDAY=25",
        ]);
        assert_eq!(error.line, 7);
        assert!(
            error.reason.contains("FREQ=MONTHLY;BYMONTHDAY=25"),
            "{error}"
        );
        assert!(error.reason.contains("only yearly recurrence"), "{error}");
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
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYWEEKNO=1"],
                6,
                "BYWEEKNO is not supported",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYYEARDAY=1"],
                6,
                "BYYEARDAY is not supported",
            ),
            (
                &[
                    "DTSTART:20260112",
                    "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=MO;BYSETPOS=2",
                ],
                6,
                "BYDAY=MO has no ordinal",
            ),
            (
                &[
                    "DTSTART:20260112",
                    "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=2MO;BYSETPOS=2",
                ],
                6,
                "BYSETPOS is not supported",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYMONTH=1,2"],
                6,
                "BYMONTH=1,2 lists several",
            ),
            (
                &[
                    "DTSTART:20260112",
                    "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=2MO,3MO",
                ],
                6,
                "BYDAY=2MO,3MO lists several",
            ),
            (
                &["DTSTART:20260112", "RRULE:FREQ=YEARLY;BYDAY=2MO"],
                6,
                "needs BYMONTH",
            ),
            (
                &["DTSTART:20260113", "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=2MO"],
                6,
                "(that is 2026-01-12)",
            ),
            (
                &["DTSTART:20260112", "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=6MO"],
                6,
                "ordinal must be 1 to 5",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYMONTH=2"],
                6,
                "BYMONTH=2 does not match",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY;BYMONTHDAY=2"],
                6,
                "BYMONTHDAY=2 does not match",
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
                &["DTSTART:20260101", "RRULE:INTERVAL=2"],
                6,
                "FREQ is missing",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=WEEKLY"],
                6,
                "only yearly recurrence",
            ),
            (
                &["DTSTART:20260101", "RRULE:FREQ=YEARLY", "RRULE:FREQ=YEARLY"],
                7,
                "RRULE appears twice",
            ),
            (
                &["DTSTART:20260101", "RDATE;VALUE=DATE:20260102"],
                6,
                "RDATE is not supported",
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
                &["DTSTART:20260101", "DURATION:P367D", "RRULE:FREQ=YEARLY"],
                7,
                "at most 366 days",
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
        assert_eq!(
            calendar.holidays[1].exdates,
            vec![date(2024, 3, 1), date(2025, 3, 1)]
        );
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

    /// An independent, year-by-year expansion used to cross-check `covers`.
    fn naive_covered(holiday: &IcsHoliday, last_year: i32) -> BTreeSet<NaiveDate> {
        naive_starts(holiday, last_year)
            .into_iter()
            .filter(|start| !holiday.exdates.contains(start))
            .flat_map(|start| (0..holiday.days).map(move |i| start + Days::new(i.into())))
            .collect()
    }

    fn naive_starts(holiday: &IcsHoliday, last_year: i32) -> Vec<NaiveDate> {
        let Some(rule) = &holiday.yearly else {
            return vec![holiday.start];
        };
        let mut starts = Vec::new();
        let mut year = holiday.start.year();
        while year <= last_year {
            if let Some(start) = naive_date_in(rule.by, holiday.start, year) {
                let past_until =
                    rule.until.is_some_and(|until| start > until) && !starts.is_empty();
                let past_count = rule
                    .count
                    .is_some_and(|count| starts.len() >= count as usize);
                if past_until || past_count {
                    break;
                }
                starts.push(start);
            }
            year += i32::try_from(rule.interval).unwrap();
        }
        starts
    }

    fn naive_date_in(by: YearlyBy, start: NaiveDate, year: i32) -> Option<NaiveDate> {
        let YearlyBy::NthWeekday {
            month,
            weekday,
            nth,
        } = by
        else {
            return NaiveDate::from_ymd_opt(year, start.month(), start.day());
        };
        let matching: Vec<NaiveDate> = (1..=31)
            .filter_map(|day| NaiveDate::from_ymd_opt(year, month, day))
            .filter(|day| day.weekday() == weekday)
            .collect();
        let index = if nth > 0 {
            usize::from(nth.unsigned_abs()) - 1
        } else {
            matching
                .len()
                .checked_sub(usize::from(nth.unsigned_abs()))?
        };
        matching.get(index).copied()
    }

    fn assert_matches_naive(event: &[&str], first_year: i32, last_year: i32) {
        let holiday = holiday(event);
        let expected = naive_covered(&holiday, last_year + 1);
        let mut day = date(first_year, 1, 1);
        while day <= date(last_year, 12, 31) {
            assert_eq!(
                holiday.covers(day),
                expected.contains(&day),
                "{day} with {event:?}"
            );
            day = day.succ_opt().unwrap();
        }
    }

    #[test]
    fn covers_matches_a_naive_expansion() {
        let events: &[&[&str]] = &[
            &["DTSTART:20240229", "RRULE:FREQ=YEARLY;COUNT=5"],
            &[
                "DTSTART:20240229",
                "DURATION:P2D",
                "RRULE:FREQ=YEARLY;INTERVAL=3;COUNT=4",
            ],
            &[
                "DTSTART:20260330",
                "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=5MO;COUNT=6",
            ],
            &[
                "DTSTART:20260102",
                "DURATION:P3D",
                "RRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=-5FR",
            ],
            &[
                "DTSTART:20251231",
                "DURATION:P3D",
                "RRULE:FREQ=YEARLY;INTERVAL=2;UNTIL=20351231",
                "EXDATE:20291231",
            ],
            &[
                "DTSTART:20251127",
                "DURATION:P4D",
                "RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=4TH",
            ],
            &[
                "DTSTART:20250526",
                "RRULE:FREQ=YEARLY;BYMONTH=5;BYDAY=-1MO;UNTIL=20400101",
            ],
            &[
                "DTSTART:20201225",
                "DURATION:P366D",
                "RRULE:FREQ=YEARLY;COUNT=3",
            ],
            &[
                "DTSTART:20200101",
                "DURATION:P366D",
                "RRULE:FREQ=YEARLY;INTERVAL=2",
            ],
            &["DTSTART:20261229", "DURATION:P10D"],
        ];
        for event in events {
            assert_matches_naive(event, 2019, 2060);
        }
    }

    #[test]
    fn covers_stays_right_far_from_dtstart() {
        // 2100, 2200 and 2300 are not leap years, so COUNT skips them. The
        // ranges straddle the last occurrence: 2800, 2472 and 2104 (900th
        // March with five Mondays since year 3).
        assert_matches_naive(
            &["DTSTART:20000229", "RRULE:FREQ=YEARLY;INTERVAL=100;COUNT=3"],
            2790,
            2810,
        );
        assert_matches_naive(
            &["DTSTART:00040229", "RRULE:FREQ=YEARLY;COUNT=600"],
            2460,
            2490,
        );
        assert_matches_naive(
            &[
                "DTSTART:00030331",
                "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=5MO;COUNT=900",
            ],
            2095,
            2115,
        );
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
