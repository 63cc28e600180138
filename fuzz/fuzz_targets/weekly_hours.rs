//! Weekly-hours grammar: lines such as `mon-fri 09:00-12:00,13:00-18:00`.
#![no_main]
use hushwatch::domain::weekly::WeeklyHours;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let lines: Vec<&str> = text.split('\n').collect();
        let _ = WeeklyHours::parse_lines(&lines);
    }
});
