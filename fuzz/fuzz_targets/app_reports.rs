//! App report payload parser.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reports) = hushwatch::ingest::fuzz::app_reports(data) {
        assert!(!reports.is_empty());
        assert!(reports.len() <= hushwatch::ingest::payload::MAX_APP_REPORTS);
    }
});
