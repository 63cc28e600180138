#!/usr/bin/env bash
# Replica benchmark (run by hand; not part of the test suite).
#
# 1. Ingest throughput and latency on SQLite, on PostgreSQL with one
#    replica and with three replicas on one database, at 1/16/256
#    connections, with GET /healthz in the same runs (the HTTP floor), then
#    paced at ~1,000 token reports/s for p99. With three replicas the
#    connections are split over them (one wrk each, run together); req/s
#    is the sum and p99 the worst of the three.
# 2. Failover: three replicas; kill -9 of the housekeeping leader -> the
#    next housekeeping action (an audit checkpoint) by another replica; and
#    kill -9 of the replica holding an outbox claim mid-send -> that page
#    delivered by another replica (same key).
#
#   HUSHWATCH_TEST_PG_URL=postgres://USER:PW@127.0.0.1:5432/postgres bench/replicas.sh
#   DURATION=5s ONLY=postgres bench/replicas.sh    # ONLY: grep over case names
#   BIN=path/to/hushwatch bench/replicas.sh        # no build
#   AUDIT=off bench/replicas.sh                    # [audit] enabled = false:
#                                                  # ingest takes no audit-head lock
#
# The admin URL's role must be allowed to create databases; each setup gets
# a fresh database, dropped at the end. Client, servers and PostgreSQL
# share the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-5s}"
LEASE="${LEASE:-5s}"
AUDIT="${AUDIT:-on}"
ADMIN="${HUSHWATCH_TEST_PG_URL:?set HUSHWATCH_TEST_PG_URL to an admin URL (scripts/test-postgres prints one)}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# BIN: a hushwatch binary built earlier (skips the release build).
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin hushwatch >&2
fi
bin="${BIN:-$PWD/target/release/hushwatch}"

work="$(mktemp -d)"
pids=()
dbs=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for d in "${dbs[@]}"; do psql "$ADMIN" -qtAc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

admin_plain="${ADMIN%%\?*}"
new_db() { # sets url to a fresh database (no subshell: dbs must persist)
  local name="hw_bench_$$_${#dbs[@]}"
  psql "$admin_plain" -qtAc "CREATE DATABASE $name" >/dev/null
  dbs+=("$name")
  url="${admin_plain%/*}/$name?sslmode=disable"
}

config() { # dir store-url-or-empty hook-url-or-empty
  mkdir -p "$1"
  {
    printf '[server]\nlisten = "127.0.0.1:0"\ndata_dir = "data"\n'
    if [ -n "$2" ]; then printf '[store]\nurl = "%s"\nleader_lease = "%s"\n' "$2" "$LEASE"; fi
    if [ "$AUDIT" = off ]; then
      printf '[audit]\nenabled = false\n'
    else
      printf '[audit]\ncheckpoint_interval = "1s"\n'
    fi
    printf '[streams.identity]\ncalendar = "always"\n'
    if [ -n "$3" ]; then
      printf 'silence_threshold = "5s"\nnotify = ["hook"]\n'
    else
      printf 'silence_threshold = "1h"\n'
    fi
    printf '[streams.identity.ingest]\nwebhook_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"\ntoken = "bench-token"\n'
    if [ -n "$3" ]; then printf '[notifiers.hook]\nkind = "webhook"\nurl = "%s"\ntimeout = "3s"\n' "$3"; fi
  } > "$1/hushwatch.toml"
}

start() { # dir index -> sets addr_<index>, pid_<index>
  HUSHWATCH_LOG=warn,hushwatch::service=info "$bin" serve --config "$1/hushwatch.toml" 2>"$1/err.$2.log" &
  local p=$!
  pids+=("$p")
  for _ in $(seq 200); do grep -q "listening on" "$1/err.$2.log" && break; sleep 0.1; done
  eval "pid_$2=$p"
  eval "addr_$2=$(grep -o 'listening on [0-9.:]*' "$1/err.$2.log" | head -1 | cut -d' ' -f3)"
}

median_of() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

wrk_one() { # addr conns mode delay out
  local script="$5.lua"
  if [ "$3" = healthz ]; then
    echo 'done = function(s, l, r) io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d non2xx=%d\n", s.requests / (s.duration / 1e6), l:percentile(50) / 1000, l:percentile(99) / 1000, s.errors.connect + s.errors.read + s.errors.write + s.errors.timeout, s.errors.status)) end' > "$script"
    [ "$4" -gt 0 ] && echo "delay = function() return $4 end" >> "$script"
    wrk -t"$(( $2 < 2 ? 1 : 2 ))" -c"$2" -d"$DURATION" -s "$script" "http://$1/healthz" > "$5.out"
  else
    python3 bench/gen_requests.py "$3" 60000 "$4" "$5"
    wrk -t"$(( $2 < 2 ? 1 : 2 ))" -c"$2" -d"$DURATION" -s "$script" "http://$1" > "$5.out"
  fi
}

# name conns mode delay addr... : one wrk per address, together.
run_case() {
  local name="$1" conns="$2" mode="$3" delay="$4"; shift 4
  grep -qE "${ONLY:-.}" <<<"$name" || return 0
  local n=$# i=0 jobs=()
  for a in "$@"; do
    local c=$(( conns / n + (i < conns % n ? 1 : 0) ))
    if [ "$c" -gt 0 ]; then wrk_one "$a" "$c" "$mode" "$delay" "$work/w$i" & jobs+=($!); fi
    i=$(( i + 1 ))
  done
  wait "${jobs[@]}"
  local rps=0 p50=0 p99=0 bad=""
  for f in "$work"/w*.out; do
    line="$(grep RESULT "$f")"; rm -f "$f"
    grep -q "errors=0 non2xx=0" <<<"$line" || bad="$line"
    rps="$(awk -v a="$rps" -v b="$(sed 's/.*rps=\([0-9.]*\).*/\1/' <<<"$line")" 'BEGIN{print a+b}')"
    p50="$(awk -v a="$p50" -v b="$(sed 's/.*p50_ms=\([0-9.]*\).*/\1/' <<<"$line")" 'BEGIN{print (b>a?b:a)}')"
    p99="$(awk -v a="$p99" -v b="$(sed 's/.*p99_ms=\([0-9.]*\).*/\1/' <<<"$line")" 'BEGIN{print (b>a?b:a)}')"
  done
  [ -z "$bad" ] || echo "errors in $name: $bad" >&2
  printf '| %-34s | %5s | %9.0f | %7s | %7s |\n' "$name" "$conns" "$rps" "$p50" "$p99"
}

ingest_table() { # label addr...
  local label="$1"; shift
  for c in 1 16 256; do
    run_case "$label: GET /healthz" "$c" healthz 0 "$@"
    run_case "$label: token report" "$c" events 0 "$@"
  done
  # 40 connections x one request per 40 ms each ~ 1,000 requests/s. wrk
  # waits for each answer before the delay, so the rate reached is
  # 40 / (0.040 + latency): with many connections and a long delay, a few
  # milliseconds of latency barely lower it (10 x 10 ms, used before, fell
  # to ~300/s as soon as the answer took 20 ms).
  run_case "$label: token report @ ~1k/s" 40 events 40 "$@"
}

echo "$(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg); duration=$DURATION lease=$LEASE audit=$AUDIT" >&2
echo "| case                               | conns | req/s     | p50 ms  | p99 ms  |"
echo "|------------------------------------|-------|-----------|---------|---------|"

config "$work/sqlite" "" ""
start "$work/sqlite" s
ingest_table "sqlite" "$addr_s"
kill "$pid_s"

new_db
config "$work/pg1" "$url" ""
start "$work/pg1" p
ingest_table "postgres, 1 replica" "$addr_p"
kill "$pid_p"

new_db
config "$work/pg3" "$url" ""
for i in 0 1 2; do start "$work/pg3" "r$i"; done
ingest_table "postgres, 3 replicas" "$addr_r0" "$addr_r1" "$addr_r2"
for i in 0 1 2; do eval "kill \$pid_r$i"; done

grep -qE "${ONLY:-.}" <<<"failover" || exit 0
# Failover is timed to the next audit checkpoint, which AUDIT=off has not.
[ "$AUDIT" = on ] || exit 0

# --- failover timings --------------------------------------------------
now_ms() { date +%s%3N; }
# A receiver that hangs on its first request and answers 200 afterwards,
# printing each request's arrival (epoch ms) and Idempotency-Key.
cat > "$work/recv.py" <<'PY'
import http.server, sys, time, threading
first = threading.Event()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        print(int(time.time() * 1000), self.headers.get("Idempotency-Key"), flush=True)
        if not first.is_set():
            first.set(); time.sleep(60); return
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print("PORT", s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$work/recv.py" > "$work/recv.log" &
pids+=($!)
for _ in $(seq 100); do grep -q PORT "$work/recv.log" && break; sleep 0.1; done
port="$(awk '/PORT/ {print $2}' "$work/recv.log")"

new_db
config "$work/fo" "$url" "http://127.0.0.1:$port/hook"
for i in 0 1 2; do start "$work/fo" "f$i"; done
leader=""
for _ in $(seq 200); do
  for i in 0 1 2; do
    if grep -q "now the housekeeping leader" "$work/fo/err.f$i.log"; then leader=$i; fi
  done
  [ -n "$leader" ] && break; sleep 0.1
done
eval "target=\$addr_f$(( (leader + 1) % 3 ))"
# Reports keep the stream quiet (no page yet) and the audit head moving,
# so every checkpoint interval has work.
( while true; do curl -s -o /dev/null -H 'authorization: Bearer bench-token' -H 'content-type: application/json' \
    -d "{\"type\":\"user.deleted\",\"id\":\"fo-$RANDOM$RANDOM\"}" "http://$target/v1/streams/identity/events"; sleep 0.05; done ) &
pids+=($!)
sleep 2
eval "victim=\$pid_f$leader"
killed="$(now_ms)"
kill -9 "$victim"
before=()
for i in 0 1 2; do before[$i]="$(grep -c 'audit checkpoint' "$work/fo/err.f$i.log" || true)"; done
took=""
for _ in $(seq 600); do
  for i in 0 1 2; do
    [ "$i" = "$leader" ] && continue
    line="$(grep 'audit checkpoint' "$work/fo/err.f$i.log" | sed -n "$(( before[i] + 1 ))p" || true)"
    if [ -n "$line" ]; then
      at="$(date -d "$(cut -d' ' -f1 <<<"$line")" +%s%3N)"
      took=$(( at - killed ))
    fi
  done
  [ -n "$took" ] && break; sleep 0.1
done
echo "kill -9 of the leader -> next housekeeping action (audit checkpoint): ${took:-none} ms (leader_lease $LEASE, checkpoint_interval 1s)"

# Stop reporting: the stream fires after 5 s; its page's first attempt
# hangs at the receiver, so its sender holds the claim mid-send.
kill "${pids[-1]}"
for _ in $(seq 600); do [ "$(grep -vc PORT "$work/recv.log")" -ge 1 ] && break; sleep 0.1; done
holder="$(psql "${url%%\?*}" -qtAc "SELECT claimed_by FROM outbox WHERE claimed_by IS NOT NULL LIMIT 1")"
for i in 0 1 2; do
  [ "$i" = "$leader" ] && continue
  if grep -q "replica joined replica=$holder" "$work/fo/err.f$i.log"; then eval "victim=\$pid_f$i"; fi
done
killed="$(now_ms)"
kill -9 "$victim"
for _ in $(seq 600); do [ "$(grep -vc PORT "$work/recv.log")" -ge 2 ] && break; sleep 0.1; done
second="$(grep -v PORT "$work/recv.log" | sed -n 2p)"
keys="$(grep -v PORT "$work/recv.log" | awk '{print $2}' | sort -u | wc -l)"
echo "kill -9 of the claim holder mid-send -> page delivered by another replica: $(( ${second%% *} - killed )) ms, distinct keys: $keys (claim lease max($LEASE, timeout 3s + 2s))"
