//! Issue #28: every `Backend` method has at least one conformance case, so
//! a method added to one engine cannot go untested on the other. The test
//! reads the sources as Rust tokens (comments are not tokens, so a method
//! named only in a comment does not count; calls inside `assert!` and other
//! macros do, since their arguments stay tokens).
//!
//! A method counts as covered when a conformance case calls it, either by
//! its own name (on `Store`, through its `Deref`, or on `store.backend`) or
//! through an inherent `Store` method whose body calls `backend.NAME(…)`
//! (the test accessor `Store::sqlite` reaches `Backend::as_any`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, TokenStream, TokenTree};

fn store_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A source file's text, with its path for messages.
struct Source {
    path: PathBuf,
    text: String,
}

fn read(path: PathBuf) -> Source {
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    Source { path, text }
}

fn tokens(source: &Source) -> Vec<TokenTree> {
    let stream: TokenStream = source
        .text
        .parse()
        .unwrap_or_else(|e| panic!("{} is not Rust tokens: {e}", source.path.display()));
    stream.into_iter().collect()
}

/// The `.rs` files directly in `dir`, but `except`.
fn rust_files(dir: &Path, except: Option<&str>) -> Vec<Source> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        let is_rs = path.extension().is_some_and(|e| e == "rs");
        if is_rs && path.file_stem().and_then(|s| s.to_str()) != except {
            out.push(read(path));
        }
    }
    out
}

fn is_ident(t: Option<&TokenTree>, name: &str) -> bool {
    matches!(t, Some(TokenTree::Ident(i)) if i == name)
}

fn ident(t: Option<&TokenTree>) -> Option<String> {
    match t {
        Some(TokenTree::Ident(i)) => Some(i.to_string()),
        _ => None,
    }
}

fn is_group(t: Option<&TokenTree>, d: Delimiter) -> bool {
    matches!(t, Some(TokenTree::Group(g)) if g.delimiter() == d)
}

/// The braced body that follows position `from` (an item's `{ … }`).
fn next_brace(trees: &[TokenTree], from: usize) -> Option<(usize, TokenStream)> {
    trees[from..].iter().enumerate().find_map(|(i, t)| match t {
        TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => Some((from + i, g.stream())),
        _ => None,
    })
}

/// Names of the `fn` items directly inside `body` (a trait or impl block).
fn fns(body: TokenStream) -> Vec<(String, Option<TokenStream>)> {
    let trees: Vec<TokenTree> = body.into_iter().collect();
    let mut out = Vec::new();
    for i in 0..trees.len() {
        if !is_ident(trees.get(i), "fn") {
            continue;
        }
        let Some(name) = ident(trees.get(i + 1)) else {
            continue;
        };
        // A declaration ends at `;` before any body; a definition's body is
        // the first brace group after its signature.
        let end = trees[i..]
            .iter()
            .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ';'))
            .map(|p| i + p);
        let body = next_brace(&trees, i)
            .filter(|(at, _)| end.is_none_or(|end| *at < end))
            .map(|(_, b)| b);
        out.push((name, body));
    }
    out
}

/// Every method of `pub trait Backend`, in declaration order, then every
/// operation of the `operations!` list (the `Operations` supertrait).
fn backend_methods(backend: &Source) -> Vec<String> {
    let trees = tokens(backend);
    let at = (0..trees.len())
        .find(|&i| is_ident(trees.get(i), "trait") && is_ident(trees.get(i + 1), "Backend"))
        .expect("backend.rs declares `trait Backend`");
    let (_, body) = next_brace(&trees, at).expect("the trait's body");
    let mut out: Vec<String> = fns(body).into_iter().map(|(name, _)| name).collect();
    let list = (0..trees.len()).find(|&i| {
        is_ident(trees.get(i), "macro_rules") && is_ident(trees.get(i + 2), "operations")
    });
    if let Some((_, body)) = list.and_then(|i| next_brace(&trees, i)) {
        listed(body, &mut out);
    }
    out
}

/// `NAME` of every `fn NAME` anywhere in `stream` (the operations list
/// sits inside the macro's nested groups).
fn listed(stream: TokenStream, out: &mut Vec<String>) {
    let trees: Vec<TokenTree> = stream.into_iter().collect();
    for (i, t) in trees.iter().enumerate() {
        if let TokenTree::Group(g) = t {
            listed(g.stream(), out);
        } else if is_ident(Some(t), "fn") {
            out.extend(ident(trees.get(i + 1)));
        }
    }
}

/// `NAME` of every `.NAME(…)` (or `.NAME::<T>(…)`) call in `stream`,
/// macro arguments included.
fn calls(stream: TokenStream, out: &mut BTreeSet<String>) {
    let trees: Vec<TokenTree> = stream.into_iter().collect();
    for (i, t) in trees.iter().enumerate() {
        match t {
            TokenTree::Group(g) => calls(g.stream(), out),
            TokenTree::Punct(p) if p.as_char() == '.' => {
                let Some(name) = ident(trees.get(i + 1)) else {
                    continue;
                };
                let turbofish =
                    matches!(trees.get(i + 2), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if is_group(trees.get(i + 2), Delimiter::Parenthesis) || turbofish {
                    out.insert(name);
                }
            }
            _ => {}
        }
    }
}

/// `NAME` of every `backend.NAME(…)` call in `stream`.
fn backend_calls(stream: TokenStream, out: &mut BTreeSet<String>) {
    let trees: Vec<TokenTree> = stream.into_iter().collect();
    for (i, t) in trees.iter().enumerate() {
        if let TokenTree::Group(g) = t {
            backend_calls(g.stream(), out);
        }
        let dot = matches!(trees.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '.');
        if is_ident(Some(t), "backend") && dot {
            if let Some(name) = ident(trees.get(i + 2)) {
                out.insert(name);
            }
        }
    }
}

/// For each method of an inherent `impl Store` block in `files`, the
/// `Backend` methods its body calls.
fn store_methods(files: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let mut map = BTreeMap::new();
    for file in files {
        let trees = tokens(file);
        for i in 0..trees.len() {
            if !is_ident(trees.get(i), "impl") {
                continue;
            }
            let Some((at, body)) = next_brace(&trees, i) else {
                continue;
            };
            let header = &trees[i + 1..at];
            let names_store = header.iter().any(|t| is_ident(Some(t), "Store"));
            let is_trait_impl = header.iter().any(|t| is_ident(Some(t), "for"));
            if !names_store || is_trait_impl {
                continue;
            }
            for (name, body) in fns(body) {
                let mut called = BTreeSet::new();
                if let Some(body) = body {
                    backend_calls(body, &mut called);
                }
                map.entry(name).or_insert_with(BTreeSet::new).extend(called);
            }
        }
    }
    map
}

/// `NAME` of every `mod NAME;` at the top level of `source`.
fn declared_modules(source: &Source) -> BTreeSet<String> {
    let trees = tokens(source);
    let semi = |t: Option<&TokenTree>| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == ';');
    (0..trees.len())
        .filter(|&i| is_ident(trees.get(i), "mod") && semi(trees.get(i + 2)))
        .filter_map(|i| ident(trees.get(i + 1)))
        .collect()
}

/// The methods of `backend` (the `Backend` trait's file) and those that no
/// call in `cases` reaches, directly or through a `Store` method of
/// `store` (the files holding `impl Store` blocks).
fn coverage(backend: &Source, store: &[Source], cases: &[Source]) -> (Vec<String>, Vec<String>) {
    let methods = backend_methods(backend);
    let store = store_methods(store);
    let mut called = BTreeSet::new();
    for case in cases {
        calls(tokens(case).into_iter().collect(), &mut called);
    }
    let mut covered = BTreeSet::new();
    for call in called {
        match store.get(&call) {
            Some(backend) => covered.extend(backend.iter().cloned()),
            None => {
                covered.insert(call);
            }
        }
    }
    let uncovered = methods
        .iter()
        .filter(|m| !covered.contains(*m))
        .cloned()
        .collect();
    (methods, uncovered)
}

#[test]
fn every_backend_method_has_a_conformance_case() {
    let dir = store_dir();
    let root = read(dir.join("conformance.rs"));
    // Only the modules the suite declares run: a file left undeclared in
    // conformance/ covers nothing.
    let declared = declared_modules(&root);
    let mut cases: Vec<Source> = rust_files(&dir.join("conformance"), Some("coverage"))
        .into_iter()
        .filter(|s| {
            s.path
                .file_stem()
                .and_then(|n| n.to_str())
                .is_some_and(|n| declared.contains(n))
        })
        .collect();
    cases.push(root);
    let store = rust_files(&dir, None);
    let (methods, uncovered) = coverage(&read(dir.join("backend.rs")), &store, &cases);
    // Guards against a parse slip making the check vacuous.
    assert!(
        methods.len() >= 60 && methods.iter().any(|m| m == "record_events"),
        "Backend methods not found: {methods:?}"
    );
    println!(
        "conformance covers {}/{} Backend methods",
        methods.len() - uncovered.len(),
        methods.len()
    );
    assert!(
        uncovered.is_empty(),
        "Backend methods without a conformance case in crates/hushwatch-store/src/conformance*: {uncovered:?}\n\
         Add a case that calls each (through `Store` or `store.backend`) and asserts what a \
         caller relies on, to a `backend_matrix!` so it runs on SQLite and PostgreSQL."
    );
}

fn source(name: &str, text: &str) -> Source {
    Source {
        path: PathBuf::from(name),
        text: text.to_owned(),
    }
}

/// The check itself: a method reached only through a differently named
/// `Store` method counts, one named only in a comment or a string, or called
/// on the facade that never reaches it, does not.
#[test]
fn the_coverage_check_reports_a_method_without_a_case() {
    let backend = source(
        "backend.rs",
        "pub trait Backend: Send { \
           fn engine(&self) -> &'static str; \
           async fn record_delivery(&self, e: Vec<u8>) -> StoreResult<()>; \
           async fn streams_changed(&self, since: Option<i64>) -> R<()> { let _ = since; Ok(()) } \
           async fn untested(&self) -> StoreResult<()>; \
           #[cfg(test)] fn as_any(&self) -> &dyn Any; } \
         macro_rules! operations { ($then:ident) => { $then! { \
           /// Doc.\n fn listed_untested(a: i64) -> () = crate::x::y(a); \
           fn listed_tested() -> u64 = |clock_now| crate::x::z(clock_now); } }; }",
    );
    let store = source(
        "mod.rs",
        "impl Store { \
           pub async fn record_events(&self, e: Vec<u8>) -> R<()> { self.backend.record_delivery(e).await } \
           pub async fn untested(&self) -> R<()> { self.clock.now(); Ok(()) } } \
         impl Backend for X { fn untested(&self) { self.backend.untested() } }",
    );
    let case = source(
        "conformance.rs",
        "// store.untested() is named here only\n\
         async fn case(store: Store) { \
           assert!(store.record_events(vec![]).await.is_ok()); \
           let _ = \"store.untested()\"; \
           store.untested().await.unwrap(); \
           assert_eq!(store.engine(), \"sqlite\"); \
           store.backend.as_any().downcast_ref::<S>(); \
           store.streams_changed::<()>(None); \
           store.listed_tested().await; }",
    );
    let (methods, uncovered) = coverage(&backend, &[store], &[case]);
    assert_eq!(
        methods,
        [
            "engine",
            "record_delivery",
            "streams_changed",
            "untested",
            "as_any",
            "listed_untested",
            "listed_tested"
        ]
    );
    assert_eq!(uncovered, ["untested", "listed_untested"]);
}
