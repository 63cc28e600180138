//! "Now" has one source: `src/clock.rs`. Everything else takes a `Clock`
//! (commands that default `--now` to the wall clock ask `SystemClock`), so
//! tests can move time with a `ManualClock` and nothing silently reads the
//! real time behind their back. This test fails on any new direct read.

use std::path::{Path, PathBuf};

/// Calls that read the wall clock directly. `Instant::now` is allowed: it
/// measures durations (timeouts, latency), never an instant on a calendar.
const WALL_CLOCK_READS: &[&str] = &[
    "Utc::now(",
    "Local::now(",
    "SystemTime::now(",
    "OffsetDateTime::now_utc(",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn only_the_clock_module_reads_the_wall_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under src/",
        files.len()
    );
    let clock = src.join("clock.rs");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != clock) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if WALL_CLOCK_READS.iter().any(|call| code.contains(call)) {
                found.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(&src).unwrap().display(),
                    n + 1,
                    code
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "read the time through clock::Clock (SystemClock for a command's default), not directly:\n{}",
        found.join("\n")
    );
    // The clock module itself must still be where the wall clock is read,
    // or this test would pass while checking nothing.
    let clock_text = std::fs::read_to_string(&clock).unwrap();
    assert!(clock_text.contains("Utc::now("));
}
