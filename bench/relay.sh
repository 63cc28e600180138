#!/usr/bin/env bash
# Relay-mode benchmark (issue #29; run by hand, not part of the test suite):
# added latency received -> app 2xx beside /healthz and the app's own floor,
# then a backlog of N events stored while the app answers 502, with the
# memory and disk it costs and the time from the app's recovery to the last
# event delivered, ordered and unordered. See bench/relay.py. Then the
# relay under load (issue #46): accepted/s, delivered/s, their ratio and
# latency under that load beside the app's own floor. See
# bench/relay_load.py.
#
#   bench/relay.sh            # N=100000
#   N=10000 bench/relay.sh
#   LOAD_ONLY=1 LOAD_N=20000 bench/relay.sh   # only the load cases
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import standardwebhooks' 2>/dev/null || python3 -m pip install --quiet standardwebhooks
cargo build --release --locked --bin hushwatch >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${LOAD_ONLY:-}" ]; then
  python3 bench/relay.py "$PWD/target/release/hushwatch" "$work" "${N:-100000}"
fi
python3 bench/relay_load.py "$PWD/target/release/hushwatch" "$work" "${LOAD_N:-20000}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
