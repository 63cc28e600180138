//! Layering, checked on the source. The crate's top-level modules (`src/X.rs`
//! or `src/X/`) must form a graph without cycles: a module that both uses and
//! is used by another cannot be understood, tested or replaced on its own.
//! Every `crate::X` (and `super::` reaching the crate root) in `src/**/*.rs`
//! is an edge, found in `use` trees, in paths anywhere in the code and in
//! macro bodies; comments and doc text are not code and do not count, and
//! neither does `#[cfg(test)]` code (a unit test may check one module's
//! list against another's constants; it is not part of the program).
//! The same file checks that only `src/clock.rs` reads the wall clock.
//! `HUSHWATCH_PRINT_GRAPH=1 cargo test --test architecture -- --nocapture`
//! prints the graph.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// From module → to module → where the first use was seen (`file:line`).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// Paths that do I/O, spawn, or talk to the outside world: none of them may
/// appear in the pure modules (`domain`, `ingest`).
const IO_PATHS: &[&[&str]] = &[
    &["tokio"],
    &["hyper"],
    &["hyper_util"],
    &["rusqlite"],
    &["lettre"],
    &["prometheus"],
    &["rustix"],
    &["std", "fs"],
    &["std", "net"],
    &["std", "env"],
    &["std", "process"],
    &["std", "thread"],
];

/// The store handle itself (its row and error types are fine): routes reach
/// the store only through `http::Api`, i.e. through `service::App`.
const STORE_HANDLE: &[&[&str]] = &[&["crate", "store", "Store"]];

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

/// `http/svix.rs` → `[http, svix]`; `http/mod.rs` → `[http]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// Collects the top-level modules one file names.
struct Uses<'a> {
    /// The module the code being visited is in (inline `mod` blocks push).
    module: Vec<String>,
    top_level: &'a BTreeSet<String>,
    file: String,
    found: BTreeMap<String, String>,
    /// Uses of `IO_PATHS`, as `file:line path`.
    io: Vec<String>,
    /// Uses of `STORE_HANDLE`, as `file:line path`.
    store_handle: Vec<String>,
}

impl Uses<'_> {
    /// Resolves a path's leading segments (`crate`, `super`, `self`) and
    /// records the top-level module it lands in.
    fn record(&mut self, segments: &[String], line: usize) {
        let starts = |list: &[&[&str]]| {
            list.iter()
                .any(|p| p.len() <= segments.len() && p.iter().zip(segments).all(|(a, b)| a == b))
        };
        let at = format!("{}:{line} {}", self.file, segments.join("::"));
        if starts(IO_PATHS) {
            self.io.push(at.clone());
        }
        if starts(STORE_HANDLE) {
            self.store_handle.push(at);
        }
        let target = match segments.first().map(String::as_str) {
            Some("crate") => segments.get(1).cloned(),
            Some("super") | Some("self") => {
                let mut module = self.module.clone();
                let mut rest = segments;
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "super" => {
                            module.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                module.first().cloned().or_else(|| rest.first().cloned())
            }
            _ => None,
        };
        if let Some(target) = target.filter(|t| self.top_level.contains(t)) {
            self.found
                .entry(target)
                .or_insert_with(|| format!("{}:{line}", self.file));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident),
            syn::UseTree::Glob(g) => {
                self.record(&prefix.clone(), g.star_token.spans[0].start().line)
            }
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut full = prefix.to_vec();
        full.push(ident.to_string());
        self.record(&full, ident.span().start().line);
    }

    /// Macro bodies are tokens, not syntax: looks for `crate :: NAME`.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            match tree {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" => {
                    let colons = trees[i + 1..]
                        .iter()
                        .take(2)
                        .all(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ':'));
                    if let (true, Some(TokenTree::Ident(name))) = (colons, trees.get(i + 3)) {
                        self.record(
                            &["crate".to_string(), name.to_string()],
                            id.span().start().line,
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

/// `#[cfg(test)]` (also inside `all(...)`/`any(...)`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && matches!(&a.meta, syn::Meta::List(l)
                if l.tokens.clone().into_iter().any(|t| matches!(t, TokenTree::Ident(i) if i == "test")))
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Uses<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path
                .segments
                .first()
                .map_or(0, |s| s.ident.span().start().line);
            self.record(&segments, line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.module.push(item.ident.to_string());
        syn::visit::visit_item_mod(self, item);
        self.module.pop();
    }
}

/// The module graph of `src/`, without self-edges, and every use of an
/// `IO_PATHS` path per top-level module.
fn analyse() -> Analysis {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut modules: Vec<(PathBuf, Vec<String>)> = files
        .into_iter()
        .map(|f| {
            let m = module_path(f.strip_prefix(&src).unwrap());
            (f, m)
        })
        .collect();
    // lib.rs declares the modules and main.rs calls the library by name:
    // neither is a module of the graph.
    modules.retain(|(_, m)| !m.is_empty() && m[0] != "lib" && m[0] != "main");
    let top_level: BTreeSet<String> = modules.iter().map(|(_, m)| m[0].clone()).collect();
    let parsed: Vec<(&PathBuf, &Vec<String>, syn::File)> = modules
        .iter()
        .map(|(file, module)| {
            let text = std::fs::read_to_string(file).unwrap();
            let ast = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
            (file, module, ast)
        })
        .collect();
    // `#[cfg(test)] mod tests;` puts a whole file under test only.
    let mut test_modules: Vec<Vec<String>> = Vec::new();
    for (_, module, ast) in &parsed {
        for item in &ast.items {
            if let syn::Item::Mod(m) = item {
                if m.content.is_none() && is_test_only(&m.attrs) {
                    let mut path = (*module).clone();
                    path.push(m.ident.to_string());
                    test_modules.push(path);
                }
            }
        }
    }
    let mut graph = Graph::new();
    let mut io: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut handles: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, module, ast) in &parsed {
        if test_modules.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        let (file, module) = (*file, *module);
        let mut uses = Uses {
            module: module.clone(),
            top_level: &top_level,
            file: file.strip_prefix(&src).unwrap().display().to_string(),
            found: BTreeMap::new(),
            io: Vec::new(),
            store_handle: Vec::new(),
        };
        uses.visit_file(ast);
        io.entry(module[0].clone()).or_default().extend(uses.io);
        handles
            .entry(module[0].clone())
            .or_default()
            .extend(uses.store_handle);
        let from = graph.entry(module[0].clone()).or_default();
        for (to, at) in uses.found {
            if to != module[0] {
                from.entry(to).or_insert(at);
            }
        }
    }
    Analysis {
        graph,
        io,
        store_handles: handles,
    }
}

struct Analysis {
    graph: Graph,
    /// Per top-level module, its uses of `IO_PATHS`.
    io: BTreeMap<String, Vec<String>>,
    /// Per top-level module, where it names the `Store` handle.
    store_handles: BTreeMap<String, Vec<String>>,
}

fn module_graph() -> Graph {
    analyse().graph
}

/// Every cycle's shortest loop through each strongly connected group of
/// modules, written `a -> b (file:line) -> a (file:line)`.
fn cycles(graph: &Graph) -> Vec<String> {
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([start.to_string()]);
        while let Some(m) = queue.pop_front() {
            for next in graph.get(&m).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.clone()) {
                    queue.push_back(next.clone());
                }
            }
        }
        seen
    };
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for start in graph.keys() {
        if reported.contains(start) || !reach(start).contains(start) {
            continue;
        }
        // Shortest path start → … → start (breadth first, remembering parents).
        let mut parent: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = VecDeque::from([start.clone()]);
        'search: while let Some(m) = queue.pop_front() {
            for next in graph.get(&m).into_iter().flat_map(|e| e.keys()) {
                if next == start {
                    parent.insert(format!("{start}#end"), m.clone());
                    break 'search;
                }
                if !parent.contains_key(next) {
                    parent.insert(next.clone(), m.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        // Walked back from the end: start, last, …, first; then reversed.
        let mut chain = vec![start.clone()];
        let mut at = parent[&format!("{start}#end")].clone();
        while at != *start {
            chain.push(at.clone());
            at = parent[&at].clone();
        }
        chain.push(start.clone());
        chain.reverse();
        let mut text = start.clone();
        for pair in chain.windows(2) {
            text.push_str(&format!(" -> {} ({})", pair[1], graph[&pair[0]][&pair[1]]));
        }
        reported.extend(chain);
        out.push(text);
    }
    out
}

#[test]
fn top_level_modules_have_no_cycles() {
    let graph = module_graph();
    // The parser must still see the edges everyone knows exist, or this
    // test would pass while checking nothing.
    for (from, to) in [
        ("service", "store"),
        ("http", "ingest"),
        ("config", "domain"),
    ] {
        assert!(
            graph.get(from).is_some_and(|e| e.contains_key(to)),
            "expected {from} -> {to} in the module graph: {graph:#?}"
        );
    }
    if std::env::var_os("HUSHWATCH_PRINT_GRAPH").is_some() {
        for (from, to) in &graph {
            println!(
                "{from} -> {}",
                to.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "module cycles (each arrow names the first use):\n{}",
        found.join("\n")
    );
}

/// `domain` and `ingest` take every instant and byte as an argument: they
/// use no other module of the crate (so nothing that does I/O can reach
/// them) and no I/O path themselves.
#[test]
fn the_pure_modules_use_no_other_module_and_do_no_io() {
    let Analysis { graph, io, .. } = analyse();
    // The check must see I/O where it is, or it would pass on nothing.
    assert!(
        io.get("store")
            .is_some_and(|u| u.iter().any(|p| p.contains("rusqlite"))),
        "expected store to use rusqlite: {io:#?}"
    );
    for pure in ["domain", "ingest"] {
        let uses: Vec<_> = graph
            .get(pure)
            .map(|e| e.iter().map(|(m, at)| format!("{m} ({at})")).collect())
            .unwrap_or_default();
        assert!(uses.is_empty(), "{pure} must stay pure, but uses {uses:?}");
        let io = io.get(pure).cloned().unwrap_or_default();
        assert!(
            io.is_empty(),
            "{pure} must do no I/O, but names:\n{}",
            io.join("\n")
        );
    }
}

#[test]
fn the_cycle_finder_names_the_loop() {
    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")] {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string(), format!("{from}.rs:1"));
    }
    assert_eq!(
        cycles(&graph),
        vec!["a -> b (a.rs:1) -> c (b.rs:1) -> a (c.rs:1)".to_string()]
    );
    graph.get_mut("c").unwrap().remove("a");
    assert!(cycles(&graph).is_empty());
}

/// Every route goes through `http::Api` (`service::App`), where the store
/// timeout, `note_storage`, metrics and audit are applied once.
#[test]
fn routes_never_hold_the_store_handle() {
    let analysis = analyse();
    assert!(
        analysis
            .store_handles
            .get("service")
            .is_some_and(|u| !u.is_empty()),
        "expected service to name store::Store: {:#?}",
        analysis.store_handles
    );
    let http = analysis
        .store_handles
        .get("http")
        .cloned()
        .unwrap_or_default();
    assert!(
        http.is_empty(),
        "http must reach the store through http::Api, but names:\n{}",
        http.join("\n")
    );
}

/// "Now" has one source: `src/clock.rs`. Everything else takes a `Clock`
/// (commands that default `--now` to the wall clock ask `SystemClock`), so
/// tests can move time with a `ManualClock` and nothing silently reads the
/// real time behind their back.
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
