#!/usr/bin/env python3
"""Writes a wrk Lua script that cycles through pre-signed requests.

wrk's Lua has no HMAC, so the Standard Webhooks signatures are computed
here, all with the current timestamp (valid for 300 s, longer than a run).
Every request carries a distinct svix-id, so each one is a new event.

usage: gen_requests.py MODE COUNT DELAY_MS OUT_PREFIX
  MODE: webhook | events ; DELAY_MS: 0 for as-fast-as-possible
  writes OUT_PREFIX.lua and OUT_PREFIX.reqs (one raw request per line,
  CR/LF escaped): Lua caps a chunk at 65,536 constants, so the requests
  are read from a file instead of being inlined.
"""
import base64, hashlib, hmac, json, sys, time

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TOKEN = "bench-token"

def main():
    mode, count, delay, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    key = base64.b64decode(SECRET[len("whsec_"):])
    ts = str(int(time.time()))
    run = f"{time.time_ns():x}"
    lines = []
    for i in range(count):
        msg_id = f"msg_{run}_{i}"
        body = json.dumps({"type": "user.deleted", "timestamp": int(time.time() * 1000),
                           "data": {"id": f"user_{i}", "object": "user"}})
        if mode == "webhook":
            sig = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.{body}".encode(), hashlib.sha256).digest()).decode()
            headers = {"svix-id": msg_id, "svix-timestamp": ts, "svix-signature": f"v1,{sig}",
                       "content-type": "application/json"}
            path = "/v1/streams/identity/webhook"
        else:
            body = json.dumps({"type": "user.deleted", "id": msg_id})
            headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
            path = "/v1/streams/identity/events"
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        raw = f"POST {path} HTTP/1.1\r\nHost: bench\r\n{head}Content-Length: {len(body)}\r\n\r\n{body}"
        lines.append(raw.replace("\r\n", "<CRLF>"))
    with open(prefix + ".reqs", "w") as f:
        f.write("\n".join(lines) + "\n")
    out = ["local reqs = {}", "local n = 0"]
    out.append(f"local f = io.open({lua_str(prefix + '.reqs')})")
    out.append('for line in f:lines() do reqs[#reqs + 1] = line:gsub("<CRLF>", "\\r\\n") end')
    out.append("f:close()")
    out.append("request = function() n = n % #reqs + 1; return reqs[n] end")
    out.append("local thread_id = 0")
    out.append("setup = function(thread) thread_id = thread_id + 1; thread:set('offset', thread_id * 100003) end")
    out.append("init = function(args) n = offset or 0 end")
    if delay > 0:
        out.append(f"delay = function() return {delay} end")
    out.append('done = function(summary, latency, requests) '
               'io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d non2xx=%d\\n", '
               'summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, '
               'latency:percentile(99) / 1000, summary.errors.connect + summary.errors.read + '
               'summary.errors.write + summary.errors.timeout, summary.errors.status)) end')
    with open(prefix + ".lua", "w") as f:
        f.write("\n".join(out) + "\n")

def lua_str(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"

if __name__ == "__main__":
    main()
