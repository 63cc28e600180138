"""Cross-check poll benchmark (issue #45; run by hand through
bench/crosscheck.sh, not part of the test suite). One Python process plays
the provider APIs, answering in their documented shapes:

- Clerk Backend API (clerk/openapi-specs, bapi/2025-11-10.yml):
  `GET /v1/users` a bare JSON array, `limit` 1-500, paged with
  `starting_after` (the id of the last user); `GET /v1/organization_memberships`
  `{"data": [...], "total_count": N}`, `limit`/`offset`.
- WorkOS `GET /events` (workos.com/docs/reference/events):
  `{"object": "list", "data": [...], "list_metadata": {"before", "after"}}`,
  `order=asc`, `limit` 1-100, `after` an event id, `range_start` ISO 8601.
- Okta `GET /api/v1/logs` in polling mode (developer.okta.com/docs/
  reference/api/system-log/, "Polling requests"): a JSON array of
  LogEvents, `since` on the first request only, then the URL of the
  `Link: <...>; rel="next"` header, sent on every answer; `limit` up to
  1,000; `Authorization: SSWS <token>`.

Every page is built once, before any timing, so the server's own cost is
the copy of bytes to a socket. Cases, each printed as one line:

  floor       every page of the listing fetched by this client (one
              connection per request, as hushwatch does) and parsed with
              json.loads, nothing stored: the server and transport floor
  baseline    `hushwatch crosscheck` over the whole Clerk listing, the
              first poll (stored as the snapshot, nothing compared)
  second      the next poll, 1% of memberships gone (compared in SQL;
              the changes wait a poll), with no webhook to explain them
  dry-run     the same poll with --dry-run (scratch generation, dropped)
  third       the poll after: the 1% still gone and unexplained, each
              looked up in the audit log and recorded as a finding
  workos      one WorkOS poll over N events, none received (each one a
              finding: the most a poll can record)
  okta        (MODE=okta, alone) one Okta poll over N log events, 1 % of
              them deactivations no Event Hook brought (findings), the rest
              sign-ins; this org ignores the `filter` hushwatch sends, so
              the poll reads all N: the cost without a filter (more than
              32 types), the most a poll reads

For each: wall time, requests the server answered, the binary's peak RSS
(/usr/bin/time), and the SQLite file after it.

    python3 bench/crosscheck.py BINARY WORKDIR [MEMBERS] [EVENTS] [MODE]
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = "sk_test_bench_crosscheck"


class Api:
    def __init__(self, members, events):
        self.lock = threading.Lock()
        self.requests = 0
        self.users = [f"user_{i:07d}" for i in range(members)]
        self.user_index = {u: i for i, u in enumerate(self.users)}
        self.user_pages = {}
        self.set_memberships([("org_%04d" % (i % 1000), u) for i, u in enumerate(self.users)])
        self.events = []
        self.event_pages = {}
        self.event_count = events
        self.okta = []
        self.okta_pages = {}
        self.port = 0

    def set_memberships(self, pairs):
        self.memberships = pairs
        self.membership_pages = {}

    def fill_events(self):
        # Logged in the second before now: after the stream's watch start,
        # older than grace = "0s".
        start = datetime.now(timezone.utc) - timedelta(seconds=1)
        step = timedelta(seconds=1) / max(self.event_count, 1)
        self.events = [
            {
                "object": "event",
                "id": f"event_{i:07d}",
                "event": "dsync.user.deleted",
                "data": {"object": "directory_user", "id": f"directory_user_{i:07d}", "state": "inactive"},
                "created_at": (start + step * i).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            }
            for i in range(self.event_count)
        ]
        self.event_pages = {}

    def fill_okta(self):
        # Published in the second before now: after the watch start, older
        # than grace = "0s". Every 100th a deactivation, the rest sign-ins.
        start = datetime.now(timezone.utc) - timedelta(seconds=1)
        step = timedelta(seconds=1) / max(self.event_count, 1)
        self.okta = []
        for i in range(self.event_count):
            missed = i % 100 == 0
            self.okta.append({
                "uuid": f"okta-{i:08d}-0000-11ef-8000-000000000000",
                "published": (start + step * i).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "eventType": "user.lifecycle.deactivate" if missed else "user.session.start",
                "version": "0", "severity": "INFO",
                "displayMessage": "Deactivate Okta user" if missed else "User login to Okta",
                "actor": {"id": "00uadmin", "type": "User", "alternateId": "admin@example.com",
                          "displayName": "Admin"},
                "client": {"ipAddress": "203.0.113.5", "userAgent": {"browser": "CHROME", "os": "Mac OS X"}},
                "outcome": {"result": "SUCCESS"},
                "transaction": {"type": "WEB", "id": f"trs{i}"},
                "target": [{"id": f"00u{i:08d}", "type": "User",
                            "alternateId": f"user{i}@example.com", "displayName": f"User {i}"}],
            })
        self.okta_pages = {}

    def okta_answer(self, query):
        """(body, next link): `after` is this org's opaque index."""
        limit = int(query.get("limit", ["100"])[0])
        if "after" in query:
            start = int(query["after"][0])
        else:
            since = query["since"][0]
            start = sum(1 for e in self.okta if e["published"] < since)
        key = (start, limit)
        if key not in self.okta_pages:
            end = min(start + limit, len(self.okta))
            nxt = f"http://127.0.0.1:{self.port}/api/v1/logs?limit={limit}&sortOrder=ASCENDING&after={end}"
            self.okta_pages[key] = (json.dumps(self.okta[start:end]).encode(), nxt)
        return self.okta_pages[key]

    def answer(self, path, query):
        limit = int(query.get("limit", ["10"])[0])
        if path == "/v1/users":
            after = query.get("starting_after", [None])[0]
            start = 0 if after is None else self.user_index[after] + 1
            key = (start, limit)
            if key not in self.user_pages:
                page = [
                    {"id": u, "object": "user", "banned": False, "created_at": 1, "updated_at": 1}
                    for u in self.users[start:start + limit]
                ]
                self.user_pages[key] = json.dumps(page).encode()
            return self.user_pages[key]
        if path == "/v1/organization_memberships":
            offset = int(query.get("offset", ["0"])[0])
            key = (offset, limit)
            if key not in self.membership_pages:
                data = [
                    {
                        "object": "organization_membership", "id": f"orgmem_{o}_{u}",
                        "role": "org:member", "permissions": [], "public_metadata": {},
                        "created_at": 1, "updated_at": 1,
                        "organization": {"object": "organization", "id": o},
                        "public_user_data": {"user_id": u, "first_name": None, "last_name": None,
                                             "profile_image_url": "", "image_url": "", "has_image": False},
                    }
                    for o, u in self.memberships[offset:offset + limit]
                ]
                body = {"data": data, "total_count": len(self.memberships)}
                self.membership_pages[key] = json.dumps(body).encode()
            return self.membership_pages[key]
        if path == "/events":
            after = query.get("after", [None])[0]
            start = 0 if after is None else int(after.split("_")[1]) + 1
            key = (start, limit)
            if key not in self.event_pages:
                page = self.events[start:start + limit]
                body = {"object": "list", "data": page,
                        "list_metadata": {"before": None, "after": page[-1]["id"] if page else None}}
                self.event_pages[key] = json.dumps(body).encode()
            return self.event_pages[key]
        return None

    def prebuild(self, paths):
        for p in paths:
            u = urllib.parse.urlsplit(p)
            self.answer(u.path, urllib.parse.parse_qs(u.query))


def handler(api):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            link = None
            with api.lock:
                api.requests += 1
                if u.path == "/api/v1/logs":
                    body, link = api.okta_answer(urllib.parse.parse_qs(u.query))
                    scheme = "SSWS"
                else:
                    body = api.answer(u.path, urllib.parse.parse_qs(u.query))
                    scheme = "Bearer"
            if self.headers.get("authorization") != f"{scheme} {KEY}" or body is None:
                body, status = b'{"errors":[{"message":"no"}]}', 404
            else:
                status = 200
            self.send_response(status)
            if link:
                self.send_header("link", f'<{link}>; rel="next"')
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    return H


def listing_paths(api):
    """The requests hushwatch makes for one Clerk listing, in order."""
    paths, after = [], None
    while True:
        q = "limit=500" + (f"&starting_after={after}" if after else "")
        paths.append(f"/v1/users?{q}")
        page = api.users[(api.user_index[after] + 1) if after else 0:][:500]
        if len(page) < 500:
            break
        after = page[-1]
    offset = 0
    while True:
        paths.append(f"/v1/organization_memberships?limit=500&offset={offset}")
        offset += 500
        if offset >= len(api.memberships):
            break
    return paths


def floor(port, paths):
    t = time.monotonic()
    n = 0
    for p in paths:
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("GET", p, headers={"authorization": f"Bearer {KEY}"})
        r = c.getresponse()
        n += len(json.loads(r.read()) if "users" in p else json.loads(r.read())["data"])
        c.close()
    return time.monotonic() - t, n


def run(binary, config, stream, extra, api, db):
    before = api.requests
    t = time.monotonic()
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M", binary, "crosscheck", "--config", config, "--stream", stream,
         "--format", "json", *extra],
        capture_output=True, text=True,
    )
    wall = time.monotonic() - t
    rss_kib = int(out.stderr.strip().splitlines()[-1])
    if out.returncode not in (0, 1):
        sys.exit(f"hushwatch crosscheck failed: {out.stderr}")
    report = json.loads(out.stdout)
    size = sum(os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s))
    return wall, api.requests - before, rss_kib, size, report


def snapshot_rows(db):
    out = subprocess.run(["sqlite3", db, "SELECT COUNT(*) FROM crosscheck_snapshot"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main():
    binary, work = sys.argv[1], sys.argv[2]
    members = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    events = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000
    mode = sys.argv[5] if len(sys.argv) > 5 else "all"
    api = Api(members, events)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(api))
    port = server.server_address[1]
    api.port = port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = os.path.join(work, "hushwatch.toml")
    with open(config, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:0"
data_dir = "{work}/data"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = []
[streams.identity.ingest]
token = "bench-token-0123456789"
[streams.identity.crosscheck]
provider = "clerk"
api_url = "http://127.0.0.1:{port}/v1"
api_key = "{KEY}"
grace = "0s"

[streams.workforce]
calendar = "always"
silence_threshold = "1h"
notify = []
[streams.workforce.ingest]
provider = "workos"
webhook_secret = "workos-bench-secret-0123456789"
[streams.workforce.crosscheck]
provider = "workos"
api_url = "http://127.0.0.1:{port}"
api_key = "{KEY}"
grace = "0s"

[streams.okta]
calendar = "always"
silence_threshold = "1h"
notify = []
[streams.okta.ingest]
provider = "okta"
authorization = "okta-bench-hook-value"
[streams.okta.crosscheck]
provider = "okta"
api_url = "http://127.0.0.1:{port}"
api_key = "{KEY}"
grace = "0s"
""")
    db = os.path.join(work, "data", "hushwatch.sqlite3")

    if mode == "okta":
        # A first poll over an empty log starts the watch and keeps the
        # empty page's next link; the log then fills with N events.
        api.okta_answer({"limit": ["1000"], "since": ["0"]})
        empty = run(binary, config, "okta", [], api, db)
        print(f"empty     {empty[1]} request(s), store {empty[3] / 1048576:.2f} MiB")
        time.sleep(1.2)
        api.fill_okta()
        for i in range(0, events + 1, 1000):
            api.okta_answer({"limit": ["1000"], "after": [str(i)]})
        wall, requests, rss, size, report = run(binary, config, "okta", [], api, db)
        print(f"okta      {wall:.2f} s, {requests} requests, peak RSS {rss / 1024:.1f} MiB, "
              f"store {size / 1048576:.1f} MiB, findings {len(report['findings'])}")
        server.shutdown()
        return

    paths = listing_paths(api)
    api.prebuild(paths)
    secs, n = floor(port, paths)
    print(f"floor     {len(paths)} requests, {n} entries fetched and parsed by this client: {secs:.2f} s")

    def line(name, r):
        wall, requests, rss, size, report = r
        print(f"{name:<9} {wall:.2f} s, {requests} requests, peak RSS {rss / 1024:.1f} MiB, "
              f"store {size / 1048576:.1f} MiB ({snapshot_rows(db)} snapshot rows), "
              f"findings {len(report['findings'])}, pending {report['pending']}")

    # WorkOS: a first poll over an empty log starts the stream's watch (and
    # creates the store: its size before any snapshot).
    empty = run(binary, config, "workforce", [], api, db)[3]
    print(f"empty     store {empty / 1048576:.2f} MiB before any snapshot")
    line("baseline", run(binary, config, "identity", [], api, db))
    gone = len(api.memberships) // 100
    api.set_memberships(api.memberships[gone:])
    api.prebuild(listing_paths(api))
    line("dry-run", run(binary, config, "identity", ["--dry-run"], api, db))
    line("second", run(binary, config, "identity", [], api, db))
    line("third", run(binary, config, "identity", [], api, db))

    # The WorkOS log fills with N events logged after the watch start.
    time.sleep(1.2)
    api.fill_events()
    for i in range(0, events + 1, 100):
        api.answer("/events", {"limit": ["100"], **({"after": [f"event_{i - 1:07d}"]} if i else {})})
    line("workos", run(binary, config, "workforce", [], api, db))
    server.shutdown()


if __name__ == "__main__":
    main()
