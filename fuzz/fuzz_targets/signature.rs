//! Signature headers and verification. Input: `id\ntimestamp\nsignature\nbody`.
//! Never panics; a header built by `sign` over the same input always verifies.
#![no_main]
use hushwatch::ingest::signature::{sign, SecretKey, SignedHeaders, Verifier};
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_764_460_800;

fuzz_target!(|data: &[u8]| {
    let key = SecretKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let verifier = Verifier::new(vec![key.clone()]);
    let mut parts = data.splitn(4, |b| *b == b'\n');
    let id = std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or("");
    let ts = std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or("");
    let sig = std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or("");
    let body = parts.next().unwrap_or_default();
    let lookup = |name: &str| match name {
        "svix-id" => Some(id),
        "webhook-timestamp" => Some(ts),
        "svix-signature" => Some(sig),
        _ => None,
    };
    if let Ok(headers) = SignedHeaders::find(lookup) {
        let _ = verifier.verify(&headers, body, NOW);
        // Our own tag, appended to whatever junk the header held, verifies.
        let genuine = sign(&key, id, NOW, body);
        let now = NOW.to_string();
        let mixed = format!("{sig} {genuine}");
        let headers = SignedHeaders {
            id,
            timestamp: &now,
            signature: &mixed,
        };
        assert!(verifier.verify(&headers, body, NOW).is_ok());
    }
});
