//! Layering, checked on the source, where the crate graph cannot hold it.
//!
//! The workspace's crate graph holds the big layers by construction:
//! `hushwatch-core` (pure) cannot name the store, the service or any
//! runtime, HTTP, database or TLS crate, and `hushwatch-store` cannot name
//! the service (`the_core_crate_depends_on_no_runtime_http_database_or_tls`
//! keeps core's dependency tree that way). What stays checked here is
//! inside the crates: the top-level modules of all three (`src/X`,
//! `crates/hushwatch-core/src/X`, and `store` and `clock` for
//! `hushwatch-store`) form a graph without cycles, in which a module that
//! both uses and is used by another cannot be understood, tested or
//! replaced on its own. Every `crate::X`, `hushwatch_core::X`,
//! `hushwatch_store::…` (and `super::` reaching the crate root) is an edge,
//! found in `use` trees, in paths anywhere in the code and in macro bodies;
//! comments and doc text are not code and do not count, and neither does
//! `#[cfg(test)]` code. The same file checks that only the store crate's
//! `clock.rs` reads the wall clock, that no file of `src/service/` is in an
//! import cycle with another, and that ARCHITECTURE.md stays true: its
//! module table equals this graph, its layer diagram orders it, the tests
//! its invariants name exist, and each crate's `lib.rs` describes every
//! module.
//! `HUSHWATCH_PRINT_GRAPH=1 cargo test --test it architecture:: -- --nocapture`
//! prints the graph.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// From module → to module → where the first use was seen (`file:line`).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// Standard-library paths that do I/O or spawn: the one kind of I/O the
/// crate graph cannot keep out of `hushwatch-core` (std is always there).
const STD_IO_PATHS: &[&[&str]] = &[
    &["std", "fs"],
    &["std", "net"],
    &["std", "env"],
    &["std", "process"],
    &["std", "thread"],
];

/// What `hushwatch-core`'s dependency tree must never contain: an async
/// runtime, HTTP, a database driver, TLS or mail.
const NOT_IN_CORE: &[&str] = &[
    "tokio",
    "mio",
    "hyper",
    "hyper-util",
    "http",
    "rusqlite",
    "libsqlite3-sys",
    "tokio-postgres",
    "postgres-protocol",
    "deadpool-postgres",
    "rustls",
    "ring",
    "lettre",
    "prometheus",
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
    /// Which crate the file belongs to (what `crate::` means).
    krate: Crate,
    /// The module the code being visited is in (inline `mod` blocks push).
    module: Vec<String>,
    top_level: &'a BTreeSet<String>,
    file: String,
    found: BTreeMap<String, String>,
    /// Uses of `STD_IO_PATHS`, as `file:line path`.
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
        if starts(STD_IO_PATHS) {
            self.io.push(at.clone());
        }
        if starts(STORE_HANDLE) {
            self.store_handle.push(at);
        }
        let target = match segments.first().map(String::as_str) {
            Some("crate") => match self.krate {
                Crate::Store => Some(store_module(segments.get(1).map(String::as_str))),
                Crate::Root | Crate::Core => segments.get(1).cloned(),
            },
            Some("hushwatch_core") => segments.get(1).cloned(),
            Some("hushwatch_store") => Some(store_module(segments.get(1).map(String::as_str))),
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

/// What a walk over one file's code reports each path to: `Uses` (the
/// top-level modules a file names) and `SiblingUses` (the files of
/// `src/service/` it names) share the walk and differ only here.
trait Record {
    /// A path as written (`crate::x::y` → `[crate, x, y]`) and its line.
    fn record(&mut self, segments: &[String], line: usize);
    /// Whether `IDENT :: NAME` in a macro body (tokens, not syntax) is a
    /// path worth recording.
    fn macro_head(&self, ident: &str) -> bool;
    /// An inline `mod NAME { … }` is entered and left.
    fn enter_mod(&mut self, _name: String) {}
    fn leave_mod(&mut self) {}
}

impl Record for Uses<'_> {
    fn record(&mut self, segments: &[String], line: usize) {
        Uses::record(self, segments, line)
    }

    fn macro_head(&self, ident: &str) -> bool {
        matches!(ident, "crate" | "hushwatch_core" | "hushwatch_store")
    }

    fn enter_mod(&mut self, name: String) {
        self.module.push(name);
    }

    fn leave_mod(&mut self) {
        self.module.pop();
    }
}

/// Walks a file's code (not its comments, not `#[cfg(test)]` items): every
/// `use` tree, every path, and `IDENT :: NAME` in macro bodies.
struct Walk<'r, R: Record>(&'r mut R);

impl<R: Record> Walk<'_, R> {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident),
            syn::UseTree::Glob(g) => self.0.record(prefix, g.star_token.spans[0].start().line),
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
        self.0.record(&full, ident.span().start().line);
    }

    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            match tree {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if self.0.macro_head(&id.to_string()) => {
                    let colons = trees[i + 1..]
                        .iter()
                        .take(2)
                        .all(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ':'));
                    if let (true, Some(TokenTree::Ident(name))) = (colons, trees.get(i + 3)) {
                        self.0
                            .record(&[id.to_string(), name.to_string()], id.span().start().line);
                    }
                }
                _ => {}
            }
        }
    }
}

impl<'ast, R: Record> Visit<'ast> for Walk<'_, R> {
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
            self.0.record(&segments, line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.0.enter_mod(item.ident.to_string());
        syn::visit::visit_item_mod(self, item);
        self.0.leave_mod();
    }
}

/// The three crates of the workspace, as the graph sees them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Crate {
    Root,
    Core,
    Store,
}

impl Crate {
    const ALL: [Crate; 3] = [Crate::Root, Crate::Core, Crate::Store];

    fn src(self) -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        match self {
            Crate::Root => root.join("src"),
            Crate::Core => root.join("crates/hushwatch-core/src"),
            Crate::Store => root.join("crates/hushwatch-store/src"),
        }
    }

    /// The module a file is in: `http/svix.rs` → `[http, svix]`. The store
    /// crate is one node, `store`, except its `clock.rs`.
    fn module_of(self, relative: &Path) -> Vec<String> {
        let path = module_path(relative);
        match self {
            Crate::Store if path == ["clock"] => path,
            Crate::Store => {
                let mut m = vec!["store".to_string()];
                m.extend(path.into_iter().filter(|p| p != "lib"));
                m
            }
            Crate::Root | Crate::Core => path,
        }
    }
}

/// `…/crates/hushwatch-core/src/x.rs` → `crates/hushwatch-core/src/x.rs`.
fn repo_relative(file: &Path) -> String {
    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(file)
        .display()
        .to_string()
}

/// In the store crate every module is part of `store`, except `clock`.
fn store_module(first: Option<&str>) -> String {
    match first {
        Some("clock") => "clock".to_string(),
        _ => "store".to_string(),
    }
}

/// The module graph of the workspace, without self-edges, and every use of
/// a `STD_IO_PATHS` path per top-level module.
fn analyse() -> Analysis {
    let top_level = top_level_modules();
    let mut modules: Vec<(Crate, PathBuf, Vec<String>)> = Vec::new();
    for krate in Crate::ALL {
        let src = krate.src();
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        files.sort();
        for f in files {
            let m = krate.module_of(f.strip_prefix(&src).unwrap());
            // The root's and core's lib.rs declare the modules and main.rs
            // calls the library by name: none of them is a module of the graph.
            if m.is_empty() || m[0] == "lib" || m[0] == "main" {
                continue;
            }
            modules.push((krate, f, m));
        }
    }
    let parsed: Vec<(Crate, String, &Vec<String>, syn::File)> = modules
        .iter()
        .map(|(krate, file, module)| {
            let text = std::fs::read_to_string(file).unwrap();
            let ast = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
            (*krate, repo_relative(file), module, ast)
        })
        .collect();
    // `#[cfg(test)] mod tests;` puts a whole file under test only.
    let mut test_modules: Vec<(Crate, Vec<String>)> = Vec::new();
    for (krate, _, module, ast) in &parsed {
        for item in &ast.items {
            if let syn::Item::Mod(m) = item {
                if m.content.is_none() && is_test_only(&m.attrs) {
                    let mut path = (*module).clone();
                    path.push(m.ident.to_string());
                    test_modules.push((*krate, path));
                }
            }
        }
    }
    let mut graph = Graph::new();
    let mut io: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut handles: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (krate, file, module, ast) in &parsed {
        if test_modules
            .iter()
            .any(|(k, t)| k == krate && module.starts_with(t))
        {
            continue;
        }
        let module = *module;
        let mut uses = Uses {
            krate: *krate,
            module: module.clone(),
            top_level: &top_level,
            file: file.clone(),
            found: BTreeMap::new(),
            io: Vec::new(),
            store_handle: Vec::new(),
        };
        Walk(&mut uses).visit_file(ast);
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
    /// Per top-level module, its uses of `STD_IO_PATHS`.
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
/// use no other module (so nothing that does I/O can reach them), and no
/// file of `hushwatch-core` names a standard-library I/O path (the crate
/// graph keeps every other I/O crate out of reach).
#[test]
fn the_core_crate_names_no_std_io_path_and_domain_and_ingest_use_no_other_module() {
    const CORE: &[&str] = &["domain", "ingest", "audit", "status", "exit"];
    let Analysis { graph, io, .. } = analyse();
    // The check must see I/O where it is, or it would pass on nothing.
    assert!(
        io.get("store")
            .is_some_and(|u| u.iter().any(|p| p.contains("std::fs"))),
        "expected store to use std::fs: {io:#?}"
    );
    let mut problems = Vec::new();
    for pure in ["domain", "ingest"] {
        for (m, at) in graph.get(pure).into_iter().flatten() {
            problems.push(format!("{pure} must stay pure, but uses {m} ({at})"));
        }
    }
    for module in CORE {
        assert!(
            graph.contains_key(*module),
            "no module {module}: {graph:#?}"
        );
        for at in io.get(*module).into_iter().flatten() {
            problems.push(format!("{module} names an I/O path: {at}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `hushwatch-core`'s resolved dependency tree (normal dependencies, as
/// `cargo metadata` resolves them from Cargo.lock) has no async runtime,
/// HTTP, database, TLS or mail crate, so nothing in it can do I/O behind an
/// argument's back, and an edit to its Cargo.toml that adds one fails here.
#[test]
fn the_core_crate_depends_on_no_runtime_http_database_or_tls() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = meta["resolve"]["nodes"].as_array().unwrap();
    let node = |id: &str| nodes.iter().find(|n| n["id"] == id).unwrap();
    let name_of = |id: &str| {
        meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| p["name"].as_str().unwrap().to_string())
            .unwrap()
    };
    let core = nodes
        .iter()
        .find(|n| name_of(n["id"].as_str().unwrap()) == "hushwatch-core")
        .expect("hushwatch-core is a workspace member");
    // Walk normal (not dev, not build) dependencies only.
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([core["id"].as_str().unwrap().to_string()]);
    while let Some(id) = queue.pop_front() {
        for dep in node(&id)["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let dep_id = dep["pkg"].as_str().unwrap().to_string();
            if normal && seen.insert(dep_id.clone()) {
                queue.push_back(dep_id);
            }
        }
    }
    let names: BTreeSet<String> = seen.iter().map(|id| name_of(id)).collect();
    // The walk must see the tree, or it would pass on nothing.
    assert!(
        names.contains("chrono-tz") && names.contains("serde_json"),
        "{names:?}"
    );
    let found: Vec<&&str> = NOT_IN_CORE.iter().filter(|n| names.contains(**n)).collect();
    assert!(
        found.is_empty(),
        "hushwatch-core must stay pure, but its dependency tree has {found:?}"
    );
}

/// The files of `src/service/` (each task, `App`, the wiring in `mod.rs`)
/// import each other without a loop: each task takes a handle with what it
/// needs (its own state, `Core`, and the stream mirror's capabilities as
/// traits `App` implements), so no task file needs `App`'s file and `App`'s
/// file needs none that needs it back. An edge is `super::X` in a task file
/// (`X` a sibling file, or `mod.rs` for an item declared there) or `X::…`
/// in `mod.rs`; test code does not count.
#[test]
fn the_service_files_import_each_other_without_a_cycle() {
    let dir = Crate::Root.src().join("service");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let names: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains("app") && names.len() >= 10, "{names:?}");
    let mut graph = Graph::new();
    for file in &files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let ast = syn::parse_file(&std::fs::read_to_string(file).unwrap()).unwrap();
        let mut edges = SiblingUses {
            from_mod_rs: name == "mod",
            siblings: &names,
            file: repo_relative(file),
            found: BTreeMap::new(),
        };
        Walk(&mut edges).visit_file(&ast);
        let from = graph.entry(name.clone()).or_default();
        for (to, at) in edges.found {
            if to != name {
                from.entry(to).or_insert(at);
            }
        }
    }
    // The graph must have its known edges, or this would pass on nothing.
    assert!(
        graph.get("mod").is_some_and(|e| e.contains_key("app"))
            && graph
                .get("delivery")
                .is_some_and(|e| e.contains_key("core")),
        "{graph:#?}"
    );
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "import cycles between the files of src/service/ (each arrow names the first use):\n{}",
        found.join("\n")
    );
}

/// The sibling files one file of `src/service/` names.
struct SiblingUses<'a> {
    from_mod_rs: bool,
    siblings: &'a BTreeSet<String>,
    file: String,
    found: BTreeMap<String, String>,
}

impl SiblingUses<'_> {
    fn record(&mut self, segments: &[String], line: usize) {
        let target = match segments {
            [first, ..] if self.from_mod_rs && self.siblings.contains(first) => Some(first.clone()),
            [s, name, ..] if s == "super" && !self.from_mod_rs => {
                Some(if self.siblings.contains(name) {
                    name.clone()
                } else {
                    // An item of `mod.rs` itself.
                    "mod".to_string()
                })
            }
            [c, s, name, ..] if c == "crate" && s == "service" && self.siblings.contains(name) => {
                Some(name.clone())
            }
            _ => None,
        };
        if let Some(t) = target {
            self.found
                .entry(t)
                .or_insert_with(|| format!("{}:{line}", self.file));
        }
    }
}

impl Record for SiblingUses<'_> {
    fn record(&mut self, segments: &[String], line: usize) {
        SiblingUses::record(self, segments, line)
    }

    /// In `mod.rs` a sibling is named bare (`app::App`), so any identifier
    /// may start a path.
    fn macro_head(&self, _ident: &str) -> bool {
        true
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

/// "Now" has one source: the store crate's `clock.rs`. Everything else takes a `Clock`
/// (commands that default `--now` to the wall clock ask `SystemClock`), so
/// tests can move time with a `ManualClock` and nothing silently reads the
/// real time behind their back.
#[test]
fn only_the_clock_module_reads_the_wall_clock() {
    let mut files = Vec::new();
    for krate in Crate::ALL {
        rust_files(&krate.src(), &mut files);
    }
    assert!(files.len() > 20, "found only {} source files", files.len());
    let clock = Crate::Store.src().join("clock.rs");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != clock) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if WALL_CLOCK_READS.iter().any(|call| code.contains(call)) {
                found.push(format!("{}:{}: {}", repo_relative(file), n + 1, code));
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

/// The modules of one crate's `src/`: `X.rs` and `X/` (not `lib`, not `main`).
fn modules_in(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            if p.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .filter(|m| m != "lib" && m != "main")
        .collect()
}

/// The top-level modules of the workspace: the root's and core's own, and
/// the store crate as `store` and `clock`.
fn top_level_modules() -> BTreeSet<String> {
    let mut all = modules_in(&Crate::Root.src());
    all.extend(modules_in(&Crate::Core.src()));
    all.extend(["store".to_string(), "clock".to_string()]);
    all
}

fn read_repo_file(relative: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// The table rows (cells trimmed, outer pipes dropped) of the section of
/// `text` whose heading is exactly `heading`, up to the next `## ` heading;
/// each table's header row and `|---|` separator are left out. Each row comes
/// with its line number.
fn table_rows(text: &str, heading: &str) -> Vec<(usize, Vec<String>)> {
    let mut in_section = false;
    let mut rows = Vec::new();
    let mut header_seen = false;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("## ") {
            in_section = line.trim_end() == heading;
            continue;
        }
        let line = line.trim();
        if !in_section || !line.starts_with('|') {
            // A table ends at the first other line; the next one has its own header.
            header_seen = false;
            continue;
        }
        if !header_seen {
            header_seen = true;
            continue;
        }
        if line.starts_with("|--") || line.starts_with("| --") {
            continue;
        }
        let inner = line.trim_start_matches('|').trim_end_matches('|');
        rows.push((
            n + 1,
            inner.split('|').map(|c| c.trim().to_string()).collect(),
        ));
    }
    rows
}

/// `` `name` `` → `name`; anything else is `None`.
fn backticked(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?
        .strip_suffix('`')
        .filter(|s| !s.is_empty() && !s.contains('`'))
}

/// Every `` `…` `` span in a cell.
fn backticked_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// ARCHITECTURE.md's module table, the machine-readable part of the doc:
/// under `## Modules`, one row per top-level module,
/// `` | `name` | what it owns | `dep`, `dep` | `` with the last cell listing
/// exactly the top-level modules it may use, comma-separated in backticks,
/// or `—` for none. Malformed rows are errors, not skipped rows, so a typo
/// cannot quietly drop a module out of the comparison.
fn documented_graph() -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let text = read_repo_file("ARCHITECTURE.md");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (line, cells) in table_rows(&text, "## Modules") {
        let at = format!("ARCHITECTURE.md:{line}");
        let [name, _owns, deps] = cells.as_slice() else {
            errors.push(format!(
                "{at}: expected 3 cells (module | owns | may depend on), found {}",
                cells.len()
            ));
            continue;
        };
        let Some(name) = backticked(name) else {
            errors.push(format!(
                "{at}: the first cell must be one `module`, not {name:?}"
            ));
            continue;
        };
        let mut set = BTreeSet::new();
        if deps != "—" {
            for dep in deps.split(',').map(str::trim) {
                match backticked(dep) {
                    Some(d) => {
                        set.insert(d.to_string());
                    }
                    None => errors.push(format!(
                        "{at}: `{name}` may depend on: each entry must be a `module` (or the whole cell —), not {dep:?}"
                    )),
                }
            }
        }
        if graph.insert(name.to_string(), set).is_some() {
            errors.push(format!("{at}: `{name}` has a second row"));
        }
    }
    (graph, errors)
}

/// The module table in ARCHITECTURE.md is the real graph: every top-level
/// module has a row, a use the table does not declare fails, and so does a
/// declared dependency the code no longer has (a doc that allows more than
/// the code does hides the next cycle's first step).
#[test]
fn the_module_table_is_the_real_dependency_graph() {
    let real = module_graph();
    let modules = top_level_modules();
    let (documented, mut problems) = documented_graph();
    for m in &modules {
        if !documented.contains_key(m) {
            problems.push(format!("`{m}` has no row in the module table"));
        }
    }
    for m in documented.keys() {
        if !modules.contains(m) {
            problems.push(format!(
                "`{m}` has a row but is not a top-level module of the workspace"
            ));
        }
    }
    let empty = BTreeMap::new();
    for m in &modules {
        let uses = real.get(m).unwrap_or(&empty);
        let declared = documented.get(m).cloned().unwrap_or_default();
        for (to, at) in uses {
            if !declared.contains(to) {
                problems.push(format!("{m} -> {to} ({at}) is not in the module table"));
            }
        }
        for to in declared.iter().filter(|to| !uses.contains_key(*to)) {
            problems.push(format!(
                "{m} -> {to} is in the module table but not in the code"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's module table and the code disagree:\n{}",
        problems.join("\n")
    );
    // The comparison must have seen the table, or it would pass on nothing.
    assert!(documented.len() >= 10, "{documented:#?}");
}

/// The root's `src/lib.rs` and `hushwatch-core`'s declare every module of
/// their crate and describe each in one `//! - `name`: …` line, so a
/// newcomer finds the map in the crate docs (the store crate's `lib.rs` is
/// the store's own facade, with its own header).
#[test]
fn lib_rs_declares_and_describes_every_module() {
    let mut problems = Vec::new();
    for (lib, krate) in [
        ("src/lib.rs", Crate::Root),
        ("crates/hushwatch-core/src/lib.rs", Crate::Core),
    ] {
        let text = read_repo_file(lib);
        let modules = modules_in(&krate.src());
        let declared: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub mod "))
            .map(|l| l.trim_end_matches(';').trim().to_string())
            .collect();
        let mut described: BTreeMap<String, usize> = BTreeMap::new();
        for line in text.lines() {
            let Some(item) = line.strip_prefix("//! - ") else {
                continue;
            };
            if let Some((name, desc)) = item.split_once(": ") {
                if let Some(name) = backticked(name) {
                    if !desc.trim().is_empty() {
                        *described.entry(name.to_string()).or_default() += 1;
                    }
                }
            }
        }
        for m in &modules {
            if !declared.contains(m) {
                problems.push(format!("{lib} does not declare `pub mod {m};`"));
            }
            match described.get(m) {
                Some(1) => {}
                Some(n) => problems.push(format!("`{m}` is described {n} times in {lib}")),
                None => problems.push(format!("{lib} has no `//! - `{m}`: …` line")),
            }
        }
        for m in described.keys().chain(&declared) {
            if !modules.contains(m) {
                problems.push(format!(
                    "{lib} names `{m}`, which is not a module of its crate"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every invariant in ARCHITECTURE.md names its test, and that test exists:
/// in the `## Invariants` table, each `` `a::b::name` `` of the last cell is
/// a `fn name` somewhere under src/ or tests/, and each `` `tests/x.rs` ``
/// is a file. A renamed or deleted test fails here instead of leaving the
/// doc pointing at nothing.
#[test]
fn every_test_the_invariants_name_exists() {
    let text = read_repo_file("ARCHITECTURE.md");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for krate in Crate::ALL {
        rust_files(&krate.src(), &mut files);
    }
    rust_files(&root.join("tests"), &mut files);
    let source: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let defines = |name: &str| {
        source.match_indices(&format!("fn {name}")).any(|(i, m)| {
            !source[i + m.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    let rows = table_rows(&text, "## Invariants");
    assert!(rows.len() >= 10, "found only {} invariants", rows.len());
    let mut problems = Vec::new();
    for (line, cells) in rows {
        let tests = cells
            .last()
            .map(|c| backticked_spans(c))
            .unwrap_or_default();
        let mut named = 0;
        for t in tests {
            if t.ends_with(".rs") {
                if !root.join(t).is_file() {
                    problems.push(format!("ARCHITECTURE.md:{line}: no file {t}"));
                }
            } else if let Some((_, name)) = t.rsplit_once("::") {
                named += 1;
                if !defines(name) {
                    problems.push(format!("ARCHITECTURE.md:{line}: no `fn {name}` for `{t}`"));
                }
            }
        }
        if named == 0 {
            problems.push(format!(
                "ARCHITECTURE.md:{line}: the invariant names no test"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The diagram under `## Layers` in ARCHITECTURE.md orders the modules:
/// each line, after its layer label, lists modules up to the first word
/// that is not one. Every real use must point to the right on its line or
/// to a lower line (so the diagram is a layering the code keeps), and every
/// module must appear once.
#[test]
fn the_layer_diagram_orders_every_use() {
    let text = read_repo_file("ARCHITECTURE.md");
    let modules = top_level_modules();
    let block = text
        .split("\n## Layers\n")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("ARCHITECTURE.md has a ``` diagram under ## Layers");
    // Position: a larger number is further down or further right.
    let mut position: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for word in block.lines().flat_map(|line| {
        line.split_whitespace()
            .skip(1)
            .take_while(|w| modules.contains(*w))
    }) {
        if position.insert(word.to_string(), position.len()).is_some() {
            problems.push(format!("`{word}` appears twice in the layer diagram"));
        }
    }
    for m in modules.iter().filter(|m| !position.contains_key(*m)) {
        problems.push(format!("`{m}` is missing from the layer diagram"));
    }
    for (from, uses) in module_graph() {
        for (to, at) in uses {
            if let (Some(f), Some(t)) = (position.get(&from), position.get(&to)) {
                if t <= f {
                    problems.push(format!(
                        "{from} -> {to} ({at}) points up or left in the layer diagram"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
