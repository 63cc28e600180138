#!/usr/bin/env bash
# Ingest load benchmark (run by hand; not part of the test suite).
#
# Starts a release hushwatch on 127.0.0.1 with a real SQLite file and drives
# it with wrk on loopback: GET /healthz (the HTTP floor of this machine),
# signed webhooks and token reports, each as fast as possible at several
# connection counts, then at a paced ~1,000 requests/s for latency. Each
# case runs RUNS times; the median is reported. Peak RSS is read from
# /proc. Client and server share the machine's cores.
#
#   bench/ingest.sh            # RUNS=3 DURATION=10s
#   AUDIT=off ONLY='webhook' bench/ingest.sh   # audit chain off; only matching cases
#   STORE_URL='postgres://…' bench/ingest.sh   # state on PostgreSQL ([store] url; an empty database)
#
# CONNS lists the connection counts of the as-fast-as-possible cases
# (default '1 16 256'), e.g. CONNS='16 256' ONLY='^(GET /healthz|signed webhook|token report)$'
# for the issue #33 ratios without the paced cases; HUSHWATCH_BIN=path runs
# that binary instead of building target/release/hushwatch.
# AUDIT=off sets `[audit] enabled = false`, to measure what the hash chain
# costs; ONLY is a grep pattern over case names. WATCHDOG=on adds a
# `[heartbeat]` pinging every 1s a loopback receiver that never answers
# (each ping runs into its deadline), and a dead notifier: four streams
# that fire 1s after start page `dead` (a closed loopback port: every
# attempt fails, retried every second) whose `fallback` is a notifier at
# that hung receiver, so the fallback ladder records every failed attempt
# in the store and pages its steps while ingest runs. To show that none of
# it slows ingest (issue #19).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
DURATION="${DURATION:-10s}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# HUSHWATCH_BIN runs another build (e.g. a saved copy, for before/after).
bin="${HUSHWATCH_BIN:-target/release/hushwatch}"
[ -n "${HUSHWATCH_BIN:-}" ] || cargo build --release --locked --bin hushwatch >&2

work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/hushwatch.toml" <<TOML
[server]
listen = "127.0.0.1:0"
data_dir = "data"
[streams.identity]
calendar = "always"
silence_threshold = "1h"
[streams.identity.ingest]
webhook_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
token = "bench-token"
TOML
if [ "${WATCHDOG:-off}" = on ]; then
  # A listener that accepts and never answers: every ping times out.
  python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1024); print(s.getsockname()[1], flush=True); c=[]
while True: c.append(s.accept()[0])' > "$work/hb.port" &
  hb=$!
  trap 'kill "$pid" "$hb" 2>/dev/null || true; rm -rf "$work"' EXIT
  for _ in $(seq 50); do [ -s "$work/hb.port" ] && break; sleep 0.1; done
  hb_port="$(cat "$work/hb.port")"
  printf '[heartbeat]\nurl = "http://127.0.0.1:%s/ping"\ninterval = "1s"\n' "$hb_port" >> "$work/hushwatch.toml"
  # Port 9 (discard) on loopback: nothing listens here, so every attempt
  # is refused at once.
  printf '[notifiers.dead]\nkind = "webhook"\nurl = "http://127.0.0.1:9/dead"\ntimeout = "1s"\nbackoff_initial = "1s"\nbackoff_max = "1s"\nfallback = ["backup"]\n' >> "$work/hushwatch.toml"
  printf '[notifiers.backup]\nkind = "webhook"\nurl = "http://127.0.0.1:%s/backup"\ntimeout = "1s"\n' "$hb_port" >> "$work/hushwatch.toml"
  for s in c1 c2 c3 c4; do
    printf '[streams.%s]\ncalendar = "always"\nsilence_threshold = "1s"\nnotify = ["dead"]\n[streams.%s.ingest]\ntoken = "bench-token"\n' "$s" "$s" >> "$work/hushwatch.toml"
  done
fi
if [ "${AUDIT:-on}" = off ]; then printf '[audit]\nenabled = false\n' >> "$work/hushwatch.toml"; fi
if [ -n "${STORE_URL:-}" ]; then printf '[store]\nurl = "${BENCH_STORE_URL}"\n' >> "$work/hushwatch.toml"; fi
export BENCH_STORE_URL="${STORE_URL:-}"
HUSHWATCH_LOG=warn,hushwatch::service=info "$bin" serve --config "$work/hushwatch.toml" 2>"$work/err.log" &
pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/err.log" && break; sleep 0.1; done
addr="$(grep -o 'listening on [0-9.:]*' "$work/err.log" | head -1 | cut -d' ' -f3)"
echo "hushwatch pid $pid on $addr; $(nproc) cores, $(uname -m); runs=$RUNS duration=$DURATION audit=${AUDIT:-on} store=${STORE_URL:+postgres}" >&2

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

run_case() { # name conns script-args...
  local name="$1" conns="$2"; shift 2
  grep -qE "${ONLY:-.}" <<<"$name" || return 0
  local rps=() p50=() p99=()
  for _ in $(seq "$RUNS"); do
    local script="$work/s.lua"
    if [ "$1" = healthz ]; then
      echo 'done = function(s, l, r) io.write(string.format("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%d non2xx=%d\n", s.requests / (s.duration / 1e6), l:percentile(50) / 1000, l:percentile(99) / 1000, s.errors.connect + s.errors.read + s.errors.write + s.errors.timeout, s.errors.status)) end' > "$script"
      [ "${2:-0}" -gt 0 ] && echo "delay = function() return $2 end" >> "$script"
      out="$(wrk -t"$(( conns < 2 ? 1 : 2 ))" -c"$conns" -d"$DURATION" -s "$script" "http://$addr/healthz")"
    else
      python3 bench/gen_requests.py "$1" 60000 "${2:-0}" "$work/s"
      out="$(wrk -t"$(( conns < 2 ? 1 : 2 ))" -c"$conns" -d"$DURATION" -s "$script" "http://$addr")"
    fi
    line="$(grep RESULT <<<"$out")"
    grep -q "errors=0 non2xx=0" <<<"$line" || { echo "errors in $name: $line" >&2; exit 1; }
    rps+=("$(sed 's/.*rps=\([0-9.]*\).*/\1/' <<<"$line")")
    p50+=("$(sed 's/.*p50_ms=\([0-9.]*\).*/\1/' <<<"$line")")
    p99+=("$(sed 's/.*p99_ms=\([0-9.]*\).*/\1/' <<<"$line")")
  done
  printf '| %-28s | %5s | %9s | %7s | %7s | %6s |\n' "$name" "$conns" \
    "$(printf '%s\n' "${rps[@]}" | median)" "$(printf '%s\n' "${p50[@]}" | median)" \
    "$(printf '%s\n' "${p99[@]}" | median)" "$(( $(awk '/VmHWM/ {print $2}' /proc/$pid/status) / 1024 ))"
}

echo "| case                         | conns | req/s     | p50 ms  | p99 ms  | RSS MB |"
echo "|------------------------------|-------|-----------|---------|---------|--------|"
for c in ${CONNS:-1 16 256}; do
  run_case "GET /healthz" "$c" healthz
  run_case "signed webhook" "$c" webhook
  run_case "token report" "$c" events
done
# Paced: 10 connections x one request per 10 ms each ~ 1,000 requests/s.
run_case "healthz @ ~1k/s" 10 healthz 10
run_case "signed webhook @ ~1k/s" 10 webhook 10
run_case "token report @ ~1k/s" 10 events 10
echo "events stored: $(curl -s "http://$addr/metrics" | awk '/hushwatch_events_total\{outcome="accepted"/ {print $2}')" >&2
if [ "${WATCHDOG:-off}" = on ]; then
  # Evidence the watchdog was busy meanwhile: failed attempts counted on the
  # ladder, fallback pages queued, heartbeat pings that ran into their deadline.
  curl -s "http://$addr/metrics" | grep -E '^hushwatch_(notifier_consecutive_failures|notifications_total|heartbeat_total|outbox_pending)' >&2
fi
