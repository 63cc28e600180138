//! Every native provider's header checks and payload readers on the same input.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hushwatch::ingest::providers::fuzz_one(data);
});
