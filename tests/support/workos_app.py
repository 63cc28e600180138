"""The app behind hushwatch in relay-mode tests of a WorkOS stream: a real
HTTP server that verifies every forwarded delivery with the official WorkOS
Python SDK (`workos` on PyPI), the way an app's WorkOS webhook handler does.

    python3 workos_app.py SECRET

Listens on a port it picks itself (the test reads it from the process's
sockets). Routes:
  POST /webhooks    401 unless the SDK's `webhooks.verify_header` accepts
                    the `WorkOS-Signature` header for the body and SECRET
                    (signature and its 180 s tolerance), else 200
  GET  /deliveries  every verified delivery, in arrival order:
                    [{"id", "body", "origin", "attempt"}] (`id`: the event's
                    own id, read from the verified body)

`verify_header` is the SDK's signature check; `verify_event` would also
deserialize the body into the SDK's typed models, which require fields the
tests' events leave out, so the body is read as plain JSON after it.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workos import WorkOSClient

SECRET = sys.argv[1]
# The client is only a holder for `webhooks`; verifying makes no request.
client = WorkOSClient(api_key="sk_test_unused", client_id="client_unused")
lock = threading.Lock()
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
        if self.path != "/webhooks":
            return self.reply(404)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            client.webhooks.verify_header(
                event_body=body,
                event_signature=headers.get("workos-signature", ""),
                secret=SECRET,
            )
        except ValueError as e:
            return self.reply(401, json.dumps({"error": str(e)}).encode())
        event = json.loads(body)
        with lock:
            deliveries.append({
                "id": event.get("id"),
                "body": body.decode(),
                "origin": headers.get("hushwatch-origin"),
                "attempt": headers.get("hushwatch-attempt"),
            })
        self.reply(200, b"{}")


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", 0), Handler).serve_forever()
