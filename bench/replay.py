"""Bounded-replay benchmark (issue #44; run by hand through bench/replay.sh,
not part of the test suite). A relay stream on SQLite holds N delivered
rows (written straight into the file of a stopped sidecar: ingesting them
would take minutes), then, while signed webhooks keep arriving at 50/s on
one connection, `hushwatch replay` counts the whole window (--dry-run) and
then re-queues it. Forwards go to a closed port, so only the replay's own
work is measured.

Printed, one line each:
  floor    webhook latency before any replay: this run's own floor
  dry-run  wall time of the dry run, webhook p50/p99/max while it ran
  replay   wall time of the replay, webhook p50/p99/max while it ran, and
           the sidecar's peak RSS (VmHWM) over the whole run

    python3 bench/replay.py BINARY WORKDIR [N]
"""

import http.client
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

from relay_common import listening, pct
from standardwebhooks.webhooks import Webhook

BINARY, WORK = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 400_000
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
APP_SECRET = "whsec_dGVzdC1mb3J3YXJkLXNlY3JldC0xMjM0NTY3ODkw"
ADMIN = "bench-admin-token-0123456789abcdef"
RATE = 50

hook = Webhook(SECRET)

# A port nothing listens on, held by a bound socket that never listens
# (connections to it are refused) for the whole run.
closed = socket.socket()
closed.bind(("127.0.0.1", 0))
CLOSED_PORT = closed.getsockname()[1]


def line(case, **kv):
    print(case.ljust(9) + "  ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def write_config(data):
    cfg = os.path.join(data, "hw.toml")
    with open(cfg, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "{ADMIN}"
[streams.identity]
calendar = "always"
silence_threshold = "1h"
[streams.identity.ingest]
webhook_secret = "{SECRET}"
[streams.identity.forward]
url = "http://127.0.0.1:{CLOSED_PORT}/webhooks"
secret = "{APP_SECRET}"
ordered = true
retry = ["1h"]
""")
    return cfg


def start(cfg, data):
    p = subprocess.Popen([BINARY, "serve", "--config", cfg], cwd=data,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        port = listening(p.pid)
        if port:
            return p, port
        time.sleep(0.05)
    raise SystemExit("hushwatch did not start")


def stop(p):
    p.terminate()
    p.wait(timeout=30)


def insert_delivered(db, from_ms):
    conn = sqlite3.connect(db)
    body = b'{"type":"user.updated","data":{"id":"user_bulk"}}'
    conn.executemany(
        """INSERT INTO forwards (stream, queue, delivery_id, event_type, subject,
               received_at, give_up_from, moves_clock, body, state, attempts,
               next_attempt_at, settled_at)
           VALUES ('identity', 'identity', ?, 'user.updated', ?, ?, ?, 0, ?,
               'delivered', 1, ?, ?)""",
        ((f"msg_bulk_{i}", f"user_{i % 1000}", from_ms + i, from_ms + i, body,
          from_ms + i, from_ms + i) for i in range(N)))
    conn.commit()
    conn.close()


def send(conn, i):
    mid = f"msg_live_{i}"
    body = json.dumps({"type": "user.created", "object": "event",
                       "data": {"id": f"user_live_{i}", "object": "user"}})
    ts = datetime.now(tz=timezone.utc)
    conn.request("POST", "/v1/streams/identity/webhook", body=body, headers={
        "svix-id": mid, "svix-timestamp": str(int(ts.timestamp())),
        "svix-signature": hook.sign(mid, ts, body), "content-type": "application/json"})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status


class Sender(threading.Thread):
    """Webhooks at RATE/s; each (sent, answered) monotonic pair kept."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.took, self.halt = port, [], threading.Event()

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port)
        i, t0 = 0, time.monotonic()
        while not self.halt.is_set():
            due = t0 + i / RATE
            while time.monotonic() < due:
                time.sleep(0.001)
            sent = time.monotonic()
            send(conn, i)
            self.took.append((sent, time.monotonic()))
            i += 1

    def between(self, a, b):
        return [done - sent for sent, done in self.took if sent >= a and sent < b]


def latencies(case, lat, **kv):
    line(case, **kv, webhooks=len(lat), p50_ms=f"{pct(lat, .5)*1e3:.1f}",
         p99_ms=f"{pct(lat, .99)*1e3:.1f}", max_ms=f"{max(lat)*1e3:.1f}")


def replay(port, cfg, frm, to, dry_run):
    args = [BINARY, "replay", "--config", cfg, "--url", f"http://127.0.0.1:{port}",
            "--stream", "identity", "--from", frm, "--to", to, "--format", "json"]
    if dry_run:
        args.append("--dry-run")
    started = time.monotonic()
    out = subprocess.run(args, env={**os.environ, "HUSHWATCH_ADMIN_TOKEN": ADMIN},
                         capture_output=True, text=True, check=True).stdout
    return started, time.monotonic(), json.loads(out)


def hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        d = dict(l.split(":", 1) for l in f)
    return int(d["VmHWM"].split()[0])


def main():
    data = os.path.join(WORK, "replay")
    os.makedirs(data, exist_ok=True)
    cfg = write_config(data)
    p, _ = start(cfg, data)  # creates and migrates the file
    stop(p)
    from_ms = int(time.time() * 1000) - 2 * N
    t = time.monotonic()
    insert_delivered(os.path.join(data, "data", "hushwatch.sqlite3"), from_ms)
    line("rows", n=N, inserted_s=f"{time.monotonic() - t:.1f}")
    p, port = start(cfg, data)
    try:
        sender = Sender(port)
        sender.start()
        time.sleep(5)
        floor_end = time.monotonic()
        latencies("floor", sender.between(0, floor_end), seconds=5)
        iso = lambda ms: datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()
        frm, to = iso(from_ms), iso(from_ms + N)
        a, b, out = replay(port, cfg, frm, to, True)
        assert out["requeued"] == N, out
        latencies("dry-run", sender.between(a, b), rows=N, wall_s=f"{b - a:.2f}")
        a, b, out = replay(port, cfg, frm, to, False)
        assert out["requeued"] == N, out
        time.sleep(1)
        sender.halt.set()
        sender.join()
        latencies("replay", sender.between(a, b), rows=N, wall_s=f"{b - a:.2f}",
                  peak_rss_mib=f"{hwm_kib(p.pid) / 1024:.1f}")
    finally:
        stop(p)


main()
