"""Auth0 cross-check poll benchmark (issue #48; run by hand through
`MODE=auth0 bench/crosscheck.sh`, not part of the test suite). One Python process
plays an Auth0 tenant, answering in its documented shapes:

- `POST /oauth/token` (client credentials; Auth0, "Get Management API
  Access Tokens for Production"): `{"access_token", "token_type": "Bearer",
  "expires_in", "scope"}`;
- `GET /api/v2/logs` ("Retrieve Log Events Using the Management API"): by
  checkpoint `from`/`take` (up to 100 logs newer than `from`, a bare array,
  `Link: <...?from=LAST&take=100>; rel="next"`, `[]` with the same `next`
  when nothing is newer), and by search (`q=date:[X TO *]`, `sort=date:1`,
  `per_page`) for the first poll;
- `GET /api/v2/logs/{id}`: the log (a poll from a stored checkpoint checks
  it is still kept).

Cases, each printed as one line:

  empty    the first `hushwatch crosscheck` over an empty log: starts the
           stream's watch
  auth0    one poll over LOGS logs logged after the watch start, 1% of them
           `sdu` (user deleted) that the Log Stream never delivered (each a
           finding), the rest logins (`s`, not checked)
  again    the next poll: nothing new (checkpoint check, one empty page)

For each: wall time, requests the server answered, the binary's peak RSS
(/usr/bin/time), findings.

    python3 bench/crosscheck_auth0.py BINARY WORKDIR [LOGS]
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLIENT_ID = "bench_m2m_client"
CLIENT_SECRET = "bench_m2m_secret_0123456789"
TOKEN = "eyJ.bench_token"


class Tenant:
    def __init__(self, port_holder):
        self.lock = threading.Lock()
        self.requests = 0
        self.logs = []
        self.index = {}
        self.pages = {}
        self.port = port_holder

    def fill(self, n):
        # Logged in the second before now: after the watch start, older than
        # grace = "0s". Auth0's ids are 56 decimal digits growing with time.
        start = datetime.now(timezone.utc) - timedelta(seconds=1)
        step = timedelta(seconds=1) / max(n, 1)
        stamp = start.strftime("%Y%m%d%H%M%S")
        self.logs = []
        for i in range(n):
            missed = i % 100 == 50
            self.logs.append({
                "log_id": f"900{stamp}{i:039d}",
                "date": (start + step * i).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "type": "sdu" if missed else "s",
                "description": "User deleted" if missed else "",
                "client_id": "cli_app", "client_name": "App", "ip": "203.0.113.9",
                "user_agent": "Chrome 120.0.0 / Linux 0.0.0",
                "user_id": f"auth0|u{i:07d}", "user_name": f"user{i}@example.com",
                "hostname": "acme.auth0.com", "tenant_name": "acme",
                "details": {"prompts": [], "stats": {"loginsCount": 3}},
            })
        self.index = {log["log_id"]: i for i, log in enumerate(self.logs)}
        self.pages = {}

    def page(self, start, take):
        key = (start, take)
        if key not in self.pages:
            page = self.logs[start:start + take]
            self.pages[key] = json.dumps(page).encode()
        return self.pages[key]

    def prebuild(self):
        for start in range(0, len(self.logs) + 1, 100):
            self.page(start, 100)


def handler(t):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, body, headers=()):
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            with t.lock:
                t.requests += 1
            if self.path != "/oauth/token" or form.get("client_secret") != [CLIENT_SECRET]:
                return self.reply(401, b'{"error":"access_denied"}')
            body = {"access_token": TOKEN, "token_type": "Bearer", "expires_in": 86400,
                    "scope": "read:logs"}
            self.reply(200, json.dumps(body).encode())

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            with t.lock:
                t.requests += 1
            if self.headers.get("authorization") != f"Bearer {TOKEN}":
                return self.reply(401, b'{"statusCode":401}')
            if u.path.startswith("/api/v2/logs/"):
                i = t.index.get(urllib.parse.unquote(u.path.rsplit("/", 1)[1]))
                if i is None:
                    return self.reply(404, b'{"statusCode":404,"message":"log not found"}')
                return self.reply(200, json.dumps(t.logs[i]).encode())
            if u.path != "/api/v2/logs":
                return self.reply(404, b"{}")
            if "from" in q:
                frm, take = q["from"][0], int(q.get("take", ["50"])[0])
                start = t.index[frm] + 1 if frm in t.index else 0
                body = t.page(start, take)
                last = t.logs[min(start + take, len(t.logs)) - 1]["log_id"] if start < len(t.logs) else frm
                link = f'<http://127.0.0.1:{t.port[0]}/api/v2/logs?from={last}&take={take}>; rel="next"'
                return self.reply(200, body, [("link", link)])
            since = q["q"][0].split("[", 1)[1].split(" ", 1)[0]
            first = [log for log in t.logs[:1] if log["date"] >= since]
            self.reply(200, json.dumps(first).encode())

    return H


def run(binary, config, t):
    before = t.requests
    started = time.monotonic()
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M", binary, "crosscheck", "--config", config, "--stream", "login",
         "--format", "json"],
        capture_output=True, text=True,
    )
    wall = time.monotonic() - started
    rss_kib = int(out.stderr.strip().splitlines()[-1])
    if out.returncode not in (0, 1):
        sys.exit(f"hushwatch crosscheck failed: {out.stderr}")
    if CLIENT_SECRET in out.stdout + out.stderr or TOKEN in out.stdout + out.stderr:
        sys.exit("a secret in the output")
    report = json.loads(out.stdout)
    return wall, t.requests - before, rss_kib, report


def main():
    binary, work = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10_000
    port = [0]
    t = Tenant(port)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(t))
    port[0] = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = os.path.join(work, "hushwatch.toml")
    with open(config, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:0"
data_dir = "{work}/data"

[streams.login]
calendar = "always"
silence_threshold = "1h"
notify = []
[streams.login.ingest]
provider = "auth0"
authorization = "Bearer bench-log-stream"
[streams.login.crosscheck]
provider = "auth0"
api_url = "http://127.0.0.1:{port[0]}"
client_id = "{CLIENT_ID}"
client_secret = "{CLIENT_SECRET}"
grace = "0s"
""")

    def line(name, r):
        wall, requests, rss, report = r
        print(f"{name:<6} {wall:.2f} s, {requests} requests, peak RSS {rss / 1024:.1f} MiB, "
              f"findings {len(report['findings'])}")

    line("empty", run(binary, config, t))
    time.sleep(1.2)
    t.fill(n)
    t.prebuild()
    line("auth0", run(binary, config, t))
    line("again", run(binary, config, t))
    server.shutdown()


if __name__ == "__main__":
    main()
