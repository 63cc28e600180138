//! Svix operational webhook payload parser.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hushwatch::ingest::fuzz::parse_operational(data);
});
