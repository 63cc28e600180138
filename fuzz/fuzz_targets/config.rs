//! The config loader (TOML → validated config). Relative paths resolve
//! under a folder that does not exist; `${VAR}` always resolves.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let env = |name: &str| {
            (name.len() < 64).then(|| "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string())
        };
        let _ = hushwatch::config::parse(text, Path::new("/nonexistent-hushwatch-fuzz"), &env);
    }
});
