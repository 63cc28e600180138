//! Duration parser; whatever parses formats back to the same duration.
#![no_main]
use hushwatch::domain::duration::{format_duration, parse_duration};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        // Round trip, for every duration `format_duration` can write back
        // (at most 9 digits per unit: below 10^9 days; mixed inputs like
        // `999999999d999999999h` parse but normalise past that).
        if let Ok(d) = parse_duration(text) {
            if d.num_days() >= 1_000_000_000 {
                return;
            }
            let again = parse_duration(&format_duration(d)).expect("formatted duration parses");
            assert_eq!(again, d);
        }
    }
});
