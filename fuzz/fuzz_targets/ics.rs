//! The .ics holiday reader, and lookups on whatever it accepted.
#![no_main]
use chrono::NaiveDate;
use hushwatch::domain::ics::parse_ics_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A fixed anchor: the expansion window must not depend on the day.
    let anchor = NaiveDate::from_ymd_opt(2026, 6, 1).unwrap();
    if let Ok(cal) = parse_ics_bytes(data, anchor) {
        for (y, m, d) in [(2026, 1, 1), (2026, 12, 31), (1970, 1, 1), (2100, 2, 28)] {
            let _ = cal.covers(NaiveDate::from_ymd_opt(y, m, d).unwrap());
        }
    }
});
