//! Recurring holidays from an `.ics` file, through the real binary (issue
//! #32): `check` accepts the calendars companies keep (Outlook's "last
//! Friday of every other month", a month-end close, a 9/80 schedule, with
//! moved instances, as Outlook, Google Calendar and Apple Calendar export
//! them), `explain` counts business time around those days on
//! DST weekends in New York, Berlin and Sydney, and a form that cannot be
//! represented is refused with its line.
//!
//! The expansion window is ten years either side of the day the config is
//! loaded, so these 2026 dates hold while the tests run before 2036.

use std::path::Path;

fn hushwatch(args: &[&str]) -> (i32, String, String) {
    crate::common::cli(args).run()
}

/// Shaped like an Outlook/Google export: CRLF, UIDs, DATE values, overrides
/// as extra VEVENTs with RECURRENCE-ID.
const COMPANY: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Microsoft Corporation//Outlook 16.0 MIMEDIR//EN\r
BEGIN:VEVENT\r
UID:nine-eighty@example.com\r
SUMMARY:9/80 Friday off\r
DTSTART;VALUE=DATE:20260109\r
DTEND;VALUE=DATE:20260110\r
RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=FR\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:nine-eighty@example.com\r
RECURRENCE-ID;VALUE=DATE:20260320\r
SUMMARY:9/80 Friday off (moved to Monday)\r
DTSTART;VALUE=DATE:20260330\r
DTEND;VALUE=DATE:20260331\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:close@example.com\r
SUMMARY:Close\r
DTSTART;VALUE=DATE:20260130\r
DTEND;VALUE=DATE:20260131\r
RRULE:FREQ=MONTHLY;INTERVAL=2;BYDAY=FR;BYSETPOS=-1\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:close@example.com\r
RECURRENCE-ID;VALUE=DATE:20260327\r
SUMMARY:Close (moved to Thursday)\r
DTSTART;VALUE=DATE:20260402\r
DTEND;VALUE=DATE:20260403\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:month-end@example.com\r
SUMMARY:Month-end close\r
DTSTART;VALUE=DATE:20260131\r
RRULE:FREQ=MONTHLY;COUNT=18;BYMONTHDAY=-1\r
END:VEVENT\r
END:VCALENDAR\r
";

/// The same holidays as Google Calendar exports them: a VTIMEZONE block,
/// `X-WR-*` calendar properties, DTSTAMP/CREATED/SEQUENCE/TRANSP on every
/// event, `WKST=SU`, and "last Friday" as an ordinal `BYDAY=-1FR`.
const GOOGLE: &str = "BEGIN:VCALENDAR\r
PRODID:-//Google Inc//Google Calendar 70.9054//EN\r
VERSION:2.0\r
CALSCALE:GREGORIAN\r
METHOD:PUBLISH\r
X-WR-CALNAME:Company holidays\r
X-WR-TIMEZONE:America/New_York\r
BEGIN:VTIMEZONE\r
TZID:America/New_York\r
X-LIC-LOCATION:America/New_York\r
BEGIN:DAYLIGHT\r
TZOFFSETFROM:-0500\r
TZOFFSETTO:-0400\r
TZNAME:EDT\r
DTSTART:19700308T020000\r
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=2SU\r
END:DAYLIGHT\r
BEGIN:STANDARD\r
TZOFFSETFROM:-0400\r
TZOFFSETTO:-0500\r
TZNAME:EST\r
DTSTART:19701101T020000\r
RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=1SU\r
END:STANDARD\r
END:VTIMEZONE\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260109\r
DTEND;VALUE=DATE:20260110\r
RRULE:FREQ=WEEKLY;WKST=SU;INTERVAL=2;BYDAY=FR\r
DTSTAMP:20261201T000000Z\r
UID:4h1c0nine80@google.com\r
CREATED:20251201T000000Z\r
LAST-MODIFIED:20251201T000000Z\r
SEQUENCE:0\r
STATUS:CONFIRMED\r
SUMMARY:9/80 Friday off\r
TRANSP:TRANSPARENT\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260330\r
DTEND;VALUE=DATE:20260331\r
DTSTAMP:20261201T000000Z\r
UID:4h1c0nine80@google.com\r
RECURRENCE-ID;VALUE=DATE:20260320\r
SEQUENCE:1\r
STATUS:CONFIRMED\r
SUMMARY:9/80 Friday off (moved to Monday)\r
TRANSP:TRANSPARENT\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260130\r
DTEND;VALUE=DATE:20260131\r
RRULE:FREQ=MONTHLY;WKST=SU;INTERVAL=2;BYDAY=-1FR\r
DTSTAMP:20261201T000000Z\r
UID:7k2dclose@google.com\r
SEQUENCE:0\r
STATUS:CONFIRMED\r
SUMMARY:Close\r
TRANSP:TRANSPARENT\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260402\r
DTEND;VALUE=DATE:20260403\r
DTSTAMP:20261201T000000Z\r
UID:7k2dclose@google.com\r
RECURRENCE-ID;VALUE=DATE:20260327\r
SEQUENCE:1\r
STATUS:CONFIRMED\r
SUMMARY:Close (moved to Thursday)\r
TRANSP:TRANSPARENT\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20260131\r
DTEND;VALUE=DATE:20260201\r
RRULE:FREQ=MONTHLY;WKST=SU;COUNT=18;BYMONTHDAY=-1\r
DTSTAMP:20261201T000000Z\r
UID:9m3emonthend@google.com\r
SEQUENCE:0\r
STATUS:CONFIRMED\r
SUMMARY:Month-end close\r
TRANSP:TRANSPARENT\r
END:VEVENT\r
END:VCALENDAR\r
";

/// The same holidays as Apple Calendar exports them: `X-APPLE-*`
/// properties, a long SUMMARY folded at 75 octets (continuation lines start
/// with a space), parameters in another order, `BYDAY=FR;BYSETPOS=-1` after
/// `INTERVAL`, and the month-end rule with UNTIL instead of COUNT.
const APPLE: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Apple Inc.//macOS 15.1//EN\r
CALSCALE:GREGORIAN\r
X-WR-CALNAME:Company\r
X-APPLE-CALENDAR-COLOR:#1BADF8\r
BEGIN:VEVENT\r
CREATED:20251201T120000Z\r
DTEND;VALUE=DATE:20260110\r
DTSTAMP:20261201T120000Z\r
DTSTART;VALUE=DATE:20260109\r
LAST-MODIFIED:20251201T120000Z\r
RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=FR\r
SEQUENCE:0\r
SUMMARY:9/80 Friday off: the office is closed every other Friday for the \r
 nine-eighty schedule\r
TRANSP:TRANSPARENT\r
UID:6F1E0C44-1D0B-4A47-9E53-2C3C1D7A9B10\r
X-APPLE-TRAVEL-ADVISORY-BEHAVIOR:AUTOMATIC\r
END:VEVENT\r
BEGIN:VEVENT\r
DTEND;VALUE=DATE:20260331\r
DTSTAMP:20261201T120000Z\r
DTSTART;VALUE=DATE:20260330\r
RECURRENCE-ID;VALUE=DATE:20260320\r
SEQUENCE:1\r
SUMMARY:9/80 Friday off (moved)\r
UID:6F1E0C44-1D0B-4A47-9E53-2C3C1D7A9B10\r
END:VEVENT\r
BEGIN:VEVENT\r
DTEND;VALUE=DATE:20260131\r
DTSTAMP:20261201T120000Z\r
DTSTART;VALUE=DATE:20260130\r
RRULE:FREQ=MONTHLY;INTERVAL=2;BYDAY=FR;BYSETPOS=-1\r
SUMMARY:Close\r
UID:A7B2E9D0-5C1F-4E0A-8B3D-9F2E1C6A4D21\r
END:VEVENT\r
BEGIN:VEVENT\r
DTEND;VALUE=DATE:20260403\r
DTSTAMP:20261201T120000Z\r
DTSTART;VALUE=DATE:20260402\r
RECURRENCE-ID;VALUE=DATE:20260327\r
SUMMARY:Close (moved)\r
UID:A7B2E9D0-5C1F-4E0A-8B3D-9F2E1C6A4D21\r
END:VEVENT\r
BEGIN:VEVENT\r
DTEND;VALUE=DATE:20260201\r
DTSTAMP:20261201T120000Z\r
DTSTART;VALUE=DATE:20260131\r
RRULE:FREQ=MONTHLY;UNTIL=20270630;BYMONTHDAY=-1\r
SUMMARY:Month-end close\r
UID:C3D4E5F6-0718-4293-A4B5-C6D7E8F90A1B\r
END:VEVENT\r
END:VCALENDAR\r
";

fn config(dir: &Path, ics: &str) -> String {
    std::fs::create_dir_all(dir.join("holidays")).unwrap();
    std::fs::write(dir.join("holidays/company.ics"), ics).unwrap();
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:9477\"\ndata_dir = \"{}\"\n",
        dir.join("data").display()
    );
    for (name, zone) in [
        ("ny", "America/New_York"),
        ("berlin", "Europe/Berlin"),
        ("sydney", "Australia/Sydney"),
    ] {
        text.push_str(&format!(
            "[calendars.{name}]\ntimezone = \"{zone}\"\nweekly = [\"mon-fri 09:00-17:00\"]\nholiday_files = [\"holidays/company.ics\"]\n\
             [streams.{name}]\ncalendar = \"{name}\"\nsilence_threshold = \"8h\"\nnotify = [\"stdout\"]\n"
        ));
    }
    text.push_str("[notifiers.stdout]\nkind = \"log\"\n");
    let path = dir.join("hushwatch.toml");
    std::fs::write(&path, &text).unwrap();
    path.to_str().unwrap().to_string()
}

/// When a stream whose last event was at `last` fires: after one business
/// day (8h) in its calendar.
fn fires_at(config: &str, stream: &str, last: &str, now: &str) -> String {
    let (code, out, err) = hushwatch(&[
        "explain",
        "--config",
        config,
        "--stream",
        stream,
        "--last-event",
        last,
        "--now",
        now,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v["fires_at"].as_str().unwrap_or_default().to_string()
}

#[test]
fn check_accepts_recurring_company_holidays() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), COMPANY);
    let (code, out, err) = hushwatch(&["check", "--config", &config]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ny: America/New_York"), "{out}");
    assert!(out.contains("1 holiday file(s)"), "{out}");
}

#[test]
fn business_time_skips_the_recurring_days_around_dst_weekends() {
    // The same holidays as Outlook, Google Calendar and Apple Calendar
    // write them give the same answers.
    for (shape, ics) in [("outlook", COMPANY), ("google", GOOGLE), ("apple", APPLE)] {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), ics);
        let (code, out, err) = hushwatch(&["check", "--config", &config]);
        assert_eq!(code, 0, "{shape}: {out}{err}");
        assert_recurring_days_are_skipped(&config);
    }
}

fn assert_recurring_days_are_skipped(config: &str) {
    let config = config.to_string();
    // New York, DST starts Sunday Mar 8. Thursday 17:00 EST; Friday Mar 6
    // is a 9/80 Friday; the 8h are Monday 09:00-17:00 EDT.
    assert_eq!(
        fires_at(
            &config,
            "ny",
            "2026-03-05T17:00:00-05:00",
            "2026-03-06T12:00:00-05:00"
        ),
        "2026-03-09T21:00:00Z"
    );
    // Berlin, DST starts Sunday Mar 29. The Close on Friday Mar 27 was
    // moved to Apr 2, so that Friday is worked.
    assert_eq!(
        fires_at(
            &config,
            "berlin",
            "2026-03-26T17:00:00+01:00",
            "2026-03-27T08:00:00+01:00"
        ),
        "2026-03-27T16:00:00Z"
    );
    // Then Monday Mar 30 (the moved 9/80 Friday) and Tuesday Mar 31 (month
    // end, BYMONTHDAY=-1) are off: Wednesday 09:00-17:00 CEST.
    assert_eq!(
        fires_at(
            &config,
            "berlin",
            "2026-03-27T17:00:00+01:00",
            "2026-03-28T12:00:00+01:00"
        ),
        "2026-04-01T15:00:00Z"
    );
    // Sydney, DST ends Sunday Apr 5. Thursday Apr 2 (the moved Close) and
    // Friday Apr 3 (9/80) are off: Monday 09:00-17:00 AEST (UTC+10).
    assert_eq!(
        fires_at(
            &config,
            "sydney",
            "2026-04-01T17:00:00+11:00",
            "2026-04-02T12:00:00+11:00"
        ),
        "2026-04-06T07:00:00Z"
    );
    // The month-end close's 18th and last occurrence is Wednesday Jun 30
    // 2027; Tuesday Aug 31 2027 is a plain working day (EDT).
    assert_eq!(
        fires_at(
            &config,
            "ny",
            "2027-06-29T17:00:00-04:00",
            "2027-06-30T08:00:00-04:00"
        ),
        "2027-07-01T21:00:00Z"
    );
    assert_eq!(
        fires_at(
            &config,
            "ny",
            "2027-08-30T17:00:00-04:00",
            "2027-08-31T08:00:00-04:00"
        ),
        "2027-08-31T21:00:00Z"
    );
}

#[test]
fn forms_that_cannot_be_represented_are_refused_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    for (rule, line, needle) in [
        ("RRULE:FREQ=HOURLY;BYMINUTE=0", 4, "repeats within a day"),
        (
            "RRULE:FREQ=MONTHLY;BYSETPOS=-1",
            4,
            "BYSETPOS needs another BYxxx part",
        ),
        (
            "RDATE;VALUE=PERIOD:20260102/P1D",
            4,
            "RDATE;VALUE=PERIOD is not supported",
        ),
        (
            "RRULE:FREQ=MONTHLY;BYDAY=FR;BYSETPOS=-1",
            4,
            "DTSTART 2026-01-09 is not an occurrence",
        ),
    ] {
        let ics = format!(
            "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20260109\r\n{rule}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
        );
        let config = config(dir.path(), &ics);
        let (code, out, err) = hushwatch(&["check", "--config", &config]);
        assert_eq!(code, 2, "{rule}: {out}{err}");
        assert!(
            err.contains(&format!("company.ics: line {line}: ")) && err.contains(needle),
            "{rule}: {err}"
        );
    }
}
