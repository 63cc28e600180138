//! Helpers for the notification tests: a real HTTP receiver on 127.0.0.1
//! whose answers the test scripts (503, 429 + Retry-After, drop the
//! connection after reading the body, hang past the client's timeout),
//! a config with scripted notifiers, and starters for the real external
//! components (aiosmtpd, prometheus-alertmanager). The app itself starts
//! through `common` (`InProcess`, `Sidecar`).

use crate::common::{self, wait_until, TOKEN};

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the receiver does with the next request.
#[derive(Debug, Clone)]
pub enum Answer {
    Status(u16),
    /// Status plus extra headers, e.g. 429 with Retry-After.
    StatusWith(u16, Vec<(&'static str, String)>),
    /// Status with a response body.
    StatusBody(u16, String),
    /// Read the whole request, then close without answering (ambiguous).
    Drop,
    /// Read the whole request, then keep the connection open, silent.
    Hang,
}

#[derive(Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status it was answered with (None: dropped or hung).
    pub answered: Option<u16>,
}

/// The body as text, so a failed count lists readable pages.
impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("answered", &self.answered)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// A real HTTP/1.1 server on 127.0.0.1: answers scripted replies in order,
/// then `200` forever; records every request.
pub struct Receiver {
    pub addr: SocketAddr,
    #[allow(dead_code)] // read by `push`, which no test calls today
    script: Arc<Mutex<VecDeque<Answer>>>,
    got: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    pub fn start(script: Vec<Answer>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        Self::on(listener, script)
    }

    /// On an already-bound listener, e.g. a `ClosedPort` that was "down"
    /// until now (`ClosedPort::listen`).
    pub fn on(listener: TcpListener, script: Vec<Answer>) -> Receiver {
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, g, st) = (script.clone(), got.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, g) = (s.clone(), g.clone());
                std::thread::spawn(move || serve(conn, &s, &g));
            }
        });
        Receiver {
            addr,
            script,
            got,
            stop,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// More scripted answers, after the ones given at start.
    #[allow(dead_code)] // no test scripts answers after start today
    pub fn push(&self, answers: Vec<Answer>) {
        self.script.lock().unwrap().extend(answers);
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    pub fn delivered(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.answered.is_some_and(|s| (200..300).contains(&s)))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, script: &Mutex<VecDeque<Answer>>, got: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return; // a wake-up connect, or the client gave up
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            let (n, v) = (n.trim().to_string(), v.trim().to_string());
            if n.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            }
            headers.push((n, v));
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let answer = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Answer::Status(200));
    let answered = match &answer {
        Answer::Status(s) | Answer::StatusWith(s, _) | Answer::StatusBody(s, _) => Some(*s),
        Answer::Drop | Answer::Hang => None,
    };
    got.lock().unwrap().push(Received {
        method,
        path,
        headers,
        body,
        answered,
    });
    let mut conn = conn;
    match answer {
        Answer::Status(s) => reply(&mut conn, s, &[], ""),
        Answer::StatusWith(s, h) => reply(&mut conn, s, &h, ""),
        Answer::StatusBody(s, b) => reply(&mut conn, s, &[], &b),
        Answer::Drop => {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        Answer::Hang => std::thread::sleep(Duration::from_secs(30)),
    }
}

fn reply(conn: &mut TcpStream, status: u16, headers: &[(&str, String)], body: &str) {
    let mut text = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        text.push_str(&format!("{n}: {v}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    let _ = conn.write_all(text.as_bytes());
    let _ = conn.flush();
}

/// A port on 127.0.0.1 that is bound but not listening: connecting is
/// refused (a receiver or cluster member that is down), and the port stays
/// ours, so no other test, child process or outgoing connection can take it
/// meanwhile. Never bind-and-release a port: another listener can take it
/// before it is used, and two tests then talk to each other's servers.
pub struct ClosedPort(socket2::Socket);

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket.bind(&any.into()).expect("bind a closed port");
        ClosedPort(socket)
    }

    pub fn port(&self) -> u16 {
        self.0
            .local_addr()
            .unwrap()
            .as_socket()
            .expect("an IP socket")
            .port()
    }

    /// The receiver comes up on this very port, without releasing it.
    pub fn listen(self, script: Vec<Answer>) -> Receiver {
        self.0.listen(128).expect("listen");
        Receiver::on(self.0.into(), script)
    }
}

/// The TCP port a child process listens on, read from /proc: the child
/// binds port 0 itself, so no port is ever picked by bind-and-release, and
/// the port found is certainly the child's (not another test's listener).
pub fn child_listening_port(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    // Columns: sl local_address rem_address st ... inode (10th).
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let listening = cols.get(3) == Some(&"0A");
        let ours = cols.get(9).is_some_and(|i| inodes.iter().any(|x| x == i));
        if !(listening && ours) {
            return None;
        }
        let port = cols.get(1)?.rsplit_once(':')?.1;
        u16::from_str_radix(port, 16).ok()
    })
}

/// A config with one stream `identity` (calendar `always`, 1h threshold)
/// notifying `notify`, plus the given `[notifiers.*]` tables.
pub fn config(notify: &[&str], stream_extra: &str, notifiers: &str) -> String {
    let list: Vec<String> = notify.iter().map(|n| format!("{n:?}")).collect();
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[calendars.tokyo]
timezone = "Asia/Tokyo"
weekly = ["mon-fri 09:00-18:00"]

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = [{}]
{stream_extra}
[streams.identity.ingest]
token = "{TOKEN}"

{notifiers}
"#,
        list.join(", ")
    )
}

/// A child process stopped (SIGKILL) when dropped.
pub struct Proc(pub Child, pub String);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn missing(what: &str) -> ! {
    panic!("{what} is missing: run scripts/test-components to install the test components")
}

/// Waits until the child itself listens on TCP and returns that port.
pub fn wait_listening(proc: &mut Proc) -> u16 {
    wait_until(&format!("{} to listen", proc.1), || {
        if let Ok(Some(status)) = proc.0.try_wait() {
            panic!("{} exited early with {status}", proc.1);
        }
        child_listening_port(proc.0.id())
    })
}

/// `python3 -m aiosmtpd` with the Maildir handler on a port it picks
/// itself, optionally with STARTTLS required (`tls` = (cert, key)).
/// Returns the process and its port.
pub fn start_smtp(maildir: &Path, tls: Option<(&Path, &Path)>) -> (Proc, u16) {
    start_smtp_with(maildir, tls, false)
}

/// Like `start_smtp`; `implicit` serves SMTPS (TLS from the first byte)
/// with the given certificate instead of STARTTLS.
pub fn start_smtp_with(maildir: &Path, tls: Option<(&Path, &Path)>, implicit: bool) -> (Proc, u16) {
    let mut p = spawn_smtp(0, maildir, tls, implicit);
    let port = wait_listening(&mut p);
    (p, port)
}

/// An SMTP server that was "down" comes up on the reserved port (the
/// config already names it). The reservation is released just before the
/// start; should anything take the port in that instant, aiosmtpd exits
/// and is started again.
pub fn start_smtp_on(reserved: ClosedPort, maildir: &Path) -> Proc {
    let port = reserved.port();
    drop(reserved);
    let mut tries = 0;
    loop {
        let mut p = spawn_smtp(port, maildir, None, false);
        let listening = wait_until(&format!("{} to listen on {port}", p.1), || {
            match p.0.try_wait() {
                Ok(Some(_)) => Some(false),
                _ => (child_listening_port(p.0.id()) == Some(port)).then_some(true),
            }
        });
        if listening {
            return p;
        }
        tries += 1;
        assert!(tries < 20, "port {port} stays taken by someone else");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_smtp(port: u16, maildir: &Path, tls: Option<(&Path, &Path)>, implicit: bool) -> Proc {
    let ok = Command::new("python3")
        .args(["-c", "import aiosmtpd"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        missing("aiosmtpd (python3 -m pip install aiosmtpd)");
    }
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "aiosmtpd", "-n", "-l"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-c", "aiosmtpd.handlers.Mailbox"])
        .arg(maildir);
    if let Some((cert, key)) = tls {
        let (c, k) = if implicit {
            ("--smtpscert", "--smtpskey")
        } else {
            ("--tlscert", "--tlskey")
        };
        cmd.arg(c).arg(cert).arg(k).arg(key);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|_| missing("python3"));
    Proc(child, "aiosmtpd".into())
}

/// A real Alertmanager (Debian's `prometheus-alertmanager`), single node,
/// on a port it picks itself. Returns the process and its port.
pub fn start_alertmanager(dir: &Path) -> (Proc, u16) {
    let conf = dir.join("am.yml");
    std::fs::write(
        &conf,
        "route:\n  receiver: nobody\n  group_wait: 1s\nreceivers:\n  - name: nobody\n",
    )
    .unwrap();
    let child = Command::new("prometheus-alertmanager")
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!("--storage.path={}", dir.join("am-data").display()))
        .arg("--web.listen-address=127.0.0.1:0")
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|_| missing("prometheus-alertmanager"));
    let mut p = Proc(child, "prometheus-alertmanager".into());
    let port = wait_listening(&mut p);
    (p, port)
}

/// Makes a throwaway CA and a leaf certificate for 127.0.0.1/localhost
/// signed by it (rustls refuses a self-signed CA used as end entity).
/// Returns (ca.pem, leaf.pem, leaf.key).
pub fn make_certs(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|_| missing("openssl"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        dir.join("leaf.ext"),
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
    )
    .unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=hushwatch test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=localhost",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("leaf.pem"),
        dir.join("leaf.key"),
    )
}

/// Messages in a Maildir (`new/`), as raw text, oldest first by name.
pub fn maildir_messages(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("new")) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    files.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    files
        .into_iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// A header of a raw RFC 5322 message (unfolded).
pub fn mail_header(raw: &str, name: &str) -> Option<String> {
    let head = raw
        .split("\n\n")
        .next()
        .unwrap_or(raw)
        .replace("\r\n", "\n");
    let mut value: Option<String> = None;
    for line in head.lines() {
        if let Some(v) = value.as_mut() {
            if line.starts_with([' ', '\t']) {
                v.push(' ');
                v.push_str(line.trim());
                continue;
            }
            return value;
        }
        if let Some((n, v)) = line.split_once(':') {
            if n.eq_ignore_ascii_case(name) {
                value = Some(v.trim().to_string());
            }
        }
    }
    value
}

/// The operational-webhook secret the notification tests give `[svix.main]`.
pub const SVIX_OPS_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Posts a signed Svix operational webhook to `/v1/svix/main/operational`,
/// signed at `ts` (the sidecar's clock); returns the HTTP status.
pub fn post_svix_op(addr: SocketAddr, ts: i64, msg_id: &str, body: &str) -> u16 {
    let key = hushwatch::ingest::signature::SecretKey::parse(SVIX_OPS_SECRET).unwrap();
    let sig = hushwatch::ingest::signature::sign(&key, msg_id, ts, body.as_bytes());
    let ts = ts.to_string();
    common::request(
        addr,
        "POST",
        "/v1/svix/main/operational",
        &[
            ("content-type", "application/json"),
            ("webhook-id", msg_id),
            ("webhook-timestamp", &ts),
            ("webhook-signature", &sig),
        ],
        body.as_bytes(),
    )
    .status
}

/// An `endpoint.disabled` (`trigger`: automatic or manual) or
/// `endpoint.enabled` body for endpoint `ep`.
pub fn svix_endpoint_body(kind: &str, ep: &str, trigger: Option<&str>) -> String {
    let extra = trigger
        .map(|t| format!(r#","failSince":"2026-12-01T00:30:00Z","trigger":"{t}""#))
        .unwrap_or_default();
    format!(r#"{{"type":"{kind}","data":{{"appId":"app_1","endpointId":"{ep}"{extra}}}}}"#)
}

/// Runs the real binary with `args` and `--config config`; (exit code,
/// stdout, stderr). For the CLI commands the integration tests check
/// after (or beside) a sidecar: `audit export`, `audit subject`, `silence`.
pub fn run_cli(args: &[&str], config: &Path) -> (i32, String, String) {
    common::cli(args).config(config).run()
}

/// Posts a Standard Webhooks / Svix-signed event (`svix-*` headers, signed
/// at `ts`, the sender's clock) to `/v1/streams/{stream}/webhook`; returns
/// the HTTP status.
pub fn post_signed_webhook(
    addr: SocketAddr,
    stream: &str,
    secret: &str,
    msg_id: &str,
    ts: i64,
    body: &str,
) -> u16 {
    common::post_webhook(addr, stream, secret, msg_id, ts, body).status
}

impl Receiver {
    /// The JSON bodies of the requests answered 2xx, in arrival order.
    pub fn delivered_json(&self) -> Vec<serde_json::Value> {
        self.delivered().iter().map(Received::json).collect()
    }

    /// `delivered_json` once it holds at least `n` bodies.
    pub fn wait_delivered_json(&self, n: usize) -> Vec<serde_json::Value> {
        wait_until(&format!("{n} delivered pages"), || {
            let got = self.delivered_json();
            (got.len() >= n).then_some(got)
        })
    }
}
