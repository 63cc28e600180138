"""Entra cross-check benchmark (issue #48; run by hand through
`bench/crosscheck.sh entra`, not part of the test suite). One Python
process plays the Microsoft identity platform token endpoint and Microsoft
Graph, answering in their documented shapes:

- token: `POST /token` form (client credentials) ->
  `{"token_type": "Bearer", "expires_in": 3599, "access_token"}`
  (learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow);
- `GET /v1.0/users/delta?$select=...` and `/v1.0/groups/delta?$select=...`:
  `{"value": [...]}` with `@odata.nextLink` until `@odata.deltaLink`;
  deleted users `{"id", "@removed": {"reason": "changed"}}`, disabled ones
  `accountEnabled: false`, membership changes in `members@delta` with
  `@removed` (microsoftgraph/microsoft-graph-docs-contrib:
  api-reference/v1.0/api/user-delta.md, group-delta.md,
  concepts/delta-query-groups.md).

Graph chooses its page sizes; this server uses 200 users and 100 groups a
page (the groups with their members). Every page is built once, before any
timing. Cases, each one line:

  baseline  the first poll: the whole directory (USERS users, GROUPS groups
            of MEMBERS members each), read page by page and dropped, only
            the two delta links kept
  second    the next poll: 1% of users disabled or deleted and 1% of
            groups losing a member, no notification: each change kept
            pending
  third     the poll after (grace 0): each looked up in the audit log and
            recorded as a finding

For each: wall time, requests the server answered (token included), the
binary's peak RSS (/usr/bin/time), and the SQLite file after it.

    python3 bench/crosscheck_entra.py BINARY WORKDIR [USERS] [GROUPS] [MEMBERS]
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "eyJ0eXAiOiJKV1QiLCJiZW5jaCI6dHJ1ZX0"
SECRET = "bench~entra~client~secret"
USERS_PAGE = 200
GROUPS_PAGE = 100


class Graph:
    def __init__(self, users, groups, members):
        self.lock = threading.Lock()
        self.requests = 0
        self.base = None
        self.users = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(users)]
        self.groups = [
            (f"{i:08d}-1111-4000-8000-000000000000",
             [self.users[(i * members + j) % users] for j in range(members)])
            for i in range(groups)
        ]
        self.rounds = {}  # token -> (users pages, groups pages)
        self.seq = 0

    def pages(self, collection, objects, size, token):
        out = []
        for i in range(0, max(len(objects), 1), size):
            body = {"@odata.context": f"https://graph.microsoft.com/v1.0/$metadata#{collection}",
                    "value": objects[i:i + size]}
            if i + size < len(objects):
                body["@odata.nextLink"] = f"{self.base}/v1.0/{collection}/delta?$skiptoken={token}-{i + size}"
            else:
                body["@odata.deltaLink"] = f"{self.base}/v1.0/{collection}/delta?$deltatoken={self.seq}"
            out.append(json.dumps(body).encode())
        return out

    def build_full(self):
        users = [{"id": u, "displayName": f"User {u[:8]}", "userPrincipalName": f"u{u[:8]}@contoso.com",
                  "accountEnabled": True} for u in self.users]
        groups = [{"id": g, "displayName": f"Group {g[:8]}",
                   "members@delta": [{"@odata.type": "#microsoft.graph.user", "id": m} for m in ms]}
                  for g, ms in self.groups]
        self.rounds["full"] = (self.pages("users", users, USERS_PAGE, "full"),
                               self.pages("groups", groups, GROUPS_PAGE, "full"))

    def build_changes(self, previous):
        """1% of users disabled or deleted, 1% of groups lose a member."""
        n = max(len(self.users) // 100, 1)
        users = []
        for i, u in enumerate(self.users[:n]):
            if i % 2:
                users.append({"id": u, "@removed": {"reason": "changed"}})
            else:
                users.append({"id": u, "displayName": f"User {u[:8]}",
                              "userPrincipalName": f"u{u[:8]}@contoso.com", "accountEnabled": False})
        g = max(len(self.groups) // 100, 1)
        groups = [{"id": gid, "displayName": f"Group {gid[:8]}",
                   "members@delta": [{"@odata.type": "#microsoft.graph.user", "id": ms[-1],
                                      "@removed": {"reason": "deleted"}}]}
                  for gid, ms in self.groups[:g]]
        self.seq += 1
        self.rounds[str(previous)] = (self.pages("users", users, USERS_PAGE, str(previous)),
                                      self.pages("groups", groups, GROUPS_PAGE, str(previous)))
        # Nothing changes after that.
        self.rounds[str(self.seq)] = (self.pages("users", [], USERS_PAGE, str(self.seq)),
                                      self.pages("groups", [], GROUPS_PAGE, str(self.seq)))

    def answer(self, path, query):
        collection = {"/v1.0/users/delta": 0, "/v1.0/groups/delta": 1}.get(path)
        if collection is None:
            return None
        if "$skiptoken" in query:
            token, offset = query["$skiptoken"][0].split("-")
            size = USERS_PAGE if collection == 0 else GROUPS_PAGE
            return self.rounds[token][collection][int(offset) // size]
        token = query.get("$deltatoken", ["full"])[0]
        return self.rounds[token][collection][0]


def handler(graph):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, body):
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            with graph.lock:
                graph.requests += 1
            if form.get("client_secret") != [SECRET]:
                return self.reply(401, b'{"error":"invalid_client"}')
            self.reply(200, json.dumps({"token_type": "Bearer", "expires_in": 3599,
                                        "access_token": TOKEN}).encode())

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            with graph.lock:
                graph.requests += 1
                body = graph.answer(u.path, urllib.parse.parse_qs(u.query))
            if self.headers.get("authorization") != f"Bearer {TOKEN}" or body is None:
                return self.reply(404, b'{"error":{"code":"NotFound"}}')
            self.reply(200, body)

    return H


def run(binary, config, graph, db):
    before = graph.requests
    t = time.monotonic()
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M", binary, "crosscheck", "--config", config, "--stream", "directory",
         "--format", "json"],
        capture_output=True, text=True,
    )
    wall = time.monotonic() - t
    rss_kib = int(out.stderr.strip().splitlines()[-1])
    if out.returncode not in (0, 1):
        sys.exit(f"hushwatch crosscheck failed: {out.stderr}")
    report = json.loads(out.stdout)
    size = sum(os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s))
    return wall, graph.requests - before, rss_kib, size, report


def main():
    binary, work = sys.argv[1], sys.argv[2]
    users = int(sys.argv[3]) if len(sys.argv) > 3 else 50_000
    groups = int(sys.argv[4]) if len(sys.argv) > 4 else 5_000
    members = int(sys.argv[5]) if len(sys.argv) > 5 else 10
    graph = Graph(users, groups, members)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(graph))
    port = server.server_address[1]
    graph.base = f"http://127.0.0.1:{port}"
    graph.build_full()
    graph.build_changes(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = os.path.join(work, "hushwatch.toml")
    with open(config, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:0"
data_dir = "{work}/data"

[streams.directory]
calendar = "always"
silence_threshold = "1h"
notify = []
[streams.directory.ingest]
provider = "entra"
client_state = "bench-client-state"
[streams.directory.crosscheck]
provider = "entra"
tenant_id = "contoso.onmicrosoft.com"
client_id = "6731de76-14a6-49ae-97bc-6eba6914391e"
client_secret = "{SECRET}"
token_url = "http://127.0.0.1:{port}/token"
api_url = "http://127.0.0.1:{port}/v1.0"
grace = "0s"
""")
    db = os.path.join(work, "data", "hushwatch.sqlite3")
    print(f"directory {users} users, {groups} groups of {members} members "
          f"({USERS_PAGE} users / {GROUPS_PAGE} groups a page)")

    def line(name, r):
        wall, requests, rss, size, report = r
        print(f"{name:<9} {wall:.2f} s, {requests} requests, peak RSS {rss / 1024:.1f} MiB, "
              f"store {size / 1048576:.1f} MiB, findings {len(report['findings'])}, "
              f"pending {report['pending']}, baseline {report['baseline']}")

    line("baseline", run(binary, config, graph, db))
    line("second", run(binary, config, graph, db))
    line("third", run(binary, config, graph, db))
    server.shutdown()


if __name__ == "__main__":
    main()
