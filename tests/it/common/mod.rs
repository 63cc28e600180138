//! Shared helpers for the integration tests: a temporary config, the two
//! ways to start the app (`Sidecar`: the real binary as a child process;
//! `InProcess`: the service in the test process on a real socket, with a
//! clock the test moves), the one way to run a CLI command (`cli`), the one
//! poll (`wait_until`, or `wait_for` with an explicit bound; counts wait
//! for a lower bound with `wait_at_least` / `wait_exactly`), and a minimal
//! HTTP/1.1 client over a real TCP socket.

pub mod pg;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const TOKEN: &str = "test-token-123";

/// How long a poll may take before the test fails: generous, since the
/// machine is shared and a passing test never waits this long.
pub const LIMIT: Duration = Duration::from_secs(60);

/// The first column of `sql`'s rows, as text, from the SQLite file at
/// `path` (a state file a test made or checks).
pub fn sqlite_rows(path: &Path, sql: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The one way a test runs a CLI command: the real binary as a user types
/// it (`hushwatch ARGS`), with the few extras a test needs (`--config`, the
/// environment, the working directory), then `run` for (exit code, -1 when
/// killed; stdout; stderr) or `output` for the raw result.
pub struct Cli(Command);

pub fn cli(args: &[&str]) -> Cli {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hushwatch"));
    cmd.args(args);
    Cli(cmd)
}

impl Cli {
    /// `--config path`, after the arguments so far.
    pub fn config(mut self, path: impl AsRef<Path>) -> Cli {
        self.0.arg("--config").arg(path.as_ref());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Cli {
        self.0.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Cli {
        self.0.env(key, value);
        self
    }

    pub fn envs(mut self, env: &[(&str, &str)]) -> Cli {
        self.0.envs(env.iter().copied());
        self
    }

    pub fn env_remove(mut self, key: &str) -> Cli {
        self.0.env_remove(key);
        self
    }

    pub fn dir(mut self, dir: impl AsRef<Path>) -> Cli {
        self.0.current_dir(dir.as_ref());
        self
    }

    /// The command, for a test that spawns it itself (a server it watches).
    pub fn command(self) -> Command {
        self.0
    }

    pub fn output(mut self) -> std::process::Output {
        self.0.output().expect("run hushwatch")
    }

    pub fn run(self) -> (i32, String, String) {
        let out = self.output();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// The poll: calls `check` every 20 ms until it returns Some, and fails the
/// test naming `what` after `LIMIT`.
pub fn wait_until<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for(LIMIT, what, check)
}

/// `wait_until` with its own bound, where the bound is what the test checks
/// (a page within 10 s, an exit within 20 s).
pub fn wait_for<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `items` returns at least `n` things, and returns them all.
/// A lower bound, never `len() == n`: a duplicate (or any extra) must not
/// turn into a timeout that names nothing; the caller asserts what it
/// expects of the whole list next, with the list in the message.
pub fn wait_at_least<T>(what: &str, n: usize, mut items: impl FnMut() -> Vec<T>) -> Vec<T> {
    wait_until(what, || {
        let got = items();
        (got.len() >= n).then_some(got)
    })
}

/// `wait_at_least`, then exactly `n`: an extra that has arrived by then
/// (a duplicate page) fails here, listed. It cannot see one that arrives
/// later; where that matters, the test waits on the settled signal (the
/// outbox empty) and counts again.
pub fn wait_exactly<T: std::fmt::Debug>(
    what: &str,
    n: usize,
    items: impl FnMut() -> Vec<T>,
) -> Vec<T> {
    let got = wait_at_least(what, n, items);
    assert_exactly(what, n, &got);
    got
}

/// The exact check after a lower-bound wait, listing what arrived.
pub fn assert_exactly<T: std::fmt::Debug>(what: &str, n: usize, got: &[T]) {
    assert_eq!(
        got.len(),
        n,
        "{what}: {n} expected, {} arrived (a duplicate?): {got:#?}",
        got.len()
    );
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection (`Connection: close`), raw bytes body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (e.g. 413) and close before reading all of a
    // large body; that is fine, the answer is what we test.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP reply: {text:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

pub fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, &[], b"")
}

/// A signed webhook as Svix sends it (svix-* headers).
pub fn post_webhook(
    addr: SocketAddr,
    stream: &str,
    secret: &str,
    msg_id: &str,
    ts: i64,
    body: &str,
) -> Reply {
    let key = hushwatch::ingest::signature::SecretKey::parse(secret).unwrap();
    let sig = hushwatch::ingest::signature::sign(&key, msg_id, ts, body.as_bytes());
    let ts = ts.to_string();
    request(
        addr,
        "POST",
        &format!("/v1/streams/{stream}/webhook"),
        &[
            ("content-type", "application/json"),
            ("svix-id", msg_id),
            ("svix-timestamp", &ts),
            ("svix-signature", &sig),
        ],
        body.as_bytes(),
    )
}

pub fn post_events(addr: SocketAddr, stream: &str, token: &str, body: &str) -> Reply {
    let auth = format!("Bearer {token}");
    request(
        addr,
        "POST",
        &format!("/v1/streams/{stream}/events"),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        body.as_bytes(),
    )
}

pub fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The stream's entry in `/v1/status`.
pub fn stream_status(addr: SocketAddr, stream: &str) -> serde_json::Value {
    let status = get(addr, "/v1/status").json();
    status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == stream)
        .cloned()
        .unwrap_or_else(|| panic!("stream {stream} not in status: {status}"))
}

/// A metric sample's value from `/metrics` text, e.g.
/// `hushwatch_events_total{outcome="accepted",stream="identity"}`.
///
/// Like a PromQL selector, the labels given need not be all of a series'
/// labels: every series of that name carrying them is summed, e.g.
/// `{notifier="hook",outcome="failed"}` over each `reason`.
pub fn metric(addr: SocketAddr, series: &str) -> f64 {
    let text = get(addr, "/metrics").body;
    sample_sum(&text, series).unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

/// `name{k="v",…}` → (name, pairs); label values are simple in tests, and
/// quotes inside them are escaped as the exposition format does.
fn selector_parts(series: &str) -> (&str, Vec<(String, String)>) {
    // "name " (a bare name written with the space that ends it) is the name.
    let series = series.trim();
    let Some((name, rest)) = series.split_once('{') else {
        return (series, Vec::new());
    };
    let body = rest.strip_suffix('}').unwrap_or(rest);
    let mut pairs = Vec::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let _ = chars.next(); // opening quote
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        let _ = chars.next_if_eq(&',');
        pairs.push((key.trim().to_string(), value));
    }
    (name, pairs)
}

/// The sum of every sample of `selector`'s metric whose labels include the
/// selector's; `None` when none does.
pub fn sample_sum(text: &str, selector: &str) -> Option<f64> {
    let (name, wanted) = selector_parts(selector);
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (line_name, labels) = selector_parts(series);
        if line_name != name || !wanted.iter().all(|w| labels.contains(w)) {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// A scratch directory holding `hushwatch.toml` and the data dir.
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new(config: &str) -> Workdir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hushwatch.toml"), config).unwrap();
        Workdir { dir }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("hushwatch.toml")
    }

    pub fn write_config(&self, config: &str) {
        std::fs::write(self.config_path(), config).unwrap();
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A config with one stream `identity` that accepts both ingest methods.
pub fn basic_config(calendar_and_threshold: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[calendars.tokyo]
timezone = "Asia/Tokyo"
weekly = ["mon-fri 09:00-18:00"]

[streams.identity]
{calendar_and_threshold}
notify = ["stdout"]
[streams.identity.ingest]
webhook_secret = "{SECRET}"
token = "{TOKEN}"

[notifiers.stdout]
kind = "log"
"#
    )
}

/// The real `hushwatch serve` as a child process.
pub struct Sidecar {
    pub child: Child,
    pub addr: SocketAddr,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

fn collect_lines(pipe: impl Read + Send + 'static, sink: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
}

impl Sidecar {
    pub fn start(config: &Path) -> Sidecar {
        Sidecar::start_with_env(config, &[])
    }

    /// `start`, with extra environment variables for the child.
    pub fn start_with_env(config: &Path, env: &[(&str, &str)]) -> Sidecar {
        let mut child = cli(&["serve"])
            .config(config)
            .envs(env)
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hushwatch");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        collect_lines(child.stdout.take().unwrap(), Arc::clone(&stdout));
        collect_lines(child.stderr.take().unwrap(), Arc::clone(&stderr));
        let addr = wait_for(Duration::from_secs(20), "hushwatch to listen", || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "hushwatch exited early with {status}: {:?}",
                    stderr.lock().unwrap()
                );
            }
            stderr.lock().unwrap().iter().find_map(|l| {
                l.split("hushwatch listening on ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|a| a.parse().ok())
            })
        });
        Sidecar {
            child,
            addr,
            stdout,
            stderr,
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// SIGKILL: no chance to flush or close anything.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        // Past the shutdown's own bound, so an overrun shows as a failed
        // exit status or a test of the bound (`shutdown`), not a hang here.
        let limit = hushwatch::service::SHUTDOWN_WITHIN + Duration::from_secs(15);
        wait_for(limit, "hushwatch to exit", || {
            self.child.try_wait().unwrap()
        })
    }

    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits until a line of the log (stderr) contains `needle`.
    pub fn wait_log(&mut self, needle: &str) {
        wait_until(&format!("log line containing {needle:?}"), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("hushwatch exited with {status}: {}", self.stderr_text());
            }
            self.stderr
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(needle))
                .then_some(())
        });
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the whole service inside the test process on 127.0.0.1 (any
/// port), with a clock that only moves when the test moves it.
fn start_service(
    config: hushwatch::config::Config,
    now: chrono::DateTime<chrono::Utc>,
) -> (
    tokio::runtime::Runtime,
    Arc<hushwatch::clock::ManualClock>,
    hushwatch::service::Running,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clock = Arc::new(hushwatch::clock::ManualClock::new(now));
    let dyn_clock: Arc<dyn hushwatch::clock::Clock> = clock.clone();
    let running = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        hushwatch::service::start(config, dyn_clock, listener)
            .await
            .unwrap()
    });
    (rt, clock, running)
}

/// The sidecar inside the test process, on a real socket and a real SQLite
/// file, driven by a clock the test moves.
pub struct InProcess {
    pub addr: SocketAddr,
    pub clock: Arc<hushwatch::clock::ManualClock>,
    running: Option<hushwatch::service::Running>,
    rt: tokio::runtime::Runtime,
}

pub fn utc(text: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

impl InProcess {
    pub fn start(work: &Workdir, now: chrono::DateTime<chrono::Utc>) -> InProcess {
        InProcess::start_at(&work.config_path(), now)
    }

    /// Writes `config_text` to `dir/hushwatch.toml` and starts from it.
    pub fn start_in(
        dir: &Path,
        config_text: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> InProcess {
        std::fs::write(dir.join("hushwatch.toml"), config_text).unwrap();
        InProcess::start_at(&dir.join("hushwatch.toml"), now)
    }

    /// Starts from the config file at `config_path`.
    pub fn start_at(config_path: &Path, now: chrono::DateTime<chrono::Utc>) -> InProcess {
        let config = hushwatch::config::load(config_path).unwrap_or_else(|e| panic!("{e}"));
        let (rt, clock, running) = start_service(config, now);
        InProcess {
            addr: running.addr,
            clock,
            running: Some(running),
            rt,
        }
    }

    pub fn set_time(&self, to: chrono::DateTime<chrono::Utc>) {
        self.clock.set(to);
    }

    pub fn app(&self) -> &hushwatch::service::app::App {
        &self.running.as_ref().expect("running until stopped").app
    }

    /// Where `[server] admin_listen` was bound, when it is set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.running.as_ref().and_then(|r| r.admin_addr)
    }

    /// Runs `f` on the server's runtime (e.g. a direct store read).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    pub fn advance(&self, secs: i64) {
        self.clock.advance(chrono::TimeDelta::seconds(secs));
    }

    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        use hushwatch::clock::Clock;
        self.clock.now()
    }

    /// Moves past a 1h threshold so the first stream fires.
    pub fn fire(&self) {
        self.advance(3601);
        self.wait_state("firing");
    }

    /// Posts one event to `identity` over real HTTP (bearer `TOKEN`), which
    /// resolves a firing alert.
    pub fn resolve(&self) {
        let id = format!("evt-{}", self.now().timestamp_millis());
        let body = format!(r#"{{"type":"user.created","id":"{id}"}}"#);
        let reply = post_events(self.addr, "identity", TOKEN, &body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        self.wait_state("ok");
    }

    /// Waits until the first stream's state is `want`.
    pub fn wait_state(&self, want: &str) {
        wait_until(&format!("state {want}"), || {
            let st = self.app().status();
            (st["streams"][0]["state"] == want).then_some(())
        });
    }

    /// GET /v1/status over real HTTP.
    pub fn http_status(&self) -> serde_json::Value {
        let reply = get(self.addr, "/v1/status");
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    }

    pub fn pending(&self) -> Vec<hushwatch::store::OutboxRow> {
        self.block_on(self.app().store().pending_outbox())
            .unwrap()
            .rows
    }

    pub fn notifications(&self) -> serde_json::Value {
        self.block_on(self.app().delivery().notifications_status())
            .unwrap()
    }

    /// A sample's value from the whole /metrics page, read in process
    /// (per-stream series are rendered with the page, not kept in the
    /// registry); `metric(addr, series)` reads it over HTTP.
    pub fn metric(&self, series: &str) -> f64 {
        let mut page = self.app().encode_metrics();
        let mut text = String::new();
        while let Some(chunk) = page.next_chunk() {
            text.push_str(&chunk);
        }
        sample_sum(&text, series).unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    }

    /// Advances the clock a step at a time until `check` holds (each step
    /// lets due retries run).
    pub fn advance_until<T>(
        &self,
        step_secs: i64,
        what: &str,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        wait_until(what, || {
            if let Some(v) = check() {
                return Some(v);
            }
            self.advance(step_secs);
            std::thread::sleep(Duration::from_millis(30));
            None
        })
    }

    /// `advance_until` for a count: until `items` holds at least `n`
    /// things (a lower bound, as in `wait_at_least`), returned.
    pub fn advance_until_at_least<T>(
        &self,
        step_secs: i64,
        what: &str,
        n: usize,
        mut items: impl FnMut() -> Vec<T>,
    ) -> Vec<T> {
        self.advance_until(step_secs, what, || {
            let got = items();
            (got.len() >= n).then_some(got)
        })
    }

    fn shutdown(&mut self) {
        if let Some(running) = self.running.take() {
            self.rt.block_on(running.shutdown());
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// True (after saying so on stderr, past the test harness's capture) when
/// the process is not root: tests that mount a tmpfs or `chattr +i` call
/// this first and return, instead of failing for a reason that is not a
/// bug. CI runs as root, so there they run.
pub fn skip_unless_root(test: &str, needs: &str) -> bool {
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uids = status.lines().find(|l| l.starts_with("Uid:"))?.to_owned();
            uids.split_whitespace().nth(2)?.parse::<u32>().ok()
        });
    if euid == Some(0) {
        return false;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: it {needs}, which needs root; run the suite as root (as CI does)"
    );
    true
}
