//! The crate denies `unsafe` (Cargo.toml `[lints]`); the one audited exception is the
//! allocator trim in src/heap.rs. A new `unsafe` anywhere else fails here, so the
//! exception cannot spread silently through `#[allow(unsafe_code)]`.

use std::path::{Path, PathBuf};

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
fn unsafe_code_appears_only_in_the_heap_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("crates"), &mut files);
    assert!(files.len() > 20, "found too few source files: {files:?}");
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("src/heap.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.contains("unsafe_code")
                || text
                    .lines()
                    .any(|l| l.contains("unsafe ") && !l.trim_start().starts_with("//"))
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "unsafe code outside src/heap.rs: {offenders:?}"
    );
    let heap = std::fs::read_to_string(root.join("src/heap.rs")).unwrap();
    assert_eq!(
        heap.matches("unsafe {").count(),
        1,
        "src/heap.rs holds exactly one unsafe block"
    );
}
