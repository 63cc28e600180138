"""Presses a button in a page in real headless Chromium, for tests that
need more than --dump-dom (tests/it/status_page.rs: the acknowledge link's
form). Talks the DevTools protocol on a pipe (--remote-debugging-pipe:
requests on fd 3, answers on fd 4, each a JSON text ended by NUL), so no
port and no websocket library are needed. Opens URL, records the page
(text, forms, a screenshot to SHOT_DIR/before.png), clicks the element
with id BUTTON, waits for the page that answers (an element with id
"result"), records it (SHOT_DIR/after.png) and prints a JSON report.
Bounded: 60 s, then it exits non-zero.

Usage: cdp_click.py CHROMIUM URL BUTTON SHOT_DIR"""
import base64, json, os, subprocess, sys, tempfile, time

browser, url, button, shots = sys.argv[1:5]
to_child_r, to_child_w = os.pipe()
from_child_r, from_child_w = os.pipe()

def wire():
    # In the child: the pipe ends at exactly fds 3 and 4, inheritable
    # (copied high first, so neither overwrites the other).
    r, w = os.dup(to_child_r), os.dup(from_child_w)
    os.dup2(r, 3, inheritable=True)
    os.dup2(w, 4, inheritable=True)

profile = tempfile.mkdtemp()
proc = subprocess.Popen(
    [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
     "--disable-background-networking", "--disable-component-update", "--disable-sync",
     "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
    preexec_fn=wire,
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=False)
os.close(to_child_r); os.close(from_child_w)
out = os.fdopen(to_child_w, "wb", buffering=0)
inp = os.fdopen(from_child_r, "rb", buffering=0)
buf = b""
seq = 0
deadline = time.time() + 60

def read_msg():
    global buf
    while b"\0" not in buf:
        if time.time() > deadline:
            raise SystemExit("timed out")
        chunk = inp.read(65536)
        if not chunk:
            raise SystemExit("chromium closed the pipe")
        buf += chunk
    msg, buf = buf.split(b"\0", 1)
    return json.loads(msg)

def call(method, params=None, session=None):
    global seq
    seq += 1
    m = {"id": seq, "method": method, "params": params or {}}
    if session:
        m["sessionId"] = session
    out.write(json.dumps(m).encode() + b"\0")
    while True:
        r = read_msg()
        if r.get("id") == seq:
            if "error" in r:
                raise SystemExit(f"{method}: {r['error']}")
            return r.get("result", {})

def evaluate(session, expr):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
    return r.get("result", {}).get("value")

def wait_for(session, expr):
    while time.time() < deadline:
        v = evaluate(session, expr)
        if v:
            return v
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {expr}")

def shot(name):
    data = call("Page.captureScreenshot", {"format": "png"}, session)["data"]
    with open(os.path.join(shots, name + ".png"), "wb") as f:
        f.write(base64.b64decode(data))

report = {}
session = None
try:
    target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    call("Page.enable", session=session)
    call("Page.navigate", {"url": url}, session)
    wait_for(session, f"document.readyState === 'complete' && !!document.getElementById({json.dumps(button)})")
    shot("before")
    report["before"] = evaluate(session, "({title: document.title, text: document.body.innerText, forms: [...document.forms].map(f => ({method: f.method, action: f.action})), url: location.href})")
    evaluate(session, f"document.getElementById({json.dumps(button)}).click(); true")
    wait_for(session, "document.readyState === 'complete' && !!document.getElementById('result')")
    report["after"] = evaluate(session, "({title: document.title, text: document.body.innerText, result: document.getElementById('result').textContent, url: location.href})")
    shot("after")
finally:
    proc.kill()
    proc.wait()
print(json.dumps(report))
