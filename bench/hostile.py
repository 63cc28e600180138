#!/usr/bin/env python3
"""Unauthenticated denial-of-service figures for SECURITY.md (run by hand).

Starts a release `hushwatch serve` on 127.0.0.1 with a real SQLite file and
runs the attacks of issue #11 against it, one after the other, each on a
fresh server:

  drip     150 connections send a webhook head that passes every check on
           the head (fresh timestamp, wrong signature, Content-Length 1 MiB),
           then the body one byte per TCP segment every 20 ms for 15 s
           (body_timeout raised to 10m so the drip runs its full length).
           Reports the server's peak RSS (VmHWM).
  stall    4,200 connections (past the 4,096 cap) send a head and one body
           byte and stall; then one genuine signed webhook. Reports how long
           it waited for its 200 and how long /healthz took after that.
  readyz   10,000 GET /readyz over 8 keep-alive connections. Reports the
           bytes the server wrote to disk (/proc/PID/io write_bytes).

Usage:  bench/hostile.py [drip|stall|readyz ...]    (default: all three)
Needs:  python3 only. Builds the release binary if missing. Prints one line
per attack; the machine it ran on is the reader's to note.
"""

import base64
import hashlib
import hmac
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "hushwatch")
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
WEBHOOK = "/v1/streams/identity/webhook"

CONFIG = """[server]
listen = "127.0.0.1:0"
data_dir = "data"
body_timeout = "{body_timeout}"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = ["stdout"]
[streams.identity.ingest]
webhook_secret = "{secret}"

[notifiers.stdout]
kind = "log"
"""


def sign(msg_id, ts, body):
    key = base64.b64decode(SECRET[len("whsec_"):])
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


class Server:
    def __init__(self, body_timeout="10s"):
        self.dir = tempfile.TemporaryDirectory()
        path = os.path.join(self.dir.name, "hushwatch.toml")
        with open(path, "w") as f:
            f.write(CONFIG.format(body_timeout=body_timeout, secret=SECRET))
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--config", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in self.proc.stderr:
            m = re.search(r"hushwatch listening on (\S+)", line)
            if m:
                host, port = m.group(1).rsplit(":", 1)
                self.addr = (host, int(port))
                break
        else:
            raise SystemExit("hushwatch did not start")
        # Keep draining the log so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])  # kB
        raise KeyError(field)

    def write_bytes(self):
        with open(f"/proc/{self.proc.pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
        raise KeyError("write_bytes")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.dir.cleanup()


def forged_head(addr, msg_id, length):
    head = (
        f"POST {WEBHOOK} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
        f"svix-id: {msg_id}\r\nsvix-timestamp: {int(time.time())}\r\n"
        f"svix-signature: v1,{'A' * 43}=\r\n\r\n"
    )
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head.encode())
    return s


def request(addr, raw, timeout=120):
    s = socket.create_connection(addr, timeout=timeout)
    s.sendall(raw)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return int(data.split(b" ", 2)[1]) if data else None


def genuine_webhook(addr, msg_id):
    body = b'{"type":"user.deleted","data":{"id":"user_1","object":"user"}}'
    ts = int(time.time())
    head = (
        f"POST {WEBHOOK} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\nsvix-id: {msg_id}\r\nsvix-timestamp: {ts}\r\n"
        f"svix-signature: {sign(msg_id, ts, body)}\r\n\r\n"
    )
    return request(addr, head.encode() + body)


def healthz(addr):
    return request(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")


def drip():
    server = Server(body_timeout="10m")
    try:
        before = server.status("VmHWM")
        conns = [forged_head(server.addr, f"msg_drip_{i}", 1 << 20) for i in range(150)]
        start = time.monotonic()
        rounds = sent = 0
        while time.monotonic() - start < 15:
            for c in conns:
                c.send(b"a")
                sent += 1
            rounds += 1
            time.sleep(max(0.0, start + 0.02 * rounds - time.monotonic()))
        peak = server.status("VmHWM")
        ok = healthz(server.addr)
        print(
            f"drip: 150 connections x {rounds} rounds ({sent} body bytes in 15 s): "
            f"peak RSS {peak / 1024:.1f} MiB (before {before / 1024:.1f} MiB); /healthz {ok}"
        )
        for c in conns:
            c.close()
    finally:
        server.stop()


def stall():
    server = Server()
    try:
        conns = []
        for i in range(4200):
            c = forged_head(server.addr, f"msg_stall_{i}", 100)
            c.send(b"{")
            conns.append(c)
        start = time.monotonic()
        status = genuine_webhook(server.addr, "msg_genuine")
        waited = time.monotonic() - start
        start = time.monotonic()
        ok = healthz(server.addr)
        print(
            f"stall: 4,200 stalled bodies; genuine signed webhook {status} after {waited:.1f} s; "
            f"/healthz {ok} after {time.monotonic() - start:.3f} s"
        )
        for c in conns:
            c.close()
    finally:
        server.stop()


def readyz():
    server = Server()
    try:
        before = server.write_bytes()
        start = time.monotonic()
        errors = []

        def worker():
            s = socket.create_connection(server.addr, timeout=60)
            f = s.makefile("rb")
            for _ in range(1250):
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
                status = int(f.readline().split()[1])
                length = 0
                while True:
                    line = f.readline()
                    if line in (b"\r\n", b""):
                        break
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                f.read(length)
                if status != 200:
                    errors.append(status)
            s.close()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        written = server.write_bytes() - before
        print(
            f"readyz: 10,000 probes in {elapsed:.1f} s ({len(errors)} not 200); "
            f"{written} bytes written to disk"
        )
    finally:
        server.stop()


def main():
    wanted = sys.argv[1:] or ["drip", "stall", "readyz"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 10000 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (10000, hard))
    if not os.path.exists(BINARY):
        subprocess.run(
            ["cargo", "build", "--release", "--locked", "--bin", "hushwatch"], cwd=ROOT, check=True
        )
    for name in wanted:
        {"drip": drip, "stall": stall, "readyz": readyz}[name]()


if __name__ == "__main__":
    main()
