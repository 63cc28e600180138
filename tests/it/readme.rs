//! The shell examples of README.md and of every page of the book in
//! `docs/src/`, run as written with the real binary against the shipped
//! configs, so every command line in the docs runs in a test. Edit an
//! example and this test runs the edit; add one (or a page) and it is
//! covered without touching this file (or fails, asking you to classify a
//! new program).
//!
//! The rule, exactly:
//!
//! 0. **Documents**, in this order, as one session: README.md, then every
//!    page `docs/src/SUMMARY.md` links to, in the order it links them (the
//!    book's reading order). A page `docs/src/**/*.md` that SUMMARY.md does
//!    not link fails the test (it would be neither built nor run), except
//!    under `docs/src/_incoming/` (drafts waiting to be merged). A page's
//!    `{{#include ../../README.md:ANCHOR}}` line is not expanded: that text
//!    is README.md's and runs there, once.
//! 1. **Blocks**: every fenced block of those documents whose info string
//!    is `sh`, `shell`, `bash` or `console`. Other blocks (toml, yaml,
//!    text, plain) are text, not commands: fence a command that cannot run
//!    here (a path under `/etc`, a cron line) as `text`.
//! 2. **Lines**: a trailing `\` joins the next line; blank lines and lines
//!    starting with `#` are dropped (bash drops trailing `# …` comments
//!    itself). In a block that uses `$ ` prompts, a `$ ` line is a command
//!    and the lines after it, up to the next command, are its **expected
//!    output**: compared as JSON when it parses as JSON (the README may
//!    wrap it), else as text with runs of whitespace collapsed.
//! 3. **Programs**, by a command's first word:
//!    - `hushwatch`, `target/release/hushwatch`, and `cargo run [--release]
//!      -- ARGS` (run as `hushwatch ARGS`): the binary under test.
//!      `hushwatch serve …` (a trailing `&` or not) is started in the
//!      background, waited for until it logs `hushwatch listening on ADDR`
//!      and answers `GET /healthz`, and stopped with SIGTERM (it must then
//!      exit 0) where the docs stop it: at the next `kill` line, which
//!      may be blocks (or pages) later. With no `kill` before the next
//!      `serve` or the end of the documents, it is stopped at the end of
//!      its own block.
//!    - `curl`, `echo`, `until` loops, and `rm` of relative file names
//!      without flags: run as written, each bounded
//!      by `COMMAND_LIMIT` (a wait that never ends fails instead of
//!      hanging the suite).
//!    - `python3 -m aiosmtpd … &` (a local SMTP receiver): started in the
//!      background, waited for until its `-l` address accepts connections,
//!      and stopped at the end of the test.
//!    - `export`: run, and kept for every later command of the documents.
//!    - not run, by design (`SKIPPED`): `cargo build|install|test|bench`
//!      (this test already runs under cargo, on the binary it built),
//!      `scripts/…` and `bench/…` (the test suite and benchmarks
//!      themselves), `docker`, `helm`, `kubectl` (no registry or cluster
//!      here), `kill` (the test stops the servers it started).
//!    - anything else fails the test: decide whether it runs here and add
//!      it to `RUN` or `SKIPPED`.
//! 4. **Where**: all commands run in document order under `bash -c`, in one
//!    scratch directory holding a copy of `config/` (so `data_dir` and any
//!    files the examples write are scratch), with `hushwatch` first on
//!    PATH, no inherited `CLERK_WEBHOOK_SECRET` / `HUSHWATCH_TOKEN` /
//!    `SVIX_OPS_SECRET` / `HUSHWATCH_AUDIT_KEY`, and every command must exit 0.
//!    Two substitutions keep parallel test runs apart, and are the only
//!    differences from what a reader pastes: the copied configs listen on
//!    `127.0.0.1:0` instead of `127.0.0.1:9477`, and `127.0.0.1:9477` in a
//!    command becomes the address the started server actually bound.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SHELL_INFO: &[&str] = &["sh", "shell", "bash", "console"];
/// First words of commands this test runs (besides the binary itself).
const RUN: &[&str] = &["curl", "echo", "export", "until"];
/// Longest a README command may run (the first-page example waits about a
/// minute for its page).
const COMMAND_LIMIT: &str = "300";
/// First words of commands this test deliberately does not run.
const SKIPPED: &[&str] = &["docker", "helm", "kubectl", "kill"];
const SKIPPED_CARGO: &[&str] = &["build", "install", "test", "bench"];
const SKIPPED_PREFIXES: &[&str] = &["scripts/", "bench/"];
/// The address the shipped configs listen on.
const DOCUMENTED_ADDR: &str = "127.0.0.1:9477";
/// Variables a developer may have exported that would change the results.
const CLEARED_ENV: &[&str] = &[
    "CLERK_WEBHOOK_SECRET",
    "HUSHWATCH_TOKEN",
    "SVIX_OPS_SECRET",
    "HUSHWATCH_AUDIT_KEY",
    "HUSHWATCH_ADMIN_TOKEN",
];

#[derive(Debug, Clone)]
struct Example {
    /// The document (`README.md`, `docs/src/…`) the command is in.
    file: String,
    /// Line number of the command's first line in `file`.
    line: usize,
    /// Position among all the commands of all the documents (rule 0's
    /// order): what "later" means for a `kill` that stops a server.
    seq: usize,
    command: String,
    expected: Option<String>,
}

impl Example {
    /// `file:line`, for messages.
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    examples: Vec<Example>,
}

/// Rule 0: README.md, then the pages SUMMARY.md links, in its order
/// (paths relative to the repository root).
fn documents(root: &Path) -> Vec<String> {
    let summary =
        std::fs::read_to_string(root.join("docs/src/SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let mut docs = vec!["README.md".to_string()];
    for target in markdown_links(&summary) {
        let page = format!("docs/src/{target}");
        if !docs.contains(&page) {
            docs.push(page);
        }
    }
    let mut unlisted = Vec::new();
    book_pages(&root.join("docs/src"), root, &mut unlisted);
    unlisted.retain(|p| {
        !docs.contains(p) && p != "docs/src/SUMMARY.md" && !p.starts_with("docs/src/_incoming/")
    });
    assert!(
        unlisted.is_empty(),
        "pages SUMMARY.md does not link (neither built nor tested): {unlisted:?}"
    );
    docs
}

/// The `.md` targets of `[text](target)` links, in order.
fn markdown_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|t| t.ends_with(".md"))
        .map(str::to_string)
        .collect()
}

fn book_pages(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            book_pages(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            let rel = path.strip_prefix(root).unwrap();
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Rules 1 and 2: the shell blocks of one document and their commands
/// (`seq` still 0: numbered once every document is read).
fn shell_blocks(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let body: Vec<(usize, &str)> = lines
            .by_ref()
            .take_while(|(_, l)| !l.trim_start().starts_with("```"))
            .map(|(i, l)| (i + 1, l))
            .collect();
        if SHELL_INFO.contains(&info.trim()) {
            blocks.push(Block {
                file: file.to_string(),
                line: n + 1,
                examples: examples(file, &body),
            });
        }
    }
    blocks
}

fn examples(file: &str, body: &[(usize, &str)]) -> Vec<Example> {
    // Join continuation lines first.
    let mut joined: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in body {
        if open {
            let last = joined.last_mut().unwrap();
            last.1.truncate(last.1.trim_end().len());
            last.1.push(' ');
            last.1.push_str(line.trim());
        } else {
            joined.push((*n, line.to_string()));
        }
        let last = joined.last_mut().unwrap();
        open = last.1.ends_with('\\');
        if open {
            last.1.pop();
        }
    }
    let prompts = joined.iter().any(|(_, l)| l.starts_with("$ "));
    let mut out: Vec<Example> = Vec::new();
    for (line, text) in joined {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match (prompts, text.strip_prefix("$ ")) {
            (true, None) => {
                let last = out.last_mut().expect("output before any $ command");
                let expected = last.expected.get_or_insert_with(String::new);
                expected.push_str(trimmed);
                expected.push('\n');
            }
            (_, command) => out.push(Example {
                file: file.to_string(),
                line,
                seq: 0,
                command: command.unwrap_or(trimmed).trim().to_string(),
                expected: None,
            }),
        }
    }
    out
}

#[derive(Debug, PartialEq)]
enum Kind {
    /// `hushwatch ARGS` (normalized); `serve` when ARGS start with it.
    Hushwatch {
        args: String,
        serve: bool,
    },
    Shell,
    /// A helper service started with `&` (the SMTP receiver).
    Background,
    Export,
    Skipped,
}

/// Rule 3.
fn classify(command: &str) -> Result<Kind, String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let first = words[0];
    let binary_args = match first {
        "hushwatch" | "target/release/hushwatch" => Some(words[1..].join(" ")),
        "cargo" if words.get(1) == Some(&"run") => {
            let dashes = words.iter().position(|w| *w == "--");
            Some(dashes.map_or(String::new(), |i| words[i + 1..].join(" ")))
        }
        _ => None,
    };
    if let Some(args) = binary_args {
        let args = args.trim_end_matches('&').trim().to_string();
        let serve = args.split_whitespace().next() == Some("serve");
        return Ok(Kind::Hushwatch { args, serve });
    }
    if first == "export" {
        return Ok(Kind::Export);
    }
    if first == "python3" && words.get(2) == Some(&"aiosmtpd") && command.ends_with('&') {
        return Ok(Kind::Background);
    }
    if RUN.contains(&first) {
        return Ok(Kind::Shell);
    }
    // `rm` of files the examples wrote: plain relative names, no flags.
    if first == "rm"
        && words.len() > 1
        && words[1..]
            .iter()
            .all(|w| !w.starts_with(['-', '/']) && !w.contains(".."))
    {
        return Ok(Kind::Shell);
    }
    let skipped = SKIPPED.contains(&first)
        || (first == "cargo" && words.get(1).is_some_and(|w| SKIPPED_CARGO.contains(w)))
        || SKIPPED_PREFIXES.iter().any(|p| first.starts_with(p));
    if skipped {
        return Ok(Kind::Skipped);
    }
    Err(format!(
        "command {command:?} starts with {first:?}, which tests/it/readme.rs neither runs \
         nor skips: add it to RUN or SKIPPED there"
    ))
}

/// A background helper (the SMTP receiver) started from the docs.
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `hushwatch serve` started from the docs.
struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Session {
    dir: PathBuf,
    bin_dir: PathBuf,
    exports: Vec<String>,
    ran: Vec<String>,
    skipped: Vec<String>,
}

impl Session {
    /// `bash -c SCRIPT` in the scratch directory; `limited` bounds it by
    /// `COMMAND_LIMIT` (servers are stopped by the test instead).
    fn bash_limited(&self, script: &str, limited: bool) -> Command {
        let mut cmd = if limited {
            let mut c = Command::new("timeout");
            c.arg(COMMAND_LIMIT).arg("bash");
            c
        } else {
            Command::new("bash")
        };
        let mut full = self.exports.join("\n");
        full.push('\n');
        full.push_str(script);
        cmd.arg("-c").arg(full).current_dir(&self.dir);
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", self.bin_dir.display()));
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    fn bash(&self, script: &str) -> Command {
        self.bash_limited(script, false)
    }

    /// Rule 3's background helper: started, and waited for until the
    /// address after `-l` accepts connections.
    fn background(&mut self, example: &Example) -> Helper {
        let command = example.command.trim_end_matches('&').trim();
        let child = self
            .bash(&format!("exec {command}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a docs background helper");
        let helper = Helper(child);
        let words: Vec<&str> = command.split_whitespace().collect();
        if let Some(addr) = words
            .iter()
            .position(|w| *w == "-l")
            .and_then(|i| words.get(i + 1))
        {
            let what = format!("{}: `{}` to listen", example.at(), example.command);
            crate::common::wait_until(&what, || TcpStream::connect(addr).ok().map(drop));
        }
        self.ran
            .push(format!("{}: {}", example.at(), example.command));
        helper
    }

    fn run(&mut self, example: &Example, server: Option<&Server>) {
        let command = match server {
            Some(s) => example.command.replace(DOCUMENTED_ADDR, &s.addr),
            None => example.command.clone(),
        };
        let out = self
            .bash_limited(&command, true)
            .output()
            .expect("run bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: `{}` failed ({}):\n{}{}",
            example.at(),
            example.command,
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(expected) = &example.expected {
            assert_same_output(example, expected, &stdout);
        }
        self.ran
            .push(format!("{}: {}", example.at(), example.command));
    }

    fn serve(&mut self, example: &Example, args: &str) -> Server {
        let mut cmd = self.bash(&format!("exec hushwatch {args}"));
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hushwatch serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut server = Server {
            child,
            addr: String::new(),
            stderr,
        };
        let what = format!("{}: `{}`", example.at(), example.command);
        let addr = crate::common::wait_until(&format!("{what} to listen"), || {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "{what} exited with {status}:\n{}",
                    server.stderr.lock().unwrap()
                );
            }
            let log = server.stderr.lock().unwrap();
            let rest = log.split("hushwatch listening on ").nth(1)?;
            Some(rest.split_whitespace().next()?.to_string())
        });
        server.addr = addr;
        crate::common::wait_until(&format!("{what} to answer /healthz"), || {
            http_get(&server.addr, "/healthz")
                .starts_with("HTTP/1.1 200")
                .then_some(())
        });
        self.ran
            .push(format!("{}: {}", example.at(), example.command));
        server
    }
}

/// The `seq` of the first `kill` after the `serve` numbered `serve_seq` (in
/// block `b` or later, of any later document), unless another `serve`
/// comes first.
fn stopping_kill(blocks: &[Block], b: usize, serve_seq: usize) -> Option<usize> {
    let later = blocks[b..]
        .iter()
        .flat_map(|block| &block.examples)
        .filter(|e| e.seq > serve_seq);
    for e in later {
        if e.command.split_whitespace().next() == Some("kill") {
            return Some(e.seq);
        }
        if matches!(
            classify(&e.command),
            Ok(Kind::Hushwatch { serve: true, .. })
        ) {
            return None;
        }
    }
    None
}

fn stop(server: Server, at: &str) {
    let pid = server.child.id().to_string();
    let mut server = server;
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = server.child.wait().unwrap();
    assert!(
        status.success(),
        "the server stopped at {at} exited with {status} after SIGTERM:\n{}",
        server.stderr.lock().unwrap()
    );
}

fn assert_same_output(example: &Example, expected: &str, got: &str) {
    let as_json = |text: &str| serde_json::from_str::<serde_json::Value>(text.trim()).ok();
    let where_ = format!("{}: `{}`", example.at(), example.command);
    if let Some(want) = as_json(&expected.replace('\n', "")) {
        assert_eq!(as_json(got), Some(want), "{where_} printed:\n{got}");
    } else {
        let squash = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(squash(got), squash(expected), "{where_}");
    }
}

fn http_get(addr: &str, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            // A developer's local state is not part of the shipped configs.
            if entry.file_name() != "data" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Rule 4's scratch directory: `config/` copied, listening on port 0, and
/// the binary reachable as `hushwatch` and `target/release/hushwatch`.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    copy_dir(&root.join("config"), &config);
    for entry in std::fs::read_dir(&config).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let documented = format!("\"{DOCUMENTED_ADDR}\"");
            std::fs::write(&path, text.replace(&documented, "\"127.0.0.1:0\"")).unwrap();
        }
    }
    let bin_dir = dir.path().join("target/release");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hushwatch"), bin_dir.join("hushwatch")).unwrap();
    (dir, bin_dir)
}

#[test]
fn every_shell_example_in_the_readme_and_the_book_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = documents(root);
    let mut blocks = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        blocks.extend(shell_blocks(doc, &text));
    }
    for (seq, example) in blocks
        .iter_mut()
        .flat_map(|b| b.examples.iter_mut())
        .enumerate()
    {
        example.seq = seq;
    }
    let (dir, bin_dir) = scratch();
    let mut session = Session {
        dir: dir.path().to_path_buf(),
        bin_dir,
        exports: Vec::new(),
        ran: Vec::new(),
        skipped: Vec::new(),
    };
    let mut served = 0;
    let mut helpers: Vec<Helper> = Vec::new();
    // (server, seq of the `kill` that stops it, if any)
    let mut server: Option<(Server, Option<usize>)> = None;
    for (b, block) in blocks.iter().enumerate() {
        for example in &block.examples {
            let kind =
                classify(&example.command).unwrap_or_else(|e| panic!("{}: {e}", example.at()));
            let running = server.as_ref().map(|(s, _)| s);
            match kind {
                Kind::Hushwatch { args, serve: true } => {
                    assert!(
                        server.is_none(),
                        "{}: a second server while one runs",
                        example.at()
                    );
                    let stop_at = stopping_kill(&blocks, b, example.seq);
                    server = Some((session.serve(example, &args), stop_at));
                    served += 1;
                }
                Kind::Hushwatch { args, serve: false } => {
                    let normalized = Example {
                        command: format!("hushwatch {args}"),
                        ..example.clone()
                    };
                    session.run(&normalized, running);
                }
                Kind::Shell => session.run(example, running),
                Kind::Background => helpers.push(session.background(example)),
                Kind::Export => {
                    session.run(example, None);
                    session.exports.push(example.command.clone());
                }
                Kind::Skipped => {
                    if server
                        .as_ref()
                        .is_some_and(|(_, k)| *k == Some(example.seq))
                    {
                        let (s, _) = server.take().unwrap();
                        stop(s, &example.at());
                        session.ran.push(format!(
                            "{}: {} (SIGTERM)",
                            example.at(),
                            example.command
                        ));
                    } else {
                        session
                            .skipped
                            .push(format!("{}: {}", example.at(), example.command));
                    }
                }
            }
        }
        if server.as_ref().is_some_and(|(_, k)| k.is_none()) {
            let (s, _) = server.take().unwrap();
            stop(s, &format!("{}:{}", block.file, block.line));
        }
    }
    assert!(server.is_none());
    println!("ran:\n  {}", session.ran.join("\n  "));
    println!("skipped (see SKIPPED):\n  {}", session.skipped.join("\n  "));
    // The README has a quick start with a server and a signed webhook, and
    // the book has a dozen pages: if extraction found far less, the rule
    // broke, not the docs.
    assert!(docs.len() >= 20, "only {} documents: {docs:?}", docs.len());
    assert!(served >= 1, "no `hushwatch serve` found in the docs");
    let signed = session.ran.iter().any(|l| l.contains("hushwatch sign"));
    assert!(signed, "no `hushwatch sign` example ran: {:?}", session.ran);
    assert!(
        session.ran.len() >= 10,
        "only {} commands of the docs ran",
        session.ran.len()
    );
}

#[test]
fn the_extraction_rule_joins_lines_and_reads_expected_output() {
    let readme = "text\n```sh\n$ hushwatch explain --a \\\n    --b\n{\"x\": 1,\n \"y\": 2}\n$ curl -f u\n```\n```toml\nx = 1\n```\n```sh\n# note\ncargo run --release -- serve --config c.toml &\n\nscripts/test   # all\n```\n";
    let blocks = shell_blocks("README.md", readme);
    assert_eq!(blocks.len(), 2);
    let first = &blocks[0].examples;
    assert_eq!(first[0].command, "hushwatch explain --a --b");
    assert_eq!(
        first[0].expected.as_deref(),
        Some("{\"x\": 1,\n\"y\": 2}\n")
    );
    assert_eq!(first[0].line, 3);
    assert_eq!(first[0].at(), "README.md:3");
    assert_eq!(first[1].command, "curl -f u");
    let second = &blocks[1].examples;
    assert_eq!(second.len(), 2);
    assert_eq!(
        classify(&second[0].command),
        Ok(Kind::Hushwatch {
            args: "serve --config c.toml".into(),
            serve: true
        })
    );
    assert_eq!(classify(&second[1].command), Ok(Kind::Skipped));
    assert!(classify("rm -rf /").is_err());
}

#[test]
fn summary_links_are_read_in_order() {
    let summary = "# Summary\n\n[Intro](introduction.md)\n\n- [A](a.md)\n  - [B `x`](b/README.md)\n- [Site](https://example.org/)\n";
    assert_eq!(
        markdown_links(summary),
        ["introduction.md", "a.md", "b/README.md"]
    );
}
