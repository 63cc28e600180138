//! Issue #47: only `store::pg` names the PostgreSQL driver. Every other file
//! of the store is engine-neutral (written over `store::db::Db`) or
//! SQLite's, and reaches PostgreSQL through `pg::` items, so a change of
//! driver, or of how it is used, stays inside `pg/`. The test reads the
//! sources as Rust tokens, like `conformance::coverage` (comments and doc
//! text are not identifiers, so prose may still name the driver).

use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};

/// The crates of the PostgreSQL driver, as a path names them.
const DRIVER: [&str; 3] = [
    "tokio_postgres",
    "deadpool_postgres",
    "tokio_postgres_rustls",
];

/// Every `.rs` file under `dir`, but the directory `except`.
fn rust_files(dir: &Path, except: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path != except {
                rust_files(&path, except, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The driver crates `stream` names, with repeats.
fn driver_idents(stream: TokenStream, out: &mut Vec<String>) {
    for tree in stream {
        match tree {
            TokenTree::Ident(i) if DRIVER.contains(&i.to_string().as_str()) => {
                out.push(i.to_string());
            }
            TokenTree::Group(g) => driver_idents(g.stream(), out),
            _ => {}
        }
    }
}

#[test]
fn only_the_pg_module_names_the_postgres_driver() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let pg = src.join("pg");
    let mut files = Vec::new();
    rust_files(&src, &pg, &mut files);
    files.sort();
    // The walk really saw the store: the engine-neutral files that used to
    // name the driver are among those checked.
    for known in ["db.rs", "audit.rs", "svix.rs", "testdb.rs", "migrate.rs"] {
        assert!(files.contains(&src.join(known)), "{known} checked");
    }
    let mut offenders = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let stream: TokenStream = text
            .parse()
            .unwrap_or_else(|e| panic!("{} is not Rust tokens: {e}", path.display()));
        let mut named = Vec::new();
        driver_idents(stream, &mut named);
        named.dedup();
        if !named.is_empty() {
            let rel = path.strip_prefix(&src).unwrap_or(path);
            offenders.push(format!("{} names {}", rel.display(), named.join(", ")));
        }
    }
    assert!(
        offenders.is_empty(),
        "the PostgreSQL driver belongs in store::pg (reach it through pg:: items): {offenders:#?}"
    );
}

/// The check itself sees a driver path, in a `use` and inside a body.
#[test]
fn a_driver_path_is_found_where_code_names_it() {
    let mut named = Vec::new();
    let code = "use deadpool_postgres::Pool; fn f() { let _ = tokio_postgres::NoTls; }
                /// tokio_postgres in prose is not code
                fn g() {}";
    driver_idents(code.parse().unwrap(), &mut named);
    assert_eq!(named, ["deadpool_postgres", "tokio_postgres"]);
}
