"""The app behind hushwatch in relay-mode tests: a real HTTP server that
verifies every forwarded delivery with the official Standard Webhooks
library (`standardwebhooks`, the package Svix publishes for verifying), the
way an app's webhook handler does.

    python3 relay_app.py SECRET

Listens on a port it picks itself (the test reads it from the process's
sockets). Routes:
  POST /webhooks          the handler: 401 unless the signature verifies
                          (both the webhook-* and the svix-* headers),
                          else the current mode's answer
  POST /control           {"mode": "up" | "down" | "hang", "hang_seconds": N,
                           "refuse": ["text", ...]}: a verified body that
                          contains any of these strings is answered 400
                          (a poison event), whatever the mode
  GET  /deliveries        every verified delivery, in arrival order:
                          [{"id", "body", "attempt", "answered", "origin"}]
                          (`origin`: the Hushwatch-Origin header, if any)
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SECRET = sys.argv[1]
hook = Webhook(SECRET)
lock = threading.Lock()
state = {"mode": "up", "hang_seconds": 30, "refuse": []}
deliveries = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path != "/deliveries":
            return self.reply(404)
        with lock:
            body = json.dumps(deliveries).encode()
        self.reply(200, body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path == "/control":
            with lock:
                state.update(json.loads(body))
            return self.reply(200, b"{}")
        if self.path != "/webhooks":
            return self.reply(404)
        headers = {k.lower(): v for k, v in self.headers.items()}
        svix_names = {
            "webhook-id": headers.get("svix-id", ""),
            "webhook-timestamp": headers.get("svix-timestamp", ""),
            "webhook-signature": headers.get("svix-signature", ""),
        }
        try:
            hook.verify(body, headers)
            hook.verify(body, svix_names)
        except WebhookVerificationError as e:
            return self.reply(401, json.dumps({"error": str(e)}).encode())
        with lock:
            text = body.decode()
            if any(r in text for r in state["refuse"]):
                deliveries.append({
                    "id": headers.get("webhook-id"),
                    "body": text,
                    "attempt": headers.get("hushwatch-attempt"),
                    "answered": False,
                    "refused": True,
                })
                refused = True
            else:
                refused = False
            mode = state["mode"]
            hang = state["hang_seconds"]
            record = {
                "id": headers.get("webhook-id"),
                "body": body.decode(),
                "attempt": headers.get("hushwatch-attempt"),
                "received_at": headers.get("hushwatch-received-at"),
                "event_time": headers.get("hushwatch-event-time"),
                "origin": headers.get("hushwatch-origin"),
                "answered": mode == "up",
            }
            # A hanging app did receive the event (its result is unknown to
            # the sender); a down one refuses it.
            if mode != "down" and not refused:
                deliveries.append(record)
        if refused:
            return self.reply(400, b'{"error":"this event is refused"}')
        if mode == "down":
            return self.reply(502, b'{"error":"bad gateway"}')
        if mode == "hang":
            time.sleep(hang)
        self.reply(200, b"{}")


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", 0), Handler).serve_forever()
