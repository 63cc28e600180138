"""Relay-mode benchmark (issue #29; run by hand through bench/relay.sh, not
part of the test suite). One process plays both the identity provider
(signed Standard Webhooks deliveries to hushwatch) and the app (an HTTP
server that answers 204 and notes when each webhook-id first arrived).

Cases, each printed as one line:
  floor     the app answered directly by this client (no hushwatch): the
            same Python server's own latency, the floor of every figure
  healthz   GET /healthz of hushwatch: its HTTP floor in this run
  latency   paced deliveries, received by hushwatch -> first arrival at the
            app, p50/p99 (ordered = true)
  backlog   N events stored while the app answers 502, then the app comes
            up: time from recovery to the last backlog event delivered,
            forward throughput, hushwatch's RSS and data dir size with the
            N events pending (ordered = true and false)

    python3 bench/relay.py BINARY WORKDIR [N]
"""

import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from relay_common import listening, pct
from standardwebhooks.webhooks import Webhook

BINARY, WORK = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
PROVIDER_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FORWARD_SECRET = "whsec_dGVzdC1mb3J3YXJkLXNlY3JldC0xMjM0NTY3ODkw"
STORE_KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

lock = threading.Lock()
app = {"mode": "up", "first": {}}


class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        now = time.monotonic()
        mid = self.headers.get("webhook-id")
        with lock:
            up = app["mode"] == "up"
            if up and mid not in app["first"]:
                app["first"][mid] = now
        self.send_response(204 if up else 502)
        self.send_header("Content-Length", "0")
        self.end_headers()


ThreadingHTTPServer.daemon_threads = True
server = ThreadingHTTPServer(("127.0.0.1", 0), App)
APP_PORT = server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()

hook = Webhook(PROVIDER_SECRET)



def start(ordered, name):
    data = os.path.join(WORK, name)
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    retry = ", ".join(['"1s"'] * 600)
    cfg = os.path.join(data, "hw.toml")
    with open(cfg, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:0"
data_dir = "data"
[store]
encryption_key = "{STORE_KEY}"
[streams.clerk]
calendar = "always"
silence_threshold = "1h"
[streams.clerk.ingest]
webhook_secret = "{PROVIDER_SECRET}"
[streams.clerk.forward]
url = "http://127.0.0.1:{APP_PORT}/webhooks"
secret = "{FORWARD_SECRET}"
ordered = {"true" if ordered else "false"}
retry = [{retry}]
alert_after = []
""")
    p = subprocess.Popen([BINARY, "serve", "--config", cfg], cwd=data,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = None
    for _ in range(200):
        port = listening(p.pid)
        if port:
            break
        time.sleep(0.05)
    return p, port, os.path.join(data, "data")



def deliver(conn, i):
    mid = f"msg_{i}"
    body = json.dumps({"type": "user.deleted", "object": "event",
                       "data": {"id": f"user_{i}", "object": "user", "deleted": True}})
    ts = datetime.now(tz=timezone.utc)
    sig = hook.sign(mid, ts, body)
    conn.request("POST", "/v1/streams/clerk/webhook", body=body, headers={
        "svix-id": mid, "svix-timestamp": str(int(ts.timestamp())),
        "svix-signature": sig, "content-type": "application/json"})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
    return mid


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        d = dict(l.split(":", 1) for l in f)
    return int(d["VmRSS"].split()[0]), int(d["VmHWM"].split()[0])


def du_kib(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs) // 1024


def line(case, **kv):
    print(case.ljust(9) + "  ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def floor_and_healthz(port, n=2000):
    c = http.client.HTTPConnection("127.0.0.1", APP_PORT)
    lat = []
    for _ in range(n):
        t = time.monotonic()
        c.request("POST", "/floor", body=b"{}", headers={"webhook-id": "floor"})
        c.getresponse().read()
        lat.append(time.monotonic() - t)
    line("floor", n=n, p50_ms=f"{pct(lat, .5)*1e3:.2f}", p99_ms=f"{pct(lat, .99)*1e3:.2f}")
    c = http.client.HTTPConnection("127.0.0.1", port)
    lat = []
    for _ in range(n):
        t = time.monotonic()
        c.request("GET", "/healthz")
        c.getresponse().read()
        lat.append(time.monotonic() - t)
    line("healthz", n=n, p50_ms=f"{pct(lat, .5)*1e3:.2f}", p99_ms=f"{pct(lat, .99)*1e3:.2f}")


def latency(port, n=2000, rate=200):
    c = http.client.HTTPConnection("127.0.0.1", port)
    sent = {}
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i / rate
        while time.monotonic() < due:
            time.sleep(0.0005)
        sent[f"lat_{i}"] = time.monotonic()
        deliver(c, f"lat_{i}"[4:] if False else f"L{i}")
    # ids are msg_L{i}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            got = sum(1 for i in range(n) if f"msg_L{i}" in app["first"])
        if got == n:
            break
        time.sleep(0.05)
    with lock:
        lat = [app["first"][f"msg_L{i}"] - sent[f"lat_{i}"] for i in range(n) if f"msg_L{i}" in app["first"]]
    line("latency", n=n, rate_per_s=rate, delivered=len(lat),
         p50_ms=f"{pct(lat, .5)*1e3:.2f}", p99_ms=f"{pct(lat, .99)*1e3:.2f}")


def backlog(ordered, n):
    with lock:
        app["mode"] = "down"
        app["first"].clear()
    p, port, data = start(ordered, f"backlog-{'ordered' if ordered else 'unordered'}")
    try:
        c = http.client.HTTPConnection("127.0.0.1", port)
        t = time.monotonic()
        for i in range(n):
            deliver(c, i)
        ingest_s = time.monotonic() - t
        time.sleep(2)
        rss, hwm = rss_kib(p.pid)
        disk = du_kib(data)
        with lock:
            app["mode"] = "up"
        up = time.monotonic()
        while True:
            with lock:
                got = len(app["first"])
            if got >= n:
                break
            if time.monotonic() - up > 3600:
                break
            time.sleep(0.05)
        took = time.monotonic() - up
        _, hwm_after = rss_kib(p.pid)
        line("backlog", ordered=str(ordered).lower(), n=n, ingest_per_s=f"{n/ingest_s:.0f}",
             pending_rss_mib=f"{rss/1024:.1f}", peak_rss_mib=f"{max(hwm, hwm_after)/1024:.1f}",
             data_dir_mib=f"{disk/1024:.1f}", recovery_to_last_s=f"{took:.1f}",
             forward_per_s=f"{n/took:.0f}")
    finally:
        p.kill()
        p.wait()


p, port, _ = start(True, "latency")
try:
    floor_and_healthz(port)
    latency(port)
finally:
    p.kill()
    p.wait()
backlog(True, N)
backlog(False, min(N, 20_000))
