#!/usr/bin/env bash
# Bounded-replay benchmark (issue #44; run by hand, not part of the test
# suite): a replay and a dry run over N stored rows while webhooks keep
# arriving, with the webhooks' latency beside this run's own floor and the
# sidecar's peak RSS. See bench/replay.py.
#
#   bench/replay.sh            # N=400000
#   N=100000 bench/replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import standardwebhooks' 2>/dev/null || python3 -m pip install --quiet standardwebhooks
cargo build --release --locked --bin hushwatch >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/replay.py "$PWD/target/release/hushwatch" "$work" "${N:-400000}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
