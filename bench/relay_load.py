"""Relay under load (issue #46; run by hand through bench/relay.sh, not
part of the test suite): does hushwatch deliver as fast as it accepts?

Three processes' worth of parts, so Python's lock does not make one side
wait for the other: the app (an HTTP/1.1 keep-alive server answering 204,
noting when each webhook-id first arrived), SENDERS sender processes
posting signed Clerk-shaped deliveries to hushwatch as fast as it answers,
and hushwatch itself (release build, SQLite, bodies sealed).

Printed, one line each:
  app-floor   one client on one keep-alive connection straight to the app,
              and SENDERS clients at once: what the app itself takes
  load        per `ordered` mode: events accepted per second (senders'
              wall time), delivered per second (first send to last arrival
              at the app), their ratio, and added latency under that load
              (received by hushwatch -> first arrival at the app), p50/p99

    python3 bench/relay_load.py BINARY WORKDIR [N]
"""

import http.client
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from relay_common import listening, pct

BINARY, WORK = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 20_000
SENDERS = int(os.environ.get("SENDERS", "8"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "16"))
PROVIDER_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FORWARD_SECRET = "whsec_dGVzdC1mb3J3YXJkLXNlY3JldC0xMjM0NTY3ODkw"
STORE_KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


def app_main(port_out, stop):
    import threading

    first = {}
    counts = {}
    lock = threading.Lock()

    class App(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            # /count?prefix=P: how many ids of that prefix arrived;
            # /times?prefix=P: when each did.
            prefix = self.path.split("prefix=", 1)[1] if "prefix=" in self.path else ""
            with lock:
                if self.path.startswith("/count"):
                    answer = counts.get(prefix, 0)
                else:
                    answer = {k: v for k, v in first.items() if k.startswith(prefix)}
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            mid = self.headers.get("webhook-id")
            now = time.monotonic()
            with lock:
                if mid not in first:
                    first[mid] = now
                    prefix = mid.split("_", 1)[0] + "_"
                    counts[prefix] = counts.get(prefix, 0) + 1
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), App)
    port_out.put(server.server_address[1])
    server.serve_forever()



def line(case, **kv):
    print(case.ljust(11) + "  ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def floor_one(port, n):
    c = http.client.HTTPConnection("127.0.0.1", port)
    t = time.monotonic()
    for _ in range(n):
        c.request("POST", "/floor", body=b"{}", headers={"webhook-id": "floor", "Content-Length": "2"})
        c.getresponse().read()
    return n / (time.monotonic() - t)


def floor_worker(port, n, out):
    out.put(floor_one(port, n))


def app_floor(port, n=4000):
    one = floor_one(port, n)
    out = mp.Queue()
    procs = [mp.Process(target=floor_worker, args=(port, n // SENDERS, out)) for _ in range(SENDERS)]
    t = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    many = (n // SENDERS) * SENDERS / (time.monotonic() - t)
    line("app-floor", one_connection_per_s=f"{one:.0f}", senders=SENDERS, concurrent_per_s=f"{many:.0f}")
    return one


def start(mode, app_port):
    data = os.path.join(WORK, f"load-{mode}")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
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
url = "http://127.0.0.1:{app_port}/webhooks"
secret = "{FORWARD_SECRET}"
ordered = "{mode}"
concurrency = {CONCURRENCY}
retry = ["1s"]
alert_after = []
""")
    log = open(os.path.join(data, "hushwatch.log"), "wb")
    p = subprocess.Popen([BINARY, "serve", "--config", cfg], cwd=data,
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        port = listening(p.pid)
        if port:
            return p, port
        time.sleep(0.05)
    raise SystemExit("hushwatch did not start listening")



def sender(port, prefix, lo, hi, out):
    from standardwebhooks.webhooks import Webhook

    hook = Webhook(PROVIDER_SECRET)
    c = http.client.HTTPConnection("127.0.0.1", port)
    sent = {}
    for i in range(lo, hi):
        mid = f"{prefix}{i}"
        # One user per event: with ordered = "subject" every event is its
        # own queue (the many-subjects case the issue measures).
        body = json.dumps({"type": "user.deleted", "object": "event",
                           "data": {"id": f"user_{i}", "object": "user", "deleted": True}})
        ts = datetime.now(tz=timezone.utc)
        sig = hook.sign(mid, ts, body)
        sent[mid] = time.monotonic()
        c.request("POST", "/v1/streams/clerk/webhook", body=body, headers={
            "svix-id": mid, "svix-timestamp": str(int(ts.timestamp())),
            "svix-signature": sig, "content-type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
    out.put(sent)


def ask(app_port, what, prefix):
    c = http.client.HTTPConnection("127.0.0.1", app_port)
    c.request("GET", f"/{what}?prefix={prefix}")
    return json.loads(c.getresponse().read())


def load(mode, app_port, n):
    p, port = start(mode, app_port)
    prefix = f"{mode}_"
    try:
        out = mp.Queue()
        share = n // SENDERS
        procs = [mp.Process(target=sender, args=(port, prefix, k * share, (k + 1) * share, out))
                 for k in range(SENDERS)]
        t0 = time.monotonic()
        for s in procs:
            s.start()
        sent = {}
        for _ in procs:
            sent.update(out.get())
        for s in procs:
            s.join()
        accepted_s = time.monotonic() - t0
        total = share * SENDERS
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if ask(app_port, "count", prefix) >= total:
                break
            time.sleep(0.2)
        got = ask(app_port, "times", prefix)
        first_send = min(sent.values())
        last_arrival = max(got.values())
        accepted = total / accepted_s
        delivered = len(got) / (last_arrival - first_send)
        lat = [got[k] - sent[k] for k in got if k in sent]
        with open(f"/proc/{p.pid}/status") as f:
            hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
        line("load", ordered=mode, n=total, delivered_n=len(got),
             accepted_per_s=f"{accepted:.0f}", delivered_per_s=f"{delivered:.0f}",
             ratio=f"{delivered / accepted:.2f}",
             p50_ms=f"{pct(lat, .5)*1e3:.1f}", p99_ms=f"{pct(lat, .99)*1e3:.1f}",
             peak_rss_mib=f"{hwm/1024:.1f}")
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    mp.set_start_method("fork")
    ports = mp.Queue()
    stop = mp.Event()
    app = mp.Process(target=app_main, args=(ports, stop), daemon=True)
    app.start()
    app_port = ports.get()
    try:
        app_floor(app_port)
        for mode in os.environ.get("MODES", "none subject stream").split():
            load(mode, app_port, N)
    finally:
        app.terminate()
