//! Svix operational webhook payload parser.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hushwatch::ingest::svix_ops::parse_operational(data);
});
