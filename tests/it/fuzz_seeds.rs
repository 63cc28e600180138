//! The fuzz targets' properties as plain tests, so they run on every
//! `cargo test` even where cargo-fuzz (nightly) is unavailable. Each target
//! in `fuzz/fuzz_targets/` gets its seed corpus (`fuzz/seeds/<target>/`)
//! plus deterministic mutations of it (truncations, byte flips, splices)
//! and a few generated hostile inputs. Keep the properties here in step
//! with the fuzz targets.

use chrono::NaiveDate;
use hushwatch::domain::duration::{format_duration, parse_duration};
use hushwatch::domain::ics::parse_ics_bytes;
use hushwatch::domain::weekly::WeeklyHours;
use hushwatch::ingest::fuzz::{app_reports, parse_operational, webhook_facts};
use hushwatch::ingest::payload::MAX_APP_REPORTS;
use hushwatch::ingest::signature::{sign, SecretKey, SignedHeaders, Verifier};
use std::path::Path;

const NOW: i64 = 1_764_460_800;

fn signature(data: &[u8]) {
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
}

fn weekly_hours(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let lines: Vec<&str> = text.split('\n').collect();
        let _ = WeeklyHours::parse_lines(&lines);
    }
}

fn duration(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        // Round trip, for every duration `format_duration` can write back
        // (at most 9 digits per unit: below 10^9 days; mixed inputs like
        // `999999999d999999999h` parse but normalise past that).
        if let Ok(d) = parse_duration(text) {
            if d.num_days() >= 1_000_000_000 {
                return;
            }
            let again = parse_duration(&format_duration(d)).expect("formatted duration parses");
            assert_eq!(again, d, "{text:?}");
        }
    }
}

fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let env = |name: &str| {
            (name.len() < 64).then(|| "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string())
        };
        let _ = hushwatch::config::parse(text, Path::new("/nonexistent-hushwatch-fuzz"), &env);
    }
}

fn ics(data: &[u8]) {
    // A fixed anchor: the expansion window (ten years either side) must not
    // depend on the day the seeds run.
    let anchor = NaiveDate::from_ymd_opt(2026, 6, 1).unwrap();
    if let Ok(cal) = parse_ics_bytes(data, anchor) {
        for (y, m, d) in [(2026, 1, 1), (2026, 12, 31), (1970, 1, 1), (2100, 2, 28)] {
            let _ = cal.covers(NaiveDate::from_ymd_opt(y, m, d).unwrap());
        }
    }
}

fn webhook(data: &[u8]) {
    let _ = webhook_facts(data);
}

fn reports(data: &[u8]) {
    if let Ok(r) = app_reports(data) {
        assert!(!r.is_empty() && r.len() <= MAX_APP_REPORTS);
    }
}

fn operational(data: &[u8]) {
    let _ = parse_operational(data);
}

/// Cheap deterministic mutations of one seed.
fn mutations(seed: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![seed.to_vec(), Vec::new()];
    let n = seed.len();
    for cut in [1, 2, 3, 5, 7] {
        out.push(seed[..n * (cut - 1) / cut.max(1)].to_vec());
    }
    for (i, flip) in [
        (0usize, 0x80u8),
        (n / 3, 0xff),
        (n / 2, 0x20),
        (n.saturating_sub(1), 0x01),
    ] {
        if i < n {
            let mut m = seed.to_vec();
            m[i] ^= flip;
            out.push(m);
        }
    }
    let mut doubled = seed.to_vec();
    doubled.extend_from_slice(seed);
    out.push(doubled);
    let mut nul = seed.to_vec();
    nul.insert(n / 2, 0);
    out.push(nul);
    out
}

/// Inputs every parser must survive.
fn hostile() -> Vec<Vec<u8>> {
    vec![
        vec![0xff, 0xfe, 0xc3, 0x28],
        "[".repeat(100_000).into_bytes(),
        format!("{}1{}", r#"{"a":"#.repeat(50_000), "}".repeat(50_000)).into_bytes(),
        "\n".repeat(10_000).into_bytes(),
        "9".repeat(5_000).into_bytes(),
        r#"{"type":"x","timestamp":1e308,"occurred_at":"9999-99-99T99:99:99Z"}"#.into(),
        format!(
            "[{}]",
            vec![r#"{"type":"t"}"#; MAX_APP_REPORTS + 1].join(",")
        )
        .into_bytes(),
        "a = ".repeat(10_000).into_bytes(),
    ]
}

fn run(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let seed = std::fs::read(entry.unwrap().path()).unwrap();
        for input in mutations(&seed) {
            check(&input);
        }
        seeds += 1;
    }
    assert!(seeds > 0, "no seeds for {target}");
    for input in hostile() {
        check(&input);
    }
}

#[test]
fn seeds_signature() {
    run("signature", signature);
}

#[test]
fn seeds_weekly_hours() {
    run("weekly_hours", weekly_hours);
}

#[test]
fn seeds_duration() {
    run("duration", duration);
}

#[test]
fn seeds_config() {
    run("config", config);
}

#[test]
fn seeds_ics() {
    run("ics", ics);
}

#[test]
fn seeds_webhook_facts() {
    run("webhook_facts", webhook);
}

#[test]
fn seeds_app_reports() {
    run("app_reports", reports);
}

#[test]
fn seeds_svix_operational() {
    run("svix_operational", operational);
}

#[test]
fn seeds_providers() {
    run("providers", hushwatch::ingest::providers::fuzz_one);
}
