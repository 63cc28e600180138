#!/usr/bin/env bash
# Stream-count benchmark (run by hand; not part of the test suite).
#
# Runs a release hushwatch with 1 and with 10,000 configured streams, one
# after the other in the same run, and reports for each: startup to ready
# (spawn until /readyz answers 200, fresh state file; also the CPU time the
# process used until then, which a shared machine distorts less), idle RSS (VmRSS two
# seconds after ready), one /metrics scrape (median wall time of 5, the
# server's CPU time per scrape, and the page size),
# ingest of token reports to one stream at 16 connections (wrk, median of
# RUNS), and two peaks: the peak RSS while scraping (VmHWM over the five
# scrapes) and the peak RSS under the ingest load (VmHWM over the wrk runs).
# Each peak is measured from a reset high-water mark (writing 5 to
# /proc/PID/clear_refs, see proc(5)), so neither includes start-up (the
# config parse) nor the other. Then 100,000 templated
# streams: the state file is filled with 100,000 `org:N` rows and the
# process restarted, to report startup to ready and one scrape.
# Calendar: Asia/Tokyo, split day (lunch break), holidays. Client and
# server share the machine's cores.
#
#   bench/scale.sh             # RUNS=3 DURATION=10s
#   HUSHWATCH_BIN=path/to/hushwatch bench/scale.sh   # a prebuilt binary, no cargo build
#   STREAMS=10000 TEMPLATED=no bench/scale.sh         # only some rows (default: 1 10000, yes)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
DURATION="${DURATION:-10s}"
STREAMS="${STREAMS:-1 10000}"
TEMPLATED="${TEMPLATED:-yes}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
if [ -n "${HUSHWATCH_BIN:-}" ]; then
  bin="$(realpath "$HUSHWATCH_BIN")"
else
  cargo build --release --locked --bin hushwatch >&2
  bin="$PWD/target/release/hushwatch"
fi

work="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now_ms() { date +%s%3N; }

write_config() { # dir streams templated
  local dir="$1" n="$2" templated="$3"
  mkdir -p "$dir"
  cat > "$dir/hushwatch.toml" <<TOML
[server]
listen = "127.0.0.1:0"
data_dir = "data"
max_streams = 100000
admin_token = "bench-admin"

[calendars.tokyo]
timezone = "Asia/Tokyo"
weekly = ["mon-fri 09:00-12:00", "mon-fri 13:00-18:00"]
holidays = ["2026-12-31", "2027-01-01..2027-01-03"]

[streams.identity]
calendar = "tokyo"
silence_threshold = "4h"
[streams.identity.ingest]
token = "bench-token"
TOML
  python3 - "$dir/hushwatch.toml" "$n" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "a") as f:
    for i in range(1, n):
        f.write(f'\n[streams.s{i:05}]\ncalendar = "tokyo"\nsilence_threshold = "4h"\n'
                f'[streams.s{i:05}.ingest]\ntoken = "bench-token"\n')
PY
  if [ "$templated" = yes ]; then
    cat >> "$dir/hushwatch.toml" <<TOML

[templates.org]
calendar = "tokyo"
silence_threshold = "4h"
[templates.org.ingest]
token = "bench-token"

[streams."org:*"]
template = "org"
TOML
  fi
}

start() { # dir -> sets pid, addr, ready_ms
  local dir="$1" t0
  : > "$dir/err.log"
  t0="$(now_ms)"
  HUSHWATCH_LOG=warn,hushwatch::service=info "$bin" serve --config "$dir/hushwatch.toml" 2>"$dir/err.log" &
  pid=$!
  for _ in $(seq 3000); do grep -q "listening on" "$dir/err.log" && break; sleep 0.005; done
  addr="$(grep -o 'listening on [0-9.:]*' "$dir/err.log" | head -1 | cut -d' ' -f3)"
  until curl -sf -o /dev/null "http://$addr/readyz"; do sleep 0.005; done
  ready_ms=$(( $(now_ms) - t0 ))
  ready_cpu_ms="$(cpu_ms)"
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

rss_mb() { awk -v k="$1" '$1 == k":" {printf "%.0f", $2 / 1024}' "/proc/$pid/status"; }
# Resets VmHWM to the current RSS, so the next reading is this phase's peak.
reset_peak() { echo 5 > "/proc/$pid/clear_refs"; }

cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.0f", ($14 + $15) * 1000 / hz}' "/proc/$pid/stat"; }

scrape() { # -> "ms bytes cpu_ms" (median wall time of 5, mean CPU time of the server per scrape)
  local times=() size cpu0
  cpu0="$(cpu_ms)"
  for _ in 1 2 3 4 5; do
    read -r t size < <(curl -s -o /dev/null -w '%{time_total} %{size_download}\n' "http://$addr/metrics")
    times+=("$(awk -v t="$t" 'BEGIN {printf "%.1f", t * 1000}')")
  done
  echo "$(printf '%s\n' "${times[@]}" | median) $size $(( ($(cpu_ms) - cpu0) / 5 ))"
}

ingest() { # -> median req/s (requests written beforehand to $work/s)
  local rps=()
  for _ in $(seq "$RUNS"); do
    out="$(wrk -t2 -c16 -d"$DURATION" -s "$work/s.lua" "http://$addr")"
    line="$(grep RESULT <<<"$out")"
    grep -q "errors=0 non2xx=0" <<<"$line" || { echo "errors: $line" >&2; exit 1; }
    rps+=("$(sed 's/.*rps=\([0-9.]*\).*/\1/' <<<"$line")")
  done
  printf '%s\n' "${rps[@]}" | median
}

echo "$(nproc) cores, $(uname -m); runs=$RUNS duration=$DURATION" >&2
echo "| streams | startup to ready (CPU) | idle RSS | peak RSS scraping | one /metrics scrape (CPU) | peak RSS under load | ingest (16 conns) |"
echo "|---|---|---|---|---|---|---|"
for n in $STREAMS; do
  dir="$work/n$n"
  write_config "$dir" "$n" no
  start "$dir"
  sleep 2
  idle="$(rss_mb VmRSS)"
  reset_peak
  read -r scrape_ms scrape_bytes scrape_cpu < <(scrape)
  scrape_peak="$(rss_mb VmHWM)"
  python3 bench/gen_requests.py events 60000 0 "$work/s"
  reset_peak
  rps="$(ingest)"
  load_peak="$(rss_mb VmHWM)"
  stop
  printf '| %s | %.2f s (%s ms) | %s MB | %s MB | %s ms (%s ms), %s KB | %s MB | %s/s |\n' "$n" \
    "$(awk -v m="$ready_ms" 'BEGIN {print m / 1000}')" "$ready_cpu_ms" "$idle" "$scrape_peak" \
    "$scrape_ms" "$scrape_cpu" "$(( scrape_bytes / 1024 ))" "$load_peak" "$rps"
done

[ "$TEMPLATED" = yes ] || exit 0
# 100,000 templated streams: create the schema, fill it, restart.
dir="$work/templated"
write_config "$dir" 1 yes
start "$dir"
stop
python3 - "$dir/data/hushwatch.sqlite3" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
now = int(time.time() * 1000)
rows = [(f"org:{i:06}", now) for i in range(100_000)]
db.executemany("INSERT INTO templated_streams (name, created_at) VALUES (?, ?)", rows)
db.executemany("INSERT INTO streams (name, watch_started_at) VALUES (?, ?)", rows)
db.commit()
PY
start "$dir"
sleep 2
idle="$(rss_mb VmRSS)"
reset_peak
read -r scrape_ms scrape_bytes scrape_cpu < <(scrape)
scrape_peak="$(rss_mb VmHWM)"
stop
printf '| 100,000 templated | %.2f s (%s ms) | %s MB | %s MB | %s ms (%s ms), %s KB | — | — |\n' \
  "$(awk -v m="$ready_ms" 'BEGIN {print m / 1000}')" "$ready_cpu_ms" "$idle" "$scrape_peak" "$scrape_ms" \
  "$scrape_cpu" "$(( scrape_bytes / 1024 ))"
